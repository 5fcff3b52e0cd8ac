// Package hostupdate is the host-update job kind (POST
// /deployments/{id}/update): the deployment's update.commands run in order
// with `sh -c` in update.working_dir on berth's host, as berth's user, and
// then the deployment is probed until it is healthy again.
//
// Because it runs commands on the host, it is off unless the operator
// turns it on (berth serve --host-updates, BERTH_HOST_UPDATES), and only
// a fleet-wide admin credential may start one: a namespace-confined token
// could otherwise turn a deployment spec it may write into a shell on the
// machine every other namespace runs on.
//
// The record: working_dir, commands_total, commands_run (the commands that
// exited 0; a failing one stops the run and names itself in the error),
// and verified once the commands all ran. A failed re-probe fails the job
// (verified false): the commands ran, but the deployment is not healthy.
package hostupdate

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/jobs"
)

// Defaults for an update spec that names no timeouts.
const (
	DefaultTimeout       = 600 * time.Second
	DefaultVerifyTimeout = 60 * time.Second
)

// Secrets resolves env_from (*secrets.Store).
type Secrets interface {
	ResolveEnv(ctx context.Context, ns string, refs []apitype.SecretEnv) (map[string]string, error)
}

// Options configure the kind.
type Options struct {
	// Enabled is the operator's --host-updates: off, every start is
	// refused saying how to turn it on.
	Enabled bool
	Secrets Secrets // nil: env_from is refused
	// Verify probes the deployment once: nil when it is healthy. The job
	// calls it until it succeeds or verify_timeout_secs pass. Nil skips
	// verification (verified stays unset).
	Verify func(ctx context.Context, d jobs.Deployment) error
	// Shell runs each command (Shell -c command); default /bin/sh.
	Shell string
	// VerifyEvery is the pause between probes; default 1 s.
	VerifyEvery time.Duration
}

// Kind returns the host-update kind, to register under
// apitype.JobHostUpdate.
func Kind(o Options) jobs.Kind {
	o.Shell = cmp.Or(o.Shell, "/bin/sh")
	if o.VerifyEvery <= 0 {
		o.VerifyEvery = time.Second
	}
	return func(ctx context.Context, req jobs.Request) (jobs.Run, error) { return o.prepare(ctx, req) }
}

func (o Options) prepare(ctx context.Context, req jobs.Request) (jobs.Run, error) {
	d := req.Deployment
	if !o.Enabled {
		return nil, jobs.Errorf(http.StatusForbidden, "host updates are off on this server: they run commands on berth's host as berth's user; the operator enables them with `berth serve --host-updates` (or BERTH_HOST_UPDATES=1)")
	}
	if !req.Fleet {
		return nil, jobs.Errorf(http.StatusForbidden, "a host update runs commands on berth's host, outside every namespace, so only a fleet-wide admin credential may start one; this credential is confined to some deployments or a namespace")
	}
	u := d.Spec.Update
	if d.Kind != apitype.KindStatic && d.Kind != apitype.KindSite {
		return nil, jobs.Errorf(http.StatusBadRequest, "deployment %q is a %s deployment; host updates are for static and site deployments", d.ID, d.Kind)
	}
	if u == nil {
		return nil, jobs.Errorf(http.StatusBadRequest, "deployment %q has no update section (set update.working_dir and update.commands)", d.ID)
	}
	if len(req.Body) > 0 {
		var body map[string]json.RawMessage
		if err := json.Unmarshal(req.Body, &body); err != nil {
			return nil, jobs.Errorf(http.StatusBadRequest, "the body must be a JSON object ({}): %v", err)
		}
		for _, k := range slices.Sorted(maps.Keys(body)) {
			return nil, jobs.Errorf(http.StatusBadRequest, "%s: a host update takes no parameters (send {})", k)
		}
	}
	if fi, err := os.Stat(u.WorkingDir); err != nil || !fi.IsDir() {
		return nil, jobs.Errorf(http.StatusBadRequest, "update.working_dir: %q is not a directory on berth's host", u.WorkingDir)
	}
	var fromSecrets map[string]string
	if len(u.EnvFrom) > 0 {
		if o.Secrets == nil {
			return nil, jobs.Errorf(http.StatusServiceUnavailable, "update.env_from: secrets are not enabled on this server")
		}
		var err error
		// Resolved now, so a missing secret refuses the start (the error
		// names the secret and key, never a value).
		if fromSecrets, err = o.Secrets.ResolveEnv(ctx, d.Namespace, u.EnvFrom); err != nil {
			return nil, jobs.Errorf(http.StatusBadRequest, "update.%v", err)
		}
	}
	timeout, verify := DefaultTimeout, DefaultVerifyTimeout
	if u.TimeoutSecs != nil && *u.TimeoutSecs > 0 {
		timeout = time.Duration(*u.TimeoutSecs) * time.Second
	}
	if u.VerifyTimeoutSecs != nil {
		verify = time.Duration(*u.VerifyTimeoutSecs) * time.Second
	}
	env := commandEnv(u.Env, fromSecrets)
	return func(ctx context.Context, j *jobs.Job) error {
		j.Redact(slices.Collect(maps.Values(fromSecrets))...)
		return o.run(ctx, j, d, u, env, timeout, verify)
	}, nil
}

