package admin

import (
	"context"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/auth"
	"github.com/berth-dev/berth/internal/metrics"
	"github.com/berth-dev/berth/internal/registry"
	"github.com/berth-dev/berth/internal/spec"
	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/web"
)

func (a *API) ingress(w http.ResponseWriter, r *http.Request) error {
	in := apitype.Ingress{IPv4: []string{}, IPv6: []string{}}
	for _, s := range a.o.PublicIPs {
		ip, err := netip.ParseAddr(strings.TrimSpace(s))
		if err != nil {
			continue
		}
		if ip.Is4() {
			in.IPv4 = append(in.IPv4, ip.String())
		} else {
			in.IPv6 = append(in.IPv6, ip.String())
		}
	}
	web.WriteJSON(w, http.StatusOK, in)
	return nil
}

type metricsQuery struct {
	deployment, prefix, namespace string
	summary                       bool
	// fleet (scope=fleet) rolls fleet up over every host of the fleet,
	// from their reports, not this host's deployments alone.
	fleet         bool
	limit, offset int // limit < 0: all
}

func parseMetricsQuery(r *http.Request) (metricsQuery, error) {
	q := r.URL.Query()
	mq := metricsQuery{deployment: q.Get("deployment"), prefix: q.Get("prefix"), namespace: q.Get("namespace"), limit: -1}
	switch v := q.Get("summary"); v {
	case "", "false":
	case "true":
		mq.summary = true
	default:
		return mq, web.Invalid("summary", "must be true or false, got %q", v)
	}
	switch v := q.Get("scope"); v {
	case "", "host":
	case "fleet":
		mq.fleet = true
	default:
		return mq, web.Invalid("scope", "must be host or fleet, got %q", v)
	}
	for _, p := range []struct {
		name string
		dst  *int
	}{{"limit", &mq.limit}, {"offset", &mq.offset}} {
		v := q.Get(p.name)
		if v == "" {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return mq, web.Invalid(p.name, "must be a non-negative integer, got %q", v)
		}
		*p.dst = n
	}
	return mq, nil
}

// metrics is GET /metrics: the MetricsResponse of app-lb.md §2.5.
func (a *API) metrics(w http.ResponseWriter, r *http.Request) error {
	q, err := parseMetricsQuery(r)
	if err != nil {
		return err
	}
	resp := a.metricsSnapshot(r, caller(r), q)
	if q.fleet {
		// The whole fleet's pool, from every host's last report: a
		// fleet-wide view, for a fleet-wide credential.
		if !caller(r).Fleet() {
			return web.Errorf(http.StatusForbidden, "scope=fleet is a fleet-wide view: this credential is confined")
		}
		hs, byHost, err := a.hostsAndReports(r)
		if err != nil {
			return err
		}
		resp.Fleet = summarize(hs, byHost).Pool
	}
	web.WriteJSON(w, http.StatusOK, resp)
	return nil
}

// metricsSnapshot is the MetricsResponse p sees for q.
func (a *API) metricsSnapshot(r *http.Request, p *auth.Principal, q metricsQuery) apitype.MetricsResponse {
	now := time.Now()
	entries := slices.DeleteFunc(a.o.Registry.List(), func(e *registry.Entry) bool { return !visible(p, e) })
	resp := apitype.MetricsResponse{
		GeneratedAt:        now.Unix(),
		UptimeSecs:         int(now.Sub(a.o.Started).Seconds()),
		Daemon:             apitype.DaemonSnapshot{Reachable: true},
		Deployments:        []apitype.DeploymentView{},
		TrackedDeployments: len(entries),
	}
	if a.o.Host != nil {
		resp.Host = hostUsage(a.o.Host.Latest())
	}
	if a.o.Metrics != nil {
		resp.Global = deploymentMetrics(a.o.Metrics.Global())
	} else {
		resp.Global = deploymentMetrics(metrics.DeploymentSnapshot{})
	}
	var matched []*registry.Entry
	for _, e := range entries {
		v := Status(e)
		resp.Fleet.Deployments++
		resp.Fleet.Ready += v.Ready
		resp.Fleet.Pending += v.Pending
		resp.Fleet.TotalInFlight += v.TotalInFlight
		for _, vm := range v.VMs {
			if vm.Draining {
				resp.Fleet.Draining++
			}
		}
		if q.deployment != "" && e.Spec.ID != q.deployment ||
			q.prefix != "" && !strings.HasPrefix(e.Spec.ID, q.prefix) ||
			q.namespace != "" && namespace(e) != q.namespace {
			continue
		}
		matched = append(matched, e)
	}
	resp.Matched = len(matched)
	if q.offset < len(matched) {
		matched = matched[q.offset:]
	} else {
		matched = nil
	}
	if q.limit >= 0 && q.limit < len(matched) {
		matched = matched[:q.limit]
	}
	for _, e := range matched {
		resp.Deployments = append(resp.Deployments, a.view(r.Context(), e, now, q.summary))
	}
	if !q.summary {
		resp.HostSandboxes = []apitype.HostSandboxView{}
		if p.Fleet() && a.o.Disks != nil {
			// The sandboxes no deployment owns, from the disk census; a
			// caller below the fleet owns none of them.
			if hs, err := a.o.Disks.HostSandboxes(r.Context()); err == nil {
				resp.HostSandboxes = hs
			} else {
				a.o.Log.Warn("host sandboxes: the disk census failed", "err", err)
			}
		}
	}
	resp.Security = a.securitySummary(p)
	if a.o.ObsStats != nil && p.Fleet() {
		st := a.o.ObsStats()
		resp.Obs = &st
	}
	if !p.Fleet() {
		// A caller below the fleet sees its own deployments only: not the
		// host, the daemon or the whole gateway's traffic.
		resp.Host, resp.Daemon = apitype.HostUsage{}, apitype.DaemonSnapshot{}
		resp.Global = deploymentMetrics(metrics.DeploymentSnapshot{})
	}
	return resp
}

