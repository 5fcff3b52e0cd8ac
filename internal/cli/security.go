package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/client"
)

// The SIEM and the guard from the command line: get alerts|rules, delete
// rule, block, allow and respond (an alert's suggested action applied).

// alertFlags are get alerts' own flags.
type alertFlags struct {
	severity, rule, deployment, namespace string
	limit                                 int
	follow                                bool
}

func (f *alertFlags) add(fs *flag.FlagSet) {
	fs.StringVar(&f.severity, "severity", "", "minimum severity")
	fs.StringVar(&f.rule, "rule", "", "detection rule")
	fs.StringVar(&f.deployment, "d", "", "deployment")
	fs.StringVar(&f.deployment, "deployment", "", "deployment")
	fs.StringVar(&f.namespace, "n", "", "namespace")
	fs.StringVar(&f.namespace, "namespace", "", "namespace")
	fs.IntVar(&f.limit, "limit", 0, "at most this many alerts")
	fs.BoolVar(&f.follow, "follow", false, "keep printing alerts as they are raised or grow")
	fs.BoolVar(&f.follow, "f", false, "keep printing alerts as they are raised or grow")
}

// getAlerts is get alerts: the SIEM's findings, newest first; --follow
// then prints each new alert and each one whose count grew, oldest first.
func getAlerts(ctx context.Context, e *env, args []string) error {
	_, name, rest := splitResource(args)
	if name != "" {
		return usagef("get alerts takes no name (filter with --rule, --severity, -d, -n)")
	}
	var f alertFlags
	fs := e.flagSet("get")
	f.add(fs)
	if err := e.parseNone(fs, rest); err != nil {
		return err
	}
	switch apitype.Severity(f.severity) {
	case "", apitype.SeverityInfo, apitype.SeverityLow, apitype.SeverityMedium, apitype.SeverityHigh, apitype.SeverityCritical:
	default:
		return usagef("--severity %q: want info, low, medium, high or critical", f.severity)
	}
	c, err := e.client()
	if err != nil {
		return err
	}
	filter := client.SecurityFilter{Severity: apitype.Severity(f.severity), Rule: f.rule, Deployment: f.deployment, Namespace: f.namespace, Limit: f.limit}
	if e.structured() && !f.follow {
		return e.fetchAndPrint(ctx, c, "GET", "/security?"+securityQuery(filter), nil, nil)
	}
	resp, err := c.Security(ctx, filter)
	if err != nil {
		return err
	}
	if !resp.Enabled {
		fmt.Fprintln(e.stderr, "Detection is off on this server (--siem=false); guard rules still apply.")
	}
	if !f.follow {
		if len(resp.Alerts) == 0 {
			fmt.Fprintln(e.stderr, "No alerts.")
			return nil
		}
		tw := newTable(e.stdout)
		alertHeader(tw)
		for _, a := range resp.Alerts {
			alertRow(tw, a)
		}
		return tw.Flush()
	}
	// Follow: print what is there (oldest first), then what changes.
	seen := map[int64]int{} // id → count printed
	tw := newTable(e.stdout)
	alertHeader(tw)
	tw.Flush()
	every := e.pollInterval
	if every <= 0 {
		every = defaultPollInterval
	}
	for {
		for i := len(resp.Alerts) - 1; i >= 0; i-- {
			a := resp.Alerts[i]
			if n, ok := seen[a.ID]; ok && n == a.Count {
				continue
			}
			seen[a.ID] = a.Count
			alertRow(tw, a)
		}
		tw.Flush()
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(every):
		}
		if resp, err = c.Security(ctx, filter); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
}

func securityQuery(f client.SecurityFilter) string {
	q := url.Values{}
	for _, kv := range [][2]string{{"severity", string(f.Severity)}, {"rule", f.Rule}, {"deployment", f.Deployment}, {"namespace", f.Namespace}} {
		if kv[1] != "" {
			q.Set(kv[0], kv[1])
		}
	}
	if f.Limit > 0 {
		q.Set("limit", strconv.Itoa(f.Limit))
	}
	return q.Encode()
}

