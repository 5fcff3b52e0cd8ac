package cli

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/client"
)

func init() {
	at := len(commands)
	for i, c := range commands {
		if c.name == "status" {
			at = i
			break
		}
	}
	commands = append(commands[:at], append([]*command{topCmd}, commands[at:]...)...)
}

var topCmd = &command{
	name:    "top",
	summary: "Show a namespace's deployments' traffic from the telemetry store",
	help: `Usage: berth top [-n NS] [--window W]

Print one line per deployment of the namespace: requests and errors per
second, latency percentiles and the pool's gauges in the newest bucket that
sampled anything, and the log lines (and error lines) of the window, from
the telemetry store (the obs API).

Flags:
  -n, --namespace NS   the namespace (default "default")
  --window W           15m, 1h, 6h, 24h or 7d (default 1h)
`,
	run: runTop,
}

func runTop(ctx context.Context, e *env, args []string) error {
	fs := e.flagSet("top")
	ns := fs.String("n", "default", "")
	fs.StringVar(ns, "namespace", "default", "")
	window := fs.String("window", "", "")
	pos, err := e.parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("top takes no arguments, got %q", pos[0])
	}
	c, err := e.client()
	if err != nil {
		return err
	}
	fl, err := c.ObsFleet(ctx, *ns, *window)
	if err != nil {
		return err
	}
	if len(fl.Deployments) == 0 {
		fmt.Fprintf(e.stdout, "No deployments in namespace %s.\n", *ns)
		return nil
	}
	tw := newTable(e.stdout)
	row(tw, "DEPLOYMENT", "REQ/S", "ERR/S", "P50", "P99", "READY", "IN-FLIGHT", "LINES", "ERRORS")
	for _, d := range fl.Deployments {
		l := d.Latest
		row(tw, d.ID, num(l.RequestsPerSec, "%.2f"), num(l.ErrorsPerSec, "%.2f"), num(l.P50Ms, "%.1fms"), num(l.P99Ms, "%.1fms"),
			num(l.Ready, "%.0f"), num(l.InFlight, "%.0f"), d.LogLines, d.ErrorLogs)
	}
	return tw.Flush()
}

// num formats a bucket's measure, "-" when nothing was sampled.
func num(v *float64, format string) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf(format, *v)
}

// telemetryFlags are logs' flags that read the telemetry store.
type telemetryFlags struct {
	since, grep, level, backend, ns *string
	fs                              *flag.FlagSet
}

func telemetryLogFlags(fs *flag.FlagSet) telemetryFlags {
	t := telemetryFlags{fs: fs, since: fs.String("since", "", ""), grep: fs.String("grep", "", ""), level: fs.String("level", "", ""),
		backend: fs.String("backend", "", ""), ns: fs.String("n", "", "")}
	fs.StringVar(t.ns, "namespace", "", "")
	return t
}

// set reports whether a flag asks for the telemetry store.
func (t telemetryFlags) set() bool {
	return *t.since != "" || *t.grep != "" || *t.level != "" || *t.backend != ""
}

// parseSince reads --since: a duration, or whole days as "7d".
func parseSince(v string) (time.Duration, error) {
	if d, ok := strings.CutSuffix(v, "d"); ok {
		if n, err := strconv.Atoi(d); err == nil && n > 0 {
			return time.Duration(n) * 24 * time.Hour, nil
		}
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, usagef("--since %q: want a duration such as 90m or 1h, or days such as 7d", v)
	}
	return d, nil
}

// telemetryLogs prints deployment id's stored lines of the span, the
// newest limit of them, oldest first.
func telemetryLogs(ctx context.Context, e *env, c *client.Client, id string, t telemetryFlags, limit int) error {
	since, err := parseSince(cmp.Or(*t.since, "1h"))
	if err != nil {
		return err
	}
	ns := *t.ns
	if ns == "" {
		st, _, err := c.Deployment(ctx, id)
		if err != nil {
			return err
		}
		ns = cmp.Or(st.Spec.Namespace, "default")
	}
	now := time.Now()
	q := client.ObsLogQuery{From: now.Add(-since).UnixMilli(), To: now.UnixMilli(), Level: *t.level, Backend: *t.backend, Q: *t.grep}
	var rows []apitype.ObsLogRow
	for len(rows) < limit {
		q.Limit = min(limit-len(rows), 1000)
		page, err := c.ObsLogs(ctx, ns, id, q)
		if err != nil {
			return err
		}
		rows = append(rows, page.Rows...)
		if page.NextBeforeMs == nil || len(page.Rows) == 0 {
			break
		}
		q.Before = *page.NextBeforeMs
	}
	slices.Reverse(rows)
	for _, r := range rows {
		line := msStamp(r.Ts) + " " + cmp.Or(deref(r.Level), "-") + " " + r.Source
		if b := deref(r.Backend); b != "" {
			line += " " + b
		}
		fmt.Fprintln(e.stdout, clean(line+" "+r.Message))
	}
	return nil
}
