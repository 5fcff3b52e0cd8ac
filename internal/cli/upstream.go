package cli

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/client"
)

var cordonCmd = &command{
	name:    "cordon",
	summary: "Stop sending new requests to a static upstream",
	help: `Usage: berth cordon DEPLOYMENT UPSTREAM [--force] [--reason R]

Stop sending new requests to one upstream of a static deployment, and
print its state. Requests already in flight finish; cordon does not wait
for them (drain does). The server refuses when no other healthy upstream
would be left accepting, unless --force.

Flags:
  --force      cordon even when no other healthy upstream is accepting
  --reason R   why, shown in the upstream's status (at most 512 bytes)
`,
	run: func(ctx context.Context, e *env, args []string) error {
		return runDrain(ctx, e, args, "cordon", false)
	},
}

var drainCmd = &command{
	name:    "drain",
	summary: "Cordon a static upstream and wait until it is idle",
	help: `Usage: berth drain DEPLOYMENT UPSTREAM [--force] [--reason R] [--timeout DUR]

Stop sending new requests to one upstream of a static deployment, then
wait until its in-flight requests reach zero. Fails if that takes longer
than --timeout; the upstream stays cordoned either way.

Flags:
  --force          drain even when no other healthy upstream is accepting
  --reason R       why, shown in the upstream's status (at most 512 bytes)
  --timeout DUR    how long to wait, such as 30s or 5m; 0 waits forever (default 5m)
`,
	run: func(ctx context.Context, e *env, args []string) error {
		return runDrain(ctx, e, args, "drain", true)
	},
}

var uncordonCmd = &command{
	name:    "uncordon",
	summary: "Send requests to a cordoned upstream again",
	help: `Usage: berth uncordon DEPLOYMENT UPSTREAM

Let a cordoned or drained upstream of a static deployment take new
requests again.
`,
	run: runUncordon,
}

// upstreamArgs reads DEPLOYMENT UPSTREAM.
func upstreamArgs(pos []string) (id, upstream string, err error) {
	if len(pos) != 2 {
		return "", "", usagef("want DEPLOYMENT and UPSTREAM, got %d arguments", len(pos))
	}
	id, upstream = stripKind(pos[0]), pos[1]
	if id == "" || upstream == "" {
		return "", "", usagef("DEPLOYMENT and UPSTREAM must not be empty")
	}
	return id, upstream, nil
}

func upstreamPath(id, upstream string) string {
	return deploymentPath(id) + "/upstreams/" + url.PathEscape(upstream) + "/drain"
}

func runDrain(ctx context.Context, e *env, args []string, name string, wait bool) error {
	fs := e.flagSet(name)
	reason := fs.String("reason", "", "")
	force := fs.Bool("force", false, "")
	timeout := 5 * time.Minute
	if wait {
		fs.DurationVar(&timeout, "timeout", timeout, "")
	}
	pos, err := e.parse(fs, args)
	if err != nil {
		return err
	}
	id, upstream, err := upstreamArgs(pos)
	if err != nil {
		return err
	}
	if timeout < 0 {
		return usagef("--timeout must not be negative")
	}
	c, err := e.client()
	if err != nil {
		return err
	}
	req := apitype.DrainRequest{Reason: *reason}
	if *force {
		req.Force = new(true)
	}

	var st *apitype.UpstreamTrafficStatus
	if e.structured() {
		st = new(apitype.UpstreamTrafficStatus)
		err = e.fetchAndPrint(ctx, c, http.MethodPut, upstreamPath(id, upstream), req, st)
	} else {
		st, err = c.DrainUpstream(ctx, id, upstream, req)
		if err == nil {
			printTraffic(e, st)
		}
	}
	if err != nil {
		return err
	}
	if !wait || st.State == apitype.TrafficDrained || st.InFlight == 0 {
		return nil
	}
	if err := e.waitDrained(ctx, c, id, upstream, timeout); err != nil {
		return err
	}
	if !e.structured() {
		fmt.Fprintf(e.stdout, "upstream %s of deployment/%s is drained\n", upstream, id)
	}
	return nil
}

// waitDrained polls the deployment until upstream has nothing in flight.
// The upstream is listed among DeploymentStatus.vms with its address as
// sandbox_id; when it is not listed at all, nothing can be in flight to it.
func (e *env) waitDrained(ctx context.Context, c *client.Client, id, upstream string, timeout time.Duration) error {
	wctx := ctx
	if timeout > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	last := -1
	timedOut := func() error {
		msg := fmt.Sprintf("timed out after %s waiting for upstream %s of deployment/%s to drain", timeout, upstream, id)
		if last > 0 {
			msg += fmt.Sprintf(" (%d still in flight)", last)
		}
		return errors.New(msg)
	}
	t := time.NewTicker(e.pollInterval)
	defer t.Stop()
	for {
		select {
		case <-wctx.Done():
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return timedOut()
		case <-t.C:
		}
		st, _, err := c.Deployment(wctx, id)
		if err != nil {
			if ctx.Err() == nil && wctx.Err() != nil {
				return timedOut()
			}
			return err
		}
		last = 0
		for _, v := range st.VMs {
			if v.SandboxID == upstream {
				last = v.InFlight
			}
		}
		if last == 0 {
			return nil
		}
	}
}

func printTraffic(e *env, st *apitype.UpstreamTrafficStatus) {
	msg := fmt.Sprintf("upstream %s of deployment/%s is %s", st.Upstream, st.DeploymentID, st.State)
	if st.State == apitype.TrafficDraining {
		msg += fmt.Sprintf(" (%d in flight)", st.InFlight)
	}
	if !st.Healthy {
		msg += ", unhealthy"
	}
	fmt.Fprintln(e.stdout, clean(msg))
}

func runUncordon(ctx context.Context, e *env, args []string) error {
	pos, err := e.parse(e.flagSet("uncordon"), args)
	if err != nil {
		return err
	}
	id, upstream, err := upstreamArgs(pos)
	if err != nil {
		return err
	}
	c, err := e.client()
	if err != nil {
		return err
	}
	if e.structured() {
		return e.fetchAndPrint(ctx, c, http.MethodDelete, upstreamPath(id, upstream), nil, nil)
	}
	st, err := c.UndrainUpstream(ctx, id, upstream)
	if err != nil {
		return err
	}
	printTraffic(e, st)
	return nil
}
