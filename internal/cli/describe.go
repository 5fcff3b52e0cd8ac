package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/client"
)

var describeCmd = &command{
	name:    "describe",
	summary: "Show one resource in detail",
	help: `Usage: berth describe KIND NAME
       berth describe KIND/NAME

KIND is any kind 'berth get' lists: deployment, vm (-d DEPLOYMENT),
secret (-n NAMESPACE), namespace, token, image, computer. Kinds other than
deployment print the resource's fields, one per line.

describe deployment shows one deployment for people: its routes, kind and backend, the scaling
and health settings that apply, its live status, a table of its backends
(VMs or upstreams) and its ETag; a discovery-backed deployment also shows
its service's members as the fleet holds them (GET
/deployments/ID/discovery-status). -o json and -o yaml print the server's
reply as received instead.
`,
	run: runDescribe,
}

func runDescribe(ctx context.Context, e *env, args []string) error {
	return dispatch(ctx, e, "describe", args)
}

// describeDeployment is describe deployment ID.
func describeDeployment(ctx context.Context, e *env, args []string) error {
	id, c, err := e.deploymentClient("describe", args, true)
	if err != nil {
		return err
	}
	if e.structured() {
		return e.fetchAndPrint(ctx, c, "GET", deploymentPath(id), nil, nil)
	}
	st, etag, err := c.Deployment(ctx, id)
	if err != nil {
		return err
	}
	describe(e.stdout, st, etag, startView(ctx, c, st))
	if st.Spec.Discovery != nil {
		describeDiscovery(ctx, e, c, st)
	}
	if st.Kind == apitype.KindVM {
		// A rollout in progress, when the server keeps them (an older
		// one or app-lb answers an error, and describe shows the rest).
		if ops, err := c.Rollouts(ctx, id, 1); err == nil && len(ops) == 1 && ops[0].Status == "running" {
			fmt.Fprintf(e.stdout, "\nRollout in progress: %s (%s) from %s to %s; see berth rollout status %s\n",
				ops[0].OperationID, ops[0].Phase, shortRev(ops[0].SourceRevision), shortRev(ops[0].TargetSpecSHA256), id)
		}
	}
	return nil
}

// startView returns a vm deployment's metrics view, which carries the boot
// backoff and the last failed create (DeploymentStatus has no place for
// them), or nil: not a vm deployment, or the caller may not read metrics,
// in which case describe shows the rest.
func startView(ctx context.Context, c *client.Client, st *apitype.DeploymentStatus) *apitype.DeploymentView {
	if st.Kind != apitype.KindVM {
		return nil
	}
	m, err := c.Metrics(ctx, client.MetricsQuery{Deployment: st.Spec.ID})
	if err != nil {
		return nil
	}
	for i, v := range m.Deployments {
		if v.ID == st.Spec.ID && namespace(v.Namespace) == namespace(st.Spec.Namespace) {
			return &m.Deployments[i]
		}
	}
	return nil
}

// describe writes the human view of one deployment; v, when not nil, is its
// metrics view (see startView).
func describe(w io.Writer, d *apitype.DeploymentStatus, etag string, v *apitype.DeploymentView) {
	s := d.Spec
	tw := newTable(w)
	kv := func(k string, v any) { row(tw, k+":", v) }

	kv("Name", s.ID)
	kv("Namespace", namespace(s.Namespace))
	kv("Kind", orDash(string(d.Kind)))
	kv("Routes", strings.ReplaceAll(routes(s.Routes), ",", ", "))
	kv("Backend", strings.ReplaceAll(backend(*d), ",", ", "))
	if s.VM != nil {
		kv("VM", vmSummary(s.VM))
	}
	if d.Kind == apitype.KindVM {
		kv("Scaling", scalingSummary(s.Scaling))
	}
	if s.Health != nil {
		kv("Health", healthSummary(s.Health))
	}
	if s.Auth != nil {
		kv("Auth", authSummary(s.Auth))
	}
	if s.Maintenance != nil && *s.Maintenance {
		kv("Maintenance", "on (routed traffic gets 503)")
	}
	kv("Status", fmt.Sprintf("desired %d, ready %d, pending %d, in-flight %d",
		d.DesiredReplicas, d.Ready, d.Pending, d.TotalInFlight))
	if v != nil {
		startFailures(kv, v)
	}
	if d.Site != nil {
		kv("Site", siteSummary(d.Site))
	}
	if ws := d.Workspace; ws != nil {
		kv("Workspace", workspaceSummary(ws))
		if ws.Blocked != "" {
			kv("  Blocked", ws.Blocked)
		}
		if ws.LastError != "" {
			kv("  Last error", ws.LastError)
		}
	}
	if d.RolloutRevision != "" {
		kv("Revision", d.RolloutRevision)
	}
	if etag != "" {
		kv("ETag", etag)
	}
	tw.Flush()

	io.WriteString(w, "\nBackends:\n")
	if len(d.VMs) == 0 {
		io.WriteString(w, "  <none>\n")
		return
	}
	bt := newTable(w)
	row(bt, "  SANDBOX", "ADDR", "IN-FLIGHT", "HEALTHY", "DRAINING")
	for _, v := range d.VMs {
		row(bt, "  "+v.SandboxID, orDash(v.Addr), v.InFlight, yesNo(v.Healthy), yesNo(v.Draining))
	}
	bt.Flush()
}

