package kvm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/berth-dev/berth/internal/agent"
	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/proc"
	"github.com/berth-dev/berth/internal/vm/replicadir"
)

// agentConn is the driver's session with one replica's agent: a yamux
// session over the virtio serial port (agent.PortSession), shared by every
// DialAgent of that replica. QEMU's socket behind the port serves one
// client at a time, so there is one session per replica and process.
type agentConn struct {
	mu   sync.Mutex // held while the session is (re)established
	sess *agent.PortSession

	// leaseMu serializes passing the lease on (syncLease), so that the
	// guest always ends up with the host's latest deadline.
	leaseMu sync.Mutex
	// bootPending (guarded by Driver.mu) is set from Start until afterBoot
	// has reached the agent: meanwhile Renew only records the deadline,
	// which afterBoot passes on.
	bootPending bool
}

// agentFor returns the agentConn of a replica, creating it.
func (d *Driver) agentFor(id string) *agentConn {
	d.mu.Lock()
	defer d.mu.Unlock()
	ac, ok := d.agents[id]
	if !ok {
		ac = &agentConn{}
		d.agents[id] = ac
	}
	return ac
}

// agentPatience bounds how long DialAgent waits for a guest's agent when ctx
// has no deadline: a guest may still be booting, slowly under TCG.
const agentPatience = 90 * time.Second

// DialAgent connects to the agent in the guest: a new yamux stream over the
// replica's virtio serial port. A guest still booting is waited for (until
// ctx ends, or 90 s without a deadline), so a caller may dial right after
// Start.
func (d *Driver) DialAgent(ctx context.Context, id string) (net.Conn, error) {
	st, err := d.rd.Load(id)
	if err != nil {
		return nil, err
	}
	if st.Suspended {
		return nil, fmt.Errorf("kvm: agent of %s: the replica is suspended", id)
	}
	c, err := d.dialAgent(ctx, st)
	if err != nil {
		return nil, fmt.Errorf("kvm: agent of %s: %w", id, err)
	}
	return c, nil
}

func (d *Driver) dialAgent(ctx context.Context, st state) (net.Conn, error) {
	ac := d.agentFor(st.ID)
	ac.mu.Lock()
	defer ac.mu.Unlock()
	if ac.sess != nil {
		if c, err := ac.sess.Open(); err == nil {
			return c, nil
		}
		ac.sess.Close()
		ac.sess = nil
	}
	sess, err := d.connectAgent(ctx, st)
	if err != nil {
		return nil, err
	}
	ac.sess = sess
	return sess.Open()
}

