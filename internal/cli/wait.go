package cli

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"time"

	"golang.org/x/term"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/client"
)

// defaultWaitTimeout is how long apply --wait waits by default.
const defaultWaitTimeout = 5 * time.Minute

// dryRunHeader is what berth's admin API sets on the reply to a write with
// ?dry_run=true, and on GET /deployments to say it takes the parameter
// (admin.DryRunHeader; the CLI imports only the client).
const dryRunHeader = "X-Berth-Dry-Run"

// canDryRun asks the server, before any spec is sent, whether it does dry
// runs: a server that does not know ?dry_run=true would store the spec.
func canDryRun(ctx context.Context, c *client.Client) error {
	h, err := c.Do(ctx, http.MethodHead, "/deployments", nil, nil)
	if err != nil {
		return err
	}
	if h.Get(dryRunHeader) == "" {
		return fmt.Errorf("the server at %s cannot do a dry run (it does not advertise %s); nothing was sent", c.BaseURL(), dryRunHeader)
	}
	return nil
}

// waitReady polls the deployments until each is ready (see readiness),
// printing progress on stderr: one updating line on a terminal, a line
// per change otherwise. After timeout it fails with what /metrics says
// the last failed create was.
func (e *env) waitReady(ctx context.Context, c *client.Client, ids []string, timeout time.Duration) error {
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tty := false
	if f, ok := e.stderr.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		tty = true
	}
	for _, id := range ids {
		last := ""
		var st *apitype.DeploymentStatus
		for {
			var err error
			st, _, err = c.Deployment(wctx, id)
			if err != nil && wctx.Err() == nil {
				return err
			}
			if err == nil {
				ready, line := readiness(st)
				if line != last {
					if tty {
						fmt.Fprintf(e.stderr, "\r\033[K%s", line)
					} else {
						fmt.Fprintln(e.stderr, line)
					}
					last = line
				}
				if ready {
					if tty {
						fmt.Fprintln(e.stderr)
					}
					break
				}
			}
			select {
			case <-wctx.Done():
			case <-time.After(e.pollInterval):
				continue
			}
			if tty {
				fmt.Fprintln(e.stderr)
			}
			if ctx.Err() != nil { // interrupted, not timed out
				return ctx.Err()
			}
			return e.notReady(ctx, c, id, last, timeout)
		}
	}
	return nil
}

// readiness says whether a deployment is ready, with a progress line. A
// vm deployment is ready when as many replicas are ready as it wants now
// or at least (min_replicas); one that wants none (it scales from zero) is
// ready once stored, as is every other kind.
func readiness(st *apitype.DeploymentStatus) (bool, string) {
	name := "deployment/" + st.Spec.ID
	if st.Kind != apitype.KindVM {
		return true, name + ": stored (" + orDash(string(st.Kind)) + ")"
	}
	want := st.DesiredReplicas
	if st.Spec.Scaling != nil && st.Spec.Scaling.MinReplicas != nil {
		want = max(want, *st.Spec.Scaling.MinReplicas)
	}
	if want == 0 {
		return true, name + ": stored; no replica wanted until the first request (scales from zero)"
	}
	line := fmt.Sprintf("%s: %d/%d ready, %d pending", name, st.Ready, want, st.Pending)
	return st.Ready >= want, line
}

// notReady is the error of a wait that timed out: where the deployment
// got to and the last create error /metrics has for it.
func (e *env) notReady(ctx context.Context, c *client.Client, id, progress string, timeout time.Duration) error {
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	msg := fmt.Sprintf("deployment/%s is not ready after %v", id, timeout)
	if progress != "" {
		msg += " (" + progress + ")"
	}
	m, err := c.Metrics(mctx, client.MetricsQuery{Deployment: id, Summary: true})
	if err != nil {
		return errors.New(msg + "; the last create error is unknown: " + e.explain(err))
	}
	for _, d := range m.Deployments {
		if d.ID == id && d.Metrics.Autoscale.LastCreateError != "" {
			return fmt.Errorf("%s; last create error: %s", msg, d.Metrics.Autoscale.LastCreateError)
		}
	}
	return fmt.Errorf("%s; no create has failed: see 'berth describe deployment %s' and 'berth logs %s'", msg, id, id)
}
