package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/client"
)

var statusCmd = &command{
	name:    "status",
	summary: "Show server health and a fleet summary",
	help: `Usage: berth status

Check that the server is up, then summarise the fleet from /metrics:
deployments, replicas ready and pending, requests in flight, the host's CPU
and memory, and requests served. -o json and -o yaml print the /metrics
reply (summary form) as received.
`,
	run: runStatus,
}

func runStatus(ctx context.Context, e *env, args []string) error {
	if err := e.parseNone(e.flagSet("status"), args); err != nil {
		return err
	}
	c, err := e.client()
	if err != nil {
		return err
	}
	if err := c.Health(ctx); err != nil {
		return fmt.Errorf("server %s is not healthy: %w", c.BaseURL(), err)
	}
	q := client.MetricsQuery{Summary: true}
	if e.structured() {
		return e.fetchAndPrint(ctx, c, "GET", "/metrics?"+q.Query(), nil, nil)
	}
	m, err := c.Metrics(ctx, q)
	if err != nil {
		return err
	}
	printStatus(e, c.BaseURL(), m)
	return nil
}

func printStatus(e *env, server string, m *apitype.MetricsResponse) {
	tw := newTable(e.stdout)
	kv := func(k string, v any) { row(tw, k+":", v) }
	kv("Server", server+" (healthy)")
	kv("Uptime", (time.Duration(m.UptimeSecs) * time.Second).String())
	daemon := "reachable"
	if !m.Daemon.Reachable {
		daemon = "unreachable"
		if m.Daemon.LastError != "" {
			daemon += ": " + m.Daemon.LastError
		}
	}
	kv("VM daemon", daemon)
	f := m.Fleet
	kv("Deployments", f.Deployments)
	kv("Ready", f.Ready)
	kv("Pending", f.Pending)
	kv("Draining", f.Draining)
	kv("In-flight", f.TotalInFlight)
	if h := m.Host; h.Available {
		kv("Host CPU", fmt.Sprintf("%.1f%% of %d CPUs", h.CPUPercent, h.CPUCount))
		mem := fmt.Sprintf("%s of %s", bytesIEC(h.MemoryUsedBytes), bytesIEC(h.MemoryTotalBytes))
		if h.MemoryTotalBytes > 0 {
			mem += fmt.Sprintf(" (%.1f%%)", 100*float64(h.MemoryUsedBytes)/float64(h.MemoryTotalBytes))
		}
		kv("Host memory", mem)
	} else {
		kv("Host CPU", "unavailable")
		kv("Host memory", "unavailable")
	}
	r := m.Global.Requests
	kv("Requests", fmt.Sprintf("%d total (2xx %d, 3xx %d, 4xx %d, 5xx %d, errors %d)",
		r.Total, r.C2xx, r.C3xx, r.C4xx, r.C5xx, r.Errors))
	if l := m.Global.LatencyMs; l.Count > 0 {
		kv("Latency", fmt.Sprintf("p50 %.0fms, p90 %.0fms, p99 %.0fms", l.P50, l.P90, l.P99))
	}
	tw.Flush()
}

// bytesIEC formats a byte count with binary units, one decimal place.
func bytesIEC(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for v := n / unit; v >= unit && exp < 5; v /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