func alertHeader(tw interface{ Write([]byte) (int, error) }) {
	row(tw, "ID", "SEVERITY", "RULE", "CLIENT", "DEPLOYMENT", "COUNT", "LAST", "TITLE")
}

func alertRow(tw interface{ Write([]byte) (int, error) }, a apitype.SecurityAlert) {
	last := a.LastTs / 1000 // milliseconds
	row(tw, a.ID, a.Severity, a.Rule, orDash(a.Client), orDash(a.Deployment), a.Count, stamp(&last), a.Title)
}

// getRules is get rules [ID]: the guard rules in force.
func (e *env) getRules(ctx context.Context, id string) error {
	c, err := e.client()
	if err != nil {
		return err
	}
	if e.structured() {
		return e.printItem(ctx, c, "/security?limit=1", "rules", "rule", "id", id)
	}
	resp, err := c.Security(ctx, client.SecurityFilter{Limit: 1})
	if err != nil {
		return err
	}
	rules := resp.Rules
	if id != "" {
		rules = nil
		for _, r := range resp.Rules {
			if r.ID == id {
				rules = append(rules, r)
			}
		}
		if len(rules) == 0 {
			return fmt.Errorf("no rule %q", id)
		}
	}
	if len(rules) == 0 {
		fmt.Fprintln(e.stderr, "No guard rules.")
		return nil
	}
	tw := newTable(e.stdout)
	row(tw, "ID", "ACTION", "HITS", "EXPIRES", "MATCH", "NOTE")
	for _, r := range rules {
		exp := "never"
		if r.ExpiresAt != nil {
			exp = stamp(r.ExpiresAt)
		}
		row(tw, r.ID, r.Action, r.Hits, exp, r.Summary, orDash(r.Note))
	}
	if !resp.Guard.Enforcing {
		row(tw)
		row(tw, "(the guard is not enforcing: matches are counted, nothing is refused)")
	}
	return tw.Flush()
}

// deleteRules is delete rule ID...
func (e *env) deleteRules(ctx context.Context, ids []string) error {
	if len(ids) == 0 {
		return usagef("missing rule ID")
	}
	c, err := e.client()
	if err != nil {
		return err
	}
	for _, id := range ids {
		if err := c.DeleteRule(ctx, id); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "rule/%s deleted\n", id)
	}
	return nil
}

var blockCmd = &command{
	name:    "block",
	summary: "Refuse a client's requests to the data plane (a guard rule)",
	help: `Usage: berth block CLIENT [--for DURATION] [-d DEPLOYMENT] [--note TEXT]

CLIENT is an address or a CIDR (203.0.113.9, 203.0.113.0/24, 2001:db8::/48).
Its requests get 403 "blocked" before anything serves them. --for ends the
rule after DURATION (1h, 30m; default: permanent); -d limits it to one
deployment. Blocking the same client again replaces the rule (to extend it).
Guard rules apply to the data plane only, never to the admin API.
`,
	run: func(ctx context.Context, e *env, args []string) error { return e.guardClient(ctx, "block", args) },
}

var allowCmd = &command{
	name:    "allow",
	summary: "Exempt a client from guard blocks and detection (a guard rule)",
	help: `Usage: berth allow CLIENT [--for DURATION] [-d DEPLOYMENT] [--note TEXT]

An allow rule wins over every block rule that also matches, whatever their
order, and exempts the client from the SIEM's detection too: for a monitor,
a load test or an office behind one address.
`,
	run: func(ctx context.Context, e *env, args []string) error { return e.guardClient(ctx, "allow", args) },
}

