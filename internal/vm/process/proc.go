package process

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/proc"
	"github.com/berth-dev/berth/internal/vm/replicadir"
)

// findByArg returns the live process one of whose arguments is arg.
func findByArg(arg string) (int, proc.Stat, bool) {
	want := []byte(arg)
	for _, pid := range proc.Pids() {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		if err != nil || !bytes.Contains(b, want) {
			continue
		}
		if !slices.ContainsFunc(bytes.Split(b, []byte{0}), func(a []byte) bool { return bytes.Equal(a, want) }) {
			continue
		}
		if ps, err := proc.ReadStat(pid); err == nil && !ps.Dead() {
			return pid, ps, true
		}
	}
	return 0, proc.Stat{}, false
}

// members lists the live processes of a replica: those of its cgroup, else
// those in the agent's PID namespace, else those in the agent's session
// (setsid made the agent a session leader; the agent's own process groups
// stay in its session). Processes that started before the agent cannot be
// members, which keeps a reused session id from matching.
func (d *Driver) members(st state) []int {
	cgroup := st.Cgroup
	if cgroup == "" && len(st.CgroupsV1) > 0 {
		cgroup = st.CgroupsV1[0]
	}
	if cgroup != "" {
		if b, err := os.ReadFile(filepath.Join(cgroup, "cgroup.procs")); err == nil {
			var out []int
			for _, s := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(s); err == nil {
					if ps, err := proc.ReadStat(pid); err == nil && !ps.Dead() {
						out = append(out, pid)
					}
				}
			}
			return out
		}
	}
	if st.PID == 0 {
		return nil
	}
	var ns string
	if st.Isolated {
		if !proc.Alive(st.PID, st.StartTicks) {
			// The namespace dies with its init: the kernel kills the rest.
			return nil
		}
		var err error
		if ns, err = os.Readlink("/proc/" + strconv.Itoa(st.PID) + "/ns/pid"); err != nil {
			return nil
		}
	}
	var out []int
	for _, pid := range proc.Pids() {
		ps, err := proc.ReadStat(pid)
		if err != nil || ps.Dead() || ps.StartTicks < st.StartTicks {
			continue
		}
		if st.Isolated {
			if l, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/pid"); err == nil && l == ns {
				out = append(out, pid)
			}
		} else if ps.Session == st.PID {
			out = append(out, pid)
		}
	}
	return out
}

// Suspend stops every process of the replica (SIGSTOP, or the cgroup
// freezer where the replica has a cgroup v2). Memory, open files and sockets
// are kept, so Resume continues exactly where the app was; the port stays
// bound, so connections queue instead of being refused. The suspended flag
// is persisted, so a restarted berth still reports the replica suspended.
func (d *Driver) Suspend(ctx context.Context, id string) error {
	st, err := d.rd.Load(id)
	if err != nil {
		return err
	}
	st = d.adopt(st)
	if st.PID == 0 || !proc.Alive(st.PID, st.StartTicks) {
		return fmt.Errorf("process: suspend %s: the replica is not running", id)
	}
	// Persist first: if berth dies midway, the replica is reported
	// suspended and Resume continues it.
	st.Suspended = true
	if err := replicadir.WriteState(d.path(id), st); err != nil {
		return fmt.Errorf("process: suspend %s: %w", id, err)
	}
	if err := d.freeze(ctx, st); err != nil {
		d.thaw(st)
		st.Suspended = false
		replicadir.WriteState(d.path(id), st)
		return fmt.Errorf("process: suspend %s: %w", id, err)
	}
	return nil
}

// freeze stops every process of a replica: with the cgroup v2 freezer where
// the replica has a cgroup (atomic, and invisible to the app), else with
// SIGSTOP.
func (d *Driver) freeze(ctx context.Context, st state) error {
	if st.Cgroup != "" && freezeCgroup(ctx, st.Cgroup) {
		return nil
	}
	// The agent first, so it forks nothing new; then until every member
	// is seen stopped (a member may fork while we signal).
	syscall.Kill(st.PID, syscall.SIGSTOP)
	stopped := func() bool {
		all := true
		for _, pid := range d.members(st) {
			ps, err := proc.ReadStat(pid)
			if err != nil || ps.Dead() || ps.Stopped() {
				continue
			}
			syscall.Kill(pid, syscall.SIGSTOP)
			all = false
		}
		return all
	}
	if !proc.WaitFor(ctx, proc.KillPatience, stopped) {
		if err := ctx.Err(); err != nil {
			return err
		}
		return errors.New("processes keep running after SIGSTOP")
	}
	return nil
}

// Resume continues a suspended replica.
func (d *Driver) Resume(ctx context.Context, id string) (vm.Instance, error) {
	st, err := d.rd.Load(id)
	if err != nil {
		return vm.Instance{}, err
	}
	st = d.adopt(st)
	if st.PID == 0 || !proc.Alive(st.PID, st.StartTicks) {
		return vm.Instance{}, fmt.Errorf("process: resume %s: the replica is not running", id)
	}
	d.thaw(st)
	st.Suspended = false
	if err := replicadir.WriteState(d.path(id), st); err != nil {
		return vm.Instance{}, fmt.Errorf("process: resume %s: %w", id, err)
	}
	return d.instance(st), nil
}

// thaw continues every process of a replica.
func (d *Driver) thaw(st state) {
	if st.Cgroup != "" {
		os.WriteFile(filepath.Join(st.Cgroup, "cgroup.freeze"), []byte("0"), 0)
	}
	for _, pid := range d.members(st) {
		syscall.Kill(pid, syscall.SIGCONT)
	}
	if st.PID != 0 && proc.Alive(st.PID, st.StartTicks) {
		syscall.Kill(st.PID, syscall.SIGCONT)
	}
}

// Usage reports the replica's memory (the cgroup's memory.current, else the
// sum of its processes' resident sets, which counts shared pages once per
// process, like top) and its CPU use since the previous call (since its
// start on the first call).
func (d *Driver) Usage(ctx context.Context, id string) (vm.Usage, error) {
	st, err := d.rd.Load(id)
	if err != nil {
		return vm.Usage{}, err
	}
	st = d.adopt(st)
	if st.PID == 0 || !proc.Alive(st.PID, st.StartTicks) {
		return vm.Usage{}, nil
	}
	now := time.Now()
	mem, cpu, ok := cgroupUsage(st.Cgroup)
	if !ok {
		mem, cpu = 0, 0
		for _, pid := range d.members(st) {
			if ps, err := proc.ReadStat(pid); err == nil {
				cpu += ps.CPU()
			}
			mem += proc.RSS(pid)
		}
	}
	return vm.Usage{MemoryBytes: mem, CPUPercent: d.cpu.Percent(id, st.StartedAt, now, cpu)}, nil
}
