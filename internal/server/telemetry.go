package server

import (
	"cmp"
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/admin"
	"github.com/berth-dev/berth/internal/auth"
	"github.com/berth-dev/berth/internal/obs"
	"github.com/berth-dev/berth/internal/proxy"
	"github.com/berth-dev/berth/internal/secrets"
	"github.com/berth-dev/berth/internal/telemetry"
	"github.com/berth-dev/berth/internal/vm"
)

// openTelemetry opens the telemetry store (<data>/telemetry.db, apart
// from the main store: telemetry is lossy) and the obs plugin's API over
// it. The proxy's Observe feeds it every finished request.
func (s *Server) openTelemetry(ctx context.Context, st Store, key secrets.Key) error {
	t, err := telemetry.Open(telemetry.Options{
		Dir: s.o.DataDir, Retention: s.o.TelemetryRetention, MaxBytes: s.o.TelemetryMaxBytes, AccessRows: s.o.TelemetryAccessRows,
		Sample: s.sampleGauges, Log: s.o.Log,
	})
	if err != nil {
		return err
	}
	h, err := obs.NewHandler(ctx, obs.Options{
		Telemetry: t, Store: st, Key: key, Self: s.self, AllowLinkLocal: s.o.AllowLinkLocalUpstreams,
		Visible: s.obsVisible, Deployments: s.obsDeployments, Log: s.o.Log, RootCAs: s.o.ObsWebhookRoots,
	})
	if err != nil {
		t.Close()
		return err
	}
	s.telemetry, s.obs = t, h
	return nil
}

// closeTelemetry stops the alert deliveries and writes what is queued.
func (s *Server) closeTelemetry() {
	if s.obs != nil {
		s.obs.Close()
	}
	if s.telemetry != nil {
		if err := s.telemetry.Close(); err != nil {
			s.log.Warn("telemetry store closed with an error", "err", err)
		}
	}
}

// obsVisible is the obs API's Visible: deployment id is in namespace ns
// and the caller touches it (the deployment wall).
func (s *Server) obsVisible(r *http.Request, ns, id string) bool {
	e, ok := s.registry.Get(id)
	if !ok {
		return false
	}
	dns := cmp.Or(e.Spec.Namespace, "default")
	return dns == ns && auth.FromContext(r.Context()).Touches(id, ns)
}

// obsDeployments is the obs API's Deployments: namespace ns's deployments
// the caller touches.
func (s *Server) obsDeployments(r *http.Request, ns string) []string {
	p := auth.FromContext(r.Context())
	var out []string
	for _, e := range s.registry.List() {
		if cmp.Or(e.Spec.Namespace, "default") == ns && p.Touches(e.Spec.ID, ns) {
			out = append(out, e.Spec.ID)
		}
	}
	return out
}

// sampleGauges is the telemetry store's Sample: every deployment's pool,
// and the CPU and memory of its replicas summed where the driver reads
// them (vm.UsageReader; null in the buckets where it does not, or for a
// deployment with no replica to read).
func (s *Server) sampleGauges() []telemetry.Gauge {
	if s.registry == nil {
		return nil
	}
	// The writer goroutine waits on this: a driver slow to answer costs
	// its deployments' usage for the sample, not the queue's drain.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var out []telemetry.Gauge
	for _, e := range s.registry.List() {
		st := admin.Status(e)
		g := telemetry.Gauge{Namespace: cmp.Or(e.Spec.Namespace, "default"), Deployment: e.Spec.ID, CPUPercent: -1, MemoryBytes: -1,
			InFlight: float64(st.TotalInFlight), Ready: float64(st.Ready), Pending: float64(st.Pending)}
		for _, v := range st.VMs {
			if v.Draining {
				g.Draining++
			}
		}
		if e.VMPool != nil && len(st.VMs) > 0 && ctx.Err() == nil {
			if ur, ok := e.VMPool.Driver().(vm.UsageReader); ok {
				var cpu, mem float64
				n := 0
				for _, v := range st.VMs {
					if u, err := ur.Usage(ctx, v.SandboxID); err == nil {
						cpu += u.CPUPercent
						mem += float64(u.MemoryBytes)
						n++
					}
				}
				if n > 0 {
					g.CPUPercent, g.MemoryBytes = cpu, mem
				}
			}
		}
		out = append(out, g)
	}
	return out
}

// obsStats is /metrics' obs: the telemetry queue. queued is what waits in
// the queue (or the writer's batch), shipped what was committed to the
// telemetry store, failed what was lost with a batch that did not
// commit, dropped what found the queue full; healthy says the last write
// committed.
func (s *Server) obsStats() apitype.ObsStats {
	st := s.telemetry.Stats()
	return apitype.ObsStats{Queued: st.Buffered, Dropped: int(st.Dropped), Shipped: int(st.Written), Failed: int(st.Failed), Healthy: st.Healthy}
}

// recordAccess hands a finished request to the telemetry store. The
// Completion's strings are copied by Access.
func (s *Server) recordAccess(c *proxy.Completion) {
	if s.telemetry == nil {
		return
	}
	ns := c.Namespace
	if c.Deployment != "" && ns == "" {
		ns = "default"
	}
	s.telemetry.Access(&telemetry.Access{
		Time: c.Time, Method: c.Method, Path: c.Path, Status: c.Status, Duration: c.Duration, Bytes: c.Bytes,
		Host: c.Host, Client: c.Client, Backend: c.Backend, Deployment: c.Deployment, Namespace: ns, Unrouted: c.Unrouted,
	})
}

// jobLine is the jobs' OnLog: job output, to the telemetry store.
func (s *Server) jobLine(ns, dep, jobID, line string) {
	if s.telemetry == nil {
		return
	}
	s.telemetry.Line(telemetry.Line{Namespace: ns, Deployment: dep, Source: "job", Message: line, Fields: `{"job_id":` + strconv.Quote(jobID) + `}`})
}

// eventLine records an event (a gate's refusal, a SIEM alert) in the
// telemetry store, under its deployment (whose namespace is looked up
// when ns is empty), or under telemetry.Unrouted without one.
func (s *Server) eventLine(source, level, ns, dep, host, msg string) {
	if s.telemetry == nil {
		return
	}
	if dep == "" {
		dep, ns = telemetry.Unrouted, ""
	} else if ns == "" && s.registry != nil {
		if e, ok := s.registry.Get(dep); ok {
			ns = e.Spec.Namespace
		}
		ns = cmp.Or(ns, "default")
	}
	s.telemetry.Line(telemetry.Line{Namespace: ns, Deployment: dep, Source: source, Level: level, Message: msg, Host: host})
}