func (a *API) view(ctx context.Context, e *registry.Entry, now time.Time, summary bool) apitype.DeploymentView {
	st := Status(e)
	v := apitype.DeploymentView{
		ID:         e.Spec.ID,
		Kind:       e.Kind,
		Upstreams:  append([]string{}, e.Upstreams...),
		Routed:     len(e.Spec.Routes) > 0,
		Hosts:      []string{},
		VMs:        []apitype.VmView{},
		PendingVMs: []apitype.PendingVmView{},
		AccountID:  e.Spec.AccountID,
	}
	if ns := e.Spec.Namespace; ns != "" && ns != "default" {
		v.Namespace = ns
	}
	if e.Spec.Update != nil {
		v.JobKind = apitype.JobActionUpdate // POST /deployments/{id}/update applies
	}
	for _, rr := range e.Spec.Routes {
		if rr.Host != "" {
			v.Hosts = append(v.Hosts, rr.Host)
			v.URLs = append(v.URLs, "http://"+rr.Host+rr.PathPrefix)
		}
	}
	if e.Site != nil {
		v.SiteRoot = e.Site.Root
		if e.Site.SPA {
			t := true
			v.SiteSPA = &t
		}
	}
	v.Pool = apitype.PoolStatus{
		DesiredReplicas: st.DesiredReplicas,
		Ready:           st.Ready,
		Pending:         st.Pending,
		TotalInFlight:   st.TotalInFlight,
	}
	if e.VMPool != nil {
		a.vmPool(ctx, &v, e, now, summary)
	} else {
		for _, vm := range st.VMs {
			if vm.Draining {
				v.Pool.Draining++
			}
			if !summary {
				v.VMs = append(v.VMs, apitype.VmView{SandboxID: vm.SandboxID, Addr: vm.Addr, InFlight: vm.InFlight, Healthy: vm.Healthy, Draining: vm.Draining})
			}
		}
	}
	var snap metrics.DeploymentSnapshot
	if a.o.Metrics != nil {
		if d, ok := a.o.Metrics.Lookup(e.Spec.ID); ok {
			snap = d.Snapshot()
		}
	}
	if snap.LatencyMs.Buckets == nil {
		snap = metrics.NewDeployment().Snapshot()
	}
	v.Metrics = deploymentMetrics(snap)
	return v
}

// vmPool fills a vm deployment's pool, replicas and pending replicas.
func (a *API) vmPool(ctx context.Context, v *apitype.DeploymentView, e *registry.Entry, now time.Time, summary bool) {
	ps := e.VMPool.Status()
	pol := spec.Scaling(e.Spec.Scaling)
	v.Pool = apitype.PoolStatus{
		DesiredReplicas: ps.Desired, Ready: ps.Ready + ps.Draining, Draining: ps.Draining, Pending: ps.Pending,
		TotalInFlight: ps.InFlight, TargetConcurrency: pol.TargetConcurrency, MinReplicas: pol.MinReplicas,
		MaxReplicas: pol.MaxReplicas, WarmPool: pol.WarmPool, BootTimeoutSecs: pol.BootTimeoutSecs,
		ColdStartTimeoutSecs: pol.ColdStartTimeoutSecs, BootFailures: ps.Failures,
	}
	if ps.BackoffFor > 0 {
		n := int(ps.BackoffFor.Seconds() + 0.999)
		v.Pool.BootBackoffSecs = &n
	}
	if avail := ps.Ready; avail > 0 {
		u := float64(ps.InFlight) / float64(avail*max(pol.TargetConcurrency, 1))
		v.Pool.Utilization = &u
	}
	ur, _ := e.VMPool.Driver().(vm.UsageReader)
	var cpu float64
	var mem int64
	measured := false
	for _, r := range ps.Replicas {
		if r.Phase == "pending" {
			if !summary {
				v.PendingVMs = append(v.PendingVMs, apitype.PendingVmView{SandboxID: r.ID, AgeSecs: int(now.Sub(r.Since).Seconds()), Status: r.Status})
			}
			continue
		}
		view := apitype.VmView{SandboxID: r.ID, Addr: r.Addr, InFlight: r.InFlight, Healthy: r.Healthy, Draining: r.Draining, UptimeSecs: int(now.Sub(r.Since).Seconds())}
		if ur != nil {
			if u, err := ur.Usage(ctx, r.ID); err == nil {
				c, m := u.CPUPercent, u.MemoryBytes
				view.CPUPercent, view.MemoryBytes = &c, &m
				cpu += c
				mem += m
				measured = true
			}
		}
		if !summary {
			v.VMs = append(v.VMs, view)
		}
	}
	if measured {
		v.Pool.CPUPercent, v.Pool.MemoryBytes = &cpu, &mem
	}
}