// guardClient is block and allow.
func (e *env) guardClient(ctx context.Context, action string, args []string) error {
	fs := e.flagSet(action)
	var dep, note string
	var dur time.Duration
	fs.StringVar(&dep, "d", "", "deployment")
	fs.StringVar(&dep, "deployment", "", "deployment")
	fs.StringVar(&note, "note", "", "note")
	fs.DurationVar(&dur, "for", 0, "duration")
	pos, err := e.parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("%s takes one CLIENT (an address or a CIDR)", action)
	}
	if _, err := netip.ParsePrefix(pos[0]); err != nil {
		if _, err := netip.ParseAddr(pos[0]); err != nil {
			return usagef("%q is not an address or a CIDR", pos[0])
		}
	}
	if dur < 0 {
		return usagef("--for %s: want a positive duration", dur)
	}
	spec := apitype.RuleSpec{Action: apitype.RuleAction(action), Match: apitype.RuleMatch{Client: pos[0], Deployment: dep}, Note: note}
	if dur > 0 {
		secs := int64((dur + time.Second - 1) / time.Second)
		spec.ExpiresInSecs = &secs
	}
	c, err := e.client()
	if err != nil {
		return err
	}
	if e.structured() {
		return e.fetchAndPrint(ctx, c, "POST", "/security/rules", spec, nil)
	}
	v, err := c.AddRule(ctx, spec)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "rule/%s: %s %s\n", v.ID, v.Action, v.Summary)
	return nil
}

var respondCmd = &command{
	name:    "respond",
	summary: "Apply an alert's suggested action (berth get alerts lists them)",
	help: `Usage: berth respond ALERT [ACTION]

Puts in force the guard rule an alert suggests. ACTION is one of the alert's
actions (block-client, block-client-deployment, block-path, exempt-client);
without it, the alert's actions are listed with what each stops and what it
leaves alone.
`,
	run: runRespond,
}

func runRespond(ctx context.Context, e *env, args []string) error {
	pos, err := e.parse(e.flagSet("respond"), args)
	if err != nil {
		return err
	}
	if len(pos) < 1 || len(pos) > 2 {
		return usagef("respond takes ALERT and optionally ACTION")
	}
	id, err := strconv.ParseInt(pos[0], 10, 64)
	if err != nil || id <= 0 {
		return usagef("ALERT %q: want an alert id (a number, from berth get alerts)", pos[0])
	}
	c, err := e.client()
	if err != nil {
		return err
	}
	resp, err := c.Security(ctx, client.SecurityFilter{Limit: 1000})
	if err != nil {
		return err
	}
	var alert *apitype.SecurityAlert
	for i := range resp.Alerts {
		if resp.Alerts[i].ID == id {
			alert = &resp.Alerts[i]
		}
	}
	if alert == nil {
		return fmt.Errorf("no alert %d (it may have aged out of the server's list)", id)
	}
	if len(pos) == 1 {
		fmt.Fprintf(e.stdout, "alert %d: %s\n", alert.ID, alert.Title)
		for _, s := range alert.Response.Investigate {
			fmt.Fprintf(e.stdout, "  check: %s\n", s)
		}
		tw := newTable(e.stdout)
		row(tw, "ACTION", "LABEL", "EFFECT")
		for _, a := range alert.Response.Actions {
			row(tw, a.Kind, a.Label, a.Effect)
		}
		tw.Flush()
		if alert.Response.Caveat != "" {
			fmt.Fprintf(e.stdout, "note: %s\n", alert.Response.Caveat)
		}
		return nil
	}
	for _, a := range alert.Response.Actions {
		if a.Kind == pos[1] {
			v, err := c.AddRule(ctx, a.Rule)
			if err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "rule/%s: %s %s\n", v.ID, v.Action, v.Summary)
			return nil
		}
	}
	var kinds []string
	for _, a := range alert.Response.Actions {
		kinds = append(kinds, a.Kind)
	}
	if len(kinds) == 0 {
		return errors.New("this alert suggests no action")
	}
	return usagef("alert %d has no action %q (it has %s)", id, pos[1], strings.Join(kinds, ", "))
}