// startFailures shows why a vm deployment's replicas do not start: the
// failing streak with the boot backoff, and the last failed create or boot.
func startFailures(kv func(string, any), v *apitype.DeploymentView) {
	if n := v.Pool.BootFailures; n > 0 {
		next := "allowed now (on the next request, or at once when min_replicas needs one)"
		if b := v.Pool.BootBackoffSecs; b != nil {
			next = "in " + (time.Duration(*b) * time.Second).String()
		}
		kv("Start failures", fmt.Sprintf("%d in a row; next attempt %s", n, next))
	}
	if msg := v.Metrics.Autoscale.LastCreateError; msg != "" {
		if v.Pool.BootFailures == 0 {
			msg += " (before the last successful start or spec write)"
		}
		kv("Last create error", msg)
	}
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func vmSummary(vm *apitype.VmSpec) string {
	parts := []string{fmt.Sprintf("port %d", vm.Port)}
	if vm.Port == 0 {
		// No port in the spec: berth picks one per replica and passes it
		// as $PORT (the process driver's default).
		parts[0] = "port $PORT (picked per replica)"
	}
	if vm.SizeClass != "" {
		parts = append(parts, "size "+string(vm.SizeClass))
	}
	if vm.DiskSizeGB != nil {
		parts = append(parts, fmt.Sprintf("disk %d GB", *vm.DiskSizeGB))
	}
	if vm.StartCommand != "" {
		parts = append(parts, fmt.Sprintf("start %q", vm.StartCommand))
	}
	if len(vm.EnvVars) > 0 || len(vm.EnvFrom) > 0 {
		parts = append(parts, plural(len(vm.EnvVars)+len(vm.EnvFrom), "env var"))
	}
	if len(vm.Mounts) > 0 {
		parts = append(parts, plural(len(vm.Mounts), "mount"))
	}
	return strings.Join(parts, ", ")
}

// plural returns "1 thing" or "n things".
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

func scalingSummary(p *apitype.ScalingPolicy) string {
	var sp apitype.ScalingPolicy
	if p != nil {
		sp = *p
	}
	idle := sp.IdleAction
	if idle == "" {
		idle = apitype.IdleDestroy
	}
	return fmt.Sprintf("min %s, max %s, warm %s, target %s, scale to zero after %ss, idle %s",
		intOr(sp.MinReplicas, defaultMin), intOr(sp.MaxReplicas, defaultMax),
		intOr(sp.WarmPool, defaultWarm), intOr(sp.TargetConcurrency, defaultTarget),
		intOr(sp.ScaleToZeroAfterSecs, defaultIdle), idle)
}

func healthSummary(h *apitype.HealthCheck) string {
	var probe string
	switch path, ok := h.Path.Get(); {
	case ok:
		probe = "HTTP GET " + path
	case h.Path.IsNull():
		probe = "TCP connect"
	default:
		probe = "HTTP GET /"
	}
	if h.Port != nil {
		probe += fmt.Sprintf(" on port %d", *h.Port)
	}
	if h.TimeoutSecs != nil {
		probe += fmt.Sprintf(", timeout %ds", *h.TimeoutSecs)
	}
	if h.ExpectedHeader != nil {
		probe += fmt.Sprintf(", expects %s: %s", h.ExpectedHeader.Name, h.ExpectedHeader.Value)
	}
	return probe
}

func authSummary(a *apitype.AuthGate) string {
	if a.ProviderRef != "" {
		return "provider " + a.ProviderRef + " (inherited)"
	}
	var ps []string
	for _, p := range a.Provider.Providers {
		ps = append(ps, string(p))
	}
	if len(ps) == 0 {
		return "gate"
	}
	return strings.Join(ps, " or ")
}

func siteSummary(s *apitype.SiteRootStatus) string {
	out := fmt.Sprintf("%s (%s)", s.Root, s.Status)
	if s.Hint != "" {
		out += ": " + s.Hint
	}
	return out
}

func workspaceSummary(ws *apitype.WorkspaceStatus) string {
	parts := []string{string(ws.Phase), ws.Path, "store " + ws.Store}
	if ws.Digest != nil {
		d := *ws.Digest
		if len(d) > 12 {
			d = d[:12]
		}
		parts = append(parts, "digest "+d)
	} else {
		parts = append(parts, "empty")
	}
	if ws.CapturedAt != nil {
		parts = append(parts, "captured "+time.Unix(*ws.CapturedAt, 0).UTC().Format(time.RFC3339))
	}
	if ws.PushPending {
		parts = append(parts, "push pending")
	}
	return strings.Join(parts, ", ")
}