func hostUsage(h metrics.HostUsage) apitype.HostUsage {
	return apitype.HostUsage{
		Available:        h.Available,
		CPUCount:         h.CPUCount,
		CPUPercent:       h.CPUPercent,
		MemoryTotalBytes: int64(h.MemoryTotalBytes),
		MemoryUsedBytes:  int64(h.MemoryUsedBytes),
		SampledAtMs:      h.SampledAtMs,
	}
}

func deploymentMetrics(s metrics.DeploymentSnapshot) apitype.DeploymentMetrics {
	if s.LatencyMs.Buckets == nil {
		s = metrics.NewDeployment().Snapshot()
	}
	a := s.Autoscale
	return apitype.DeploymentMetrics{
		Requests: apitype.StatusCounts{
			Total: int(s.Requests.Total), C2xx: int(s.Requests.C2xx), C3xx: int(s.Requests.C3xx),
			C4xx: int(s.Requests.C4xx), C5xx: int(s.Requests.C5xx), Errors: int(s.Requests.Errors),
		},
		LatencyMs:  histogram(s.LatencyMs),
		ColdStartS: histogram(s.ColdStartS),
		Autoscale: apitype.AutoscaleCounts{
			VMsCreated: int(a.VMsCreated), VMsDrained: int(a.VMsDrained), VMsReaped: int(a.VMsReaped),
			ScaleUpEvents: int(a.ScaleUpEvents), ScaleDownEvents: int(a.ScaleDownEvents),
			ColdStartWaits: int(a.ColdStartWaits), ColdStartHits: int(a.ColdStartHits),
			ColdStartTimeouts: int(a.ColdStartTimeouts), BootTimeouts: int(a.BootTimeouts),
			CreateFailures: int(a.CreateFailures), LastCreateError: a.LastCreateError,
		},
	}
}

func histogram(h metrics.HistogramSnapshot) apitype.Histogram {
	out := apitype.Histogram{Count: int(h.Count), Sum: h.Sum, Mean: h.Mean, P50: h.P50, P90: h.P90, P99: h.P99, Buckets: []apitype.Bucket{}}
	for _, b := range h.Buckets {
		out.Buckets = append(out.Buckets, apitype.Bucket{Le: b.Le, Count: int(b.Count)})
	}
	return out
}

// coldStartView is one deployment's cold-start phase histograms. berth adds
// this route; app-lb has no counterpart, so the contract's types are left
// untouched.
type coldStartView struct {
	ID     string                       `json:"id"`
	Phases map[string]apitype.Histogram `json:"phases"`
}

// coldStarts is GET /metrics/cold-start[?deployment=]: for the requests held
// while a replica started, how long each phase took (queue, create, boot,
// first_byte, total), per deployment, in seconds.
func (a *API) coldStarts(w http.ResponseWriter, r *http.Request) error {
	want := r.URL.Query().Get("deployment")
	out := struct {
		Deployments []coldStartView `json:"deployments"`
	}{Deployments: []coldStartView{}}
	for _, e := range a.o.Registry.List() {
		if e.Kind != apitype.KindVM || (want != "" && e.Spec.ID != want) {
			continue
		}
		v := coldStartView{ID: e.Spec.ID, Phases: map[string]apitype.Histogram{}}
		d := a.o.Metrics.Get(e.Spec.ID)
		for name, h := range d.Phases.Snapshot() {
			v.Phases[name] = histogram(h)
		}
		out.Deployments = append(out.Deployments, v)
	}
	web.WriteJSON(w, http.StatusOK, out)
	return nil
}