// commandEnv is the commands' environment: berth's own without its
// BERTH_* variables (the admin password and the secret key are among
// them), then update.env, then the secrets, which win.
func commandEnv(literal, fromSecrets map[string]string) []string {
	vars := map[string]string{}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(k, "BERTH_") {
			vars[k] = v
		}
	}
	maps.Copy(vars, literal)
	maps.Copy(vars, fromSecrets)
	out := make([]string, 0, len(vars))
	for _, k := range slices.Sorted(maps.Keys(vars)) {
		out = append(out, k+"="+vars[k])
	}
	return out
}

func (o Options) run(ctx context.Context, j *jobs.Job, d jobs.Deployment, u *apitype.UpdateSpec, env []string, timeout, verify time.Duration) error {
	total, ran := len(u.Commands), 0
	// (Fresh pointers each time: the record keeps what Set stores.)
	j.Set(func(r *apitype.JobRecord) {
		r.WorkingDir, r.CommandsTotal, r.CommandsRun = u.WorkingDir, new(total), new(0)
	})
	cctx, cancel := context.WithTimeoutCause(ctx, timeout, fmt.Errorf("the update ran past its timeout_secs (%s)", timeout))
	defer cancel()
	for i, c := range u.Commands {
		j.Logf("$ %s", c)
		if err := o.command(cctx, j, u.WorkingDir, env, c); err != nil {
			if cause := context.Cause(cctx); cctx.Err() != nil && ctx.Err() == nil {
				err = cause
			}
			return fmt.Errorf("command %d of %d (%s): %w", i+1, total, c, err)
		}
		ran++
		n := ran
		j.Set(func(r *apitype.JobRecord) { r.CommandsRun = &n })
	}
	if o.Verify == nil {
		return nil
	}
	ok := o.verify(ctx, j, d, verify)
	j.Set(func(r *apitype.JobRecord) { r.Verified = &ok })
	if !ok {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("the commands ran, but deployment %q did not pass its health check within verify_timeout_secs (%s)", d.ID, verify)
	}
	return nil
}

// command runs one command in its own process group, its output (stdout
// and stderr interleaved) into the log; ctx's end kills the whole group,
// so a command's children do not outlive a timeout.
func (o Options) command(ctx context.Context, j *jobs.Job, dir string, env []string, c string) error {
	cmd := exec.CommandContext(ctx, o.Shell, "-c", c)
	cmd.Dir, cmd.Env = dir, env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	// A grandchild that escaped the group could hold the pipe open.
	cmd.WaitDelay = 5 * time.Second
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			j.Log(sc.Text())
		}
		io.Copy(io.Discard, pr) // a line past 1 MiB: keep the command from blocking
	}()
	err := cmd.Run()
	pw.Close()
	<-done
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() > 0 {
		return fmt.Errorf("exited with status %d", ee.ExitCode())
	}
	return err
}

// verify probes the deployment until it is healthy or within passes.
func (o Options) verify(ctx context.Context, j *jobs.Job, d jobs.Deployment, within time.Duration) bool {
	j.Logf("verifying deployment %q (up to %s)", d.ID, within)
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	var last error
	for {
		if last = o.Verify(ctx, d); last == nil {
			j.Logf("deployment %q is healthy", d.ID)
			return true
		}
		select {
		case <-ctx.Done():
			j.Logf("deployment %q is not healthy: %v", d.ID, last)
			return false
		case <-time.After(o.VerifyEvery):
		}
	}
}