// connectAgent establishes a session with the agent, retrying on a fresh
// connection each time (see agent.NewPortSession) while QEMU runs.
func (d *Driver) connectAgent(ctx context.Context, st state) (*agent.PortSession, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, agentPatience)
		defer cancel()
	}
	path := d.path(st.ID, agentSock)
	attempt := 500 * time.Millisecond
	var last error
	for {
		if !proc.Alive(st.PID, st.StartTicks) {
			if last == nil {
				last = errors.New("QEMU is not running")
			}
			return nil, fmt.Errorf("the guest is gone (%v)", last)
		}
		var dialer net.Dialer
		conn, err := dialer.DialContext(ctx, "unix", path)
		if err == nil {
			actx, cancel := context.WithTimeout(ctx, attempt)
			var sess *agent.PortSession
			sess, err = agent.NewPortSession(actx, conn)
			cancel()
			if err == nil {
				return sess, nil
			}
			conn.Close()
			attempt = min(2*attempt, 4*time.Second)
		}
		last = err
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("the agent did not answer on its virtio port: %v", last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// dropAgent ends the driver's session with a replica's agent.
func (d *Driver) dropAgent(id string) {
	d.mu.Lock()
	ac := d.agents[id]
	delete(d.agents, id)
	d.mu.Unlock()
	if ac == nil {
		return
	}
	ac.mu.Lock()
	if ac.sess != nil {
		ac.sess.Close()
		ac.sess = nil
	}
	ac.mu.Unlock()
}

// Suspend pauses the guest (QMP stop): its vCPUs stop, its memory stays in
// the QEMU process, so Resume is immediate and the app continues with the
// same processes at the same address. A suspended replica costs its memory
// but no CPU. (Saving the memory to disk and ending QEMU, as the
// firecracker driver does, would free it; QEMU's migrate-to-file could do
// that later.)
func (d *Driver) Suspend(ctx context.Context, id string) error {
	defer d.rd.Lock(id)()
	st, err := d.rd.Load(id)
	if err != nil {
		return err
	}
	if st.Suspended || st.PID == 0 || !proc.Alive(st.PID, st.StartTicks) {
		return fmt.Errorf("kvm: suspend %s: the replica is not running", id)
	}
	if err := d.pause(ctx, id); err != nil {
		return fmt.Errorf("kvm: suspend %s: %w", id, err)
	}
	st.Suspended = true
	if err := replicadir.WriteState(d.replicaDir(id), st); err != nil {
		d.cont(context.WithoutCancel(ctx), id)
		return fmt.Errorf("kvm: suspend %s: %w", id, err)
	}
	return nil
}

// Resume continues a suspended guest (QMP cont). The guest's clock stood
// still while it was paused, so Resume sets it (date through the agent,
// best effort) before the app sees much of the gap; a lease renewed while
// suspended is passed on to the agent.
func (d *Driver) Resume(ctx context.Context, id string) (vm.Instance, error) {
	defer d.rd.Lock(id)()
	st, err := d.rd.Load(id)
	if err != nil {
		return vm.Instance{}, err
	}
	if !st.Suspended {
		return vm.Instance{}, fmt.Errorf("kvm: resume %s: the replica is not suspended", id)
	}
	if !proc.Alive(st.PID, st.StartTicks) {
		return vm.Instance{}, fmt.Errorf("kvm: resume %s: QEMU is gone", id)
	}
	if err := d.cont(ctx, id); err != nil {
		return vm.Instance{}, fmt.Errorf("kvm: resume %s: %w", id, err)
	}
	st.Suspended = false
	if err := replicadir.WriteState(d.replicaDir(id), st); err != nil {
		return vm.Instance{}, fmt.Errorf("kvm: resume %s: %w", id, err)
	}
	go d.afterResume(context.WithoutCancel(ctx), st)
	return d.instance(st), nil
}

// afterResume sets the guest's clock and passes the lease on (it may have
// been renewed while suspended). It runs in the background: the agent
// answers at once on a KVM host, but Resume must not wait for a slow guest.
// ctx is Resume's, without its cancellation.
func (d *Driver) afterResume(ctx context.Context, st state) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c := agent.NewClient(func(ctx context.Context) (net.Conn, error) { return d.dialAgent(ctx, st) })
	defer c.Close()
	now := time.Now().Unix()
	if res, err := c.Exec(ctx, agent.ExecRequest{Argv: []string{"date", "-u", "-s", "@" + strconv.FormatInt(now, 10)}, TimeoutMS: 10000}); err != nil || res.ExitCode != 0 {
		d.log.Warn("kvm: setting the guest's clock after resume", "id", st.ID, "err", err, "output", strings.TrimSpace(res.Output))
	}
	if err := d.syncLease(ctx, st, false); err != nil {
		d.log.Warn("kvm: passing the lease on after resume", "id", st.ID, "err", err)
	}
}

// afterBoot waits for a new guest's agent, reports the boot, and passes
// the lease on. The guest booted with a backstop lease (Spec.TTL plus the
// boot allowance, for a berth that dies before this); the deadline that
// counts is the host's: Spec.TTL after Start, or what Renew set since,
// read only now, so that a Renew made while the guest booted is not stale
// by the time it arrives. ctx is Start's, without its cancellation.
func (d *Driver) afterBoot(ctx context.Context, st state) {
	ctx, cancel := context.WithTimeout(ctx, d.current().allowance)
	defer cancel()
	conn, err := d.dialAgent(ctx, st)
	if err == nil {
		conn.Close()
		d.log.Info("kvm: guest ready", "id", st.ID, "accel", d.Accel(), "boot_to_ready", time.Since(st.StartedAt).Round(time.Millisecond))
	} else if proc.Alive(st.PID, st.StartTicks) {
		d.log.Warn("kvm: the guest's agent did not answer", "id", st.ID, "err", err)
	}
	if err := d.syncLease(ctx, st, true); err != nil && proc.Alive(st.PID, st.StartTicks) {
		d.log.Warn("kvm: passing the lease on after boot", "id", st.ID, "err", err)
	}
}

// syncLease writes the host's lease deadline (leaseFile) into the guest.
// Callers that change the deadline write the file first; the lock makes
// the last write into the guest carry the latest deadline. afterBoot ends
// the boot's pending state (booted) under the same lock, before it reads
// the deadline.
func (d *Driver) syncLease(ctx context.Context, st state, booted bool) error {
	ac := d.agentFor(st.ID)
	ac.leaseMu.Lock()
	defer ac.leaseMu.Unlock()
	if booted {
		d.mu.Lock()
		ac.bootPending = false
		d.mu.Unlock()
	}
	if _, ok := d.hostLease(st.ID); !ok {
		return nil
	}
	err := d.pushLease(ctx, st)
	if err != nil && ctx.Err() == nil && proc.Alive(st.PID, st.StartTicks) {
		// Once more: a stream can break (a session taken over) midway.
		err = d.pushLease(ctx, st)
	}
	return err
}

// bootPending reports whether afterBoot has yet to reach the replica's
// agent.
func (d *Driver) bootPending(id string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	ac := d.agents[id]
	return ac != nil && ac.bootPending
}

// pushLease writes the host's lease deadline into the guest through the
// agent (PUT /v1/lease, which rewrites the agent's --lease-file). The
// deadline is read once the agent has answered, so that a push that
// waited for a booting guest carries the latest one.
//
// Not through the files endpoints: with a workspace they are confined to
// /workspace, where the file would land in the workspace (and its
// snapshots) instead of where the agent reads it. An agent older than
// /v1/lease (a replica adopted from an earlier berth) answers 404; one
// without a workspace then gets the file as before, making its directory
// first (a guest started without a TTL has none).
func (d *Driver) pushLease(ctx context.Context, st state) error {
	c := agent.NewClient(func(ctx context.Context) (net.Conn, error) { return d.dialAgent(ctx, st) })
	defer c.Close()
	if _, err := c.Info(ctx); err != nil {
		return err // the agent answers first, so the deadline is the latest
	}
	until, ok := d.hostLease(st.ID)
	if !ok {
		return nil
	}
	err := c.SetLease(ctx, until)
	var ae *agent.Error
	if !errors.As(err, &ae) || ae.Status != http.StatusNotFound || st.Workspace != "" {
		return err
	}
	if _, err := c.Mkdir(ctx, filepath.Dir(guestLease), 0o700, true); err != nil {
		return err
	}
	_, err = c.WriteFile(ctx, guestLease, bytes.NewReader(agent.FormatLease(until)), 0o600)
	return err
}

// Renew moves a replica's lease deadline to until: it writes the lease file
// in the guest through the agent, which checks it every --lease-check. The
// deadline is kept on the host too: a replica renewed while suspended gets
// it at Resume, and one renewed while it boots once its agent answers.
func (d *Driver) Renew(ctx context.Context, id string, until time.Time) error {
	st, err := d.rd.RenewState(ctx, id, until, 0o600)
	if err != nil || st.Suspended {
		return err
	}
	if !proc.Alive(st.PID, st.StartTicks) {
		// It ended (perhaps of this very lease); nothing to tell.
		return nil
	}
	if d.bootPending(id) {
		// afterBoot passes it on once the guest is up: a deadline pushed
		// only after a slow boot may have passed by then.
		return nil
	}
	if err := d.syncLease(ctx, st, false); err != nil {
		if !proc.Alive(st.PID, st.StartTicks) {
			return nil
		}
		return fmt.Errorf("kvm: renew %s: %w", id, err)
	}
	return nil
}

// hostLease reads the deadline Renew last kept for a replica.
func (d *Driver) hostLease(id string) (time.Time, bool) {
	return replicadir.ReadLease(d.replicaDir(id))
}
