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
)

// procStat is what the driver reads from /proc/<pid>/stat.
type procStat struct {
	state      byte // R, S, D, T, t, Z, X, ...
	session    int
	cpuTicks   uint64 // utime + stime, in clock ticks
	startTicks uint64 // since boot, in clock ticks
}

// clockTicks is USER_HZ, the unit of /proc times: 100 on every Linux
// architecture Go supports.
const clockTicks = 100

// readStat parses /proc/<pid>/stat. The command name (field 2) may hold
// spaces and parentheses, so fields are counted from its last ')'.
func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	ps, ok := parseStat(b)
	if !ok {
		return procStat{}, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	return ps, nil
}

// parseStat parses the contents of a /proc/<pid>/stat file.
func parseStat(b []byte) (procStat, bool) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, false
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); field n is f[n-3].
	if len(f) < 20 || len(f[0]) != 1 {
		return procStat{}, false
	}
	num := func(n int) uint64 {
		v, _ := strconv.ParseUint(f[n-3], 10, 64)
		return v
	}
	return procStat{
		state:      f[0][0],
		session:    int(num(6)),
		cpuTicks:   num(14) + num(15),
		startTicks: num(22),
	}, true
}

func (ps procStat) dead() bool { return ps.state == 'Z' || ps.state == 'X' }

// isAlive reports whether pid is the process that started at startTicks and
// has not exited (a zombie has). A thread-group leader shows as a zombie as
// soon as its own thread exits, while its other threads may still be
// exiting: until the last one has, the process is not gone (the agent is
// multi-threaded, and as a PID namespace's init it takes the namespace's
// other processes down only when its last thread exits).
func isAlive(pid int, startTicks uint64) bool {
	ps, err := readStat(pid)
	if err != nil || ps.startTicks != startTicks {
		return false
	}
	return !ps.dead() || threadsLeft(pid)
}

// threadsLeft reports whether a process has threads other than its leader.
func threadsLeft(pid int) bool {
	tasks, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	if err != nil {
		return false
	}
	for _, t := range tasks {
		if t.Name() != strconv.Itoa(pid) {
			return true
		}
	}
	return false
}

// pids lists the processes in /proc.
func pids() []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// findByArg returns the live process one of whose arguments is arg.
func findByArg(arg string) (int, procStat, bool) {
	want := []byte(arg)
	for _, pid := range pids() {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		if err != nil || !bytes.Contains(b, want) {
			continue
		}
		if !slices.ContainsFunc(bytes.Split(b, []byte{0}), func(a []byte) bool { return bytes.Equal(a, want) }) {
			continue
		}
		if ps, err := readStat(pid); err == nil && !ps.dead() {
			return pid, ps, true
		}
	}
	return 0, procStat{}, false
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
					if ps, err := readStat(pid); err == nil && !ps.dead() {
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
		if !isAlive(st.PID, st.StartTicks) {
			// The namespace dies with its init: the kernel kills the rest.
			return nil
		}
		var err error
		if ns, err = os.Readlink("/proc/" + strconv.Itoa(st.PID) + "/ns/pid"); err != nil {
			return nil
		}
	}
	var out []int
	for _, pid := range pids() {
		ps, err := readStat(pid)
		if err != nil || ps.dead() || ps.startTicks < st.StartTicks {
			continue
		}
		if st.Isolated {
			if l, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/pid"); err == nil && l == ns {
				out = append(out, pid)
			}
		} else if ps.session == st.PID {
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
	st, err := d.load(id)
	if err != nil {
		return err
	}
	st = d.adopt(st)
	if st.PID == 0 || !isAlive(st.PID, st.StartTicks) {
		return fmt.Errorf("process: suspend %s: the replica is not running", id)
	}
	// Persist first: if berth dies midway, the replica is reported
	// suspended and Resume continues it.
	st.Suspended = true
	if err := writeState(d.path(id), st); err != nil {
		return fmt.Errorf("process: suspend %s: %w", id, err)
	}
	if err := d.freeze(ctx, st); err != nil {
		d.thaw(st)
		st.Suspended = false
		writeState(d.path(id), st)
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
			ps, err := readStat(pid)
			if err != nil || ps.dead() || ps.state == 'T' || ps.state == 't' {
				continue
			}
			syscall.Kill(pid, syscall.SIGSTOP)
			all = false
		}
		return all
	}
	if !waitFor(ctx, killPatience, stopped) {
		if err := ctx.Err(); err != nil {
			return err
		}
		return errors.New("processes keep running after SIGSTOP")
	}
	return nil
}

// Resume continues a suspended replica.
func (d *Driver) Resume(ctx context.Context, id string) (vm.Instance, error) {
	st, err := d.load(id)
	if err != nil {
		return vm.Instance{}, err
	}
	st = d.adopt(st)
	if st.PID == 0 || !isAlive(st.PID, st.StartTicks) {
		return vm.Instance{}, fmt.Errorf("process: resume %s: the replica is not running", id)
	}
	d.thaw(st)
	st.Suspended = false
	if err := writeState(d.path(id), st); err != nil {
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
	if st.PID != 0 && isAlive(st.PID, st.StartTicks) {
		syscall.Kill(st.PID, syscall.SIGCONT)
	}
}

// cpuSample is a reading of a replica's cumulative CPU time.
type cpuSample struct {
	at  time.Time
	cpu time.Duration
}

// Usage reports the replica's memory (the cgroup's memory.current, else the
// sum of its processes' resident sets, which counts shared pages once per
// process, like top) and its CPU use since the previous call (since its
// start on the first call).
func (d *Driver) Usage(ctx context.Context, id string) (vm.Usage, error) {
	st, err := d.load(id)
	if err != nil {
		return vm.Usage{}, err
	}
	st = d.adopt(st)
	if st.PID == 0 || !isAlive(st.PID, st.StartTicks) {
		return vm.Usage{}, nil
	}
	now := time.Now()
	mem, cpu, ok := cgroupUsage(st.Cgroup)
	if !ok {
		mem, cpu = 0, 0
		page := int64(os.Getpagesize())
		for _, pid := range d.members(st) {
			if ps, err := readStat(pid); err == nil {
				cpu += time.Duration(ps.cpuTicks) * time.Second / clockTicks
			}
			if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/statm"); err == nil {
				if f := strings.Fields(string(b)); len(f) > 1 {
					rss, _ := strconv.ParseInt(f[1], 10, 64)
					mem += rss * page
				}
			}
		}
	}
	d.mu.Lock()
	prev, seen := d.cpu[id]
	d.cpu[id] = cpuSample{now, cpu}
	d.mu.Unlock()
	if !seen {
		prev = cpuSample{at: st.StartedAt}
	}
	u := vm.Usage{MemoryBytes: mem}
	if wall := now.Sub(prev.at); wall > 0 && cpu > prev.cpu {
		u.CPUPercent = 100 * float64(cpu-prev.cpu) / float64(wall)
	}
	return u, nil
}
