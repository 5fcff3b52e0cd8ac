// Package proc is what the drivers know of host processes: a process named
// by its pid and start time (so a reused pid is not mistaken for it), its
// /proc/<pid>/stat, whether it is alive, waiting for it to end, the one stop
// order every driver follows (End), and CPU sampling for vm.Usage.
package proc

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Stat is what the drivers read from /proc/<pid>/stat.
type Stat struct {
	State      byte // R, S, D, T, t, Z, X, ...
	Session    int
	CPUTicks   uint64 // utime + stime, in clock ticks
	StartTicks uint64 // since boot, in clock ticks
}

// ClockTicks is USER_HZ, the unit of /proc times: 100 on every Linux
// architecture Go supports.
const ClockTicks = 100

// CPU is the process's cumulative CPU time.
func (s Stat) CPU() time.Duration { return time.Duration(s.CPUTicks) * time.Second / ClockTicks }

// Dead reports whether the process has exited (a zombie has).
func (s Stat) Dead() bool { return s.State == 'Z' || s.State == 'X' }

// Stopped reports whether the process is stopped by a signal or traced.
func (s Stat) Stopped() bool { return s.State == 'T' || s.State == 't' }

// ReadStat parses /proc/<pid>/stat.
func ReadStat(pid int) (Stat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return Stat{}, err
	}
	ps, ok := ParseStat(b)
	if !ok {
		return Stat{}, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	return ps, nil
}

// ParseStat parses the contents of a /proc/<pid>/stat file. The command
// name (field 2) may hold spaces and parentheses, so fields are counted
// from its last ')'.
func ParseStat(b []byte) (Stat, bool) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return Stat{}, false
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); field n is f[n-3].
	if len(f) < 20 || len(f[0]) != 1 {
		return Stat{}, false
	}
	num := func(n int) uint64 {
		v, _ := strconv.ParseUint(f[n-3], 10, 64)
		return v
	}
	start, err := strconv.ParseUint(f[22-3], 10, 64)
	if err != nil {
		return Stat{}, false
	}
	return Stat{
		State:      f[0][0],
		Session:    int(num(6)),
		CPUTicks:   num(14) + num(15),
		StartTicks: start,
	}, true
}

// Alive reports whether pid is the process that started at startTicks and
// has not exited. A thread-group leader shows as a zombie as soon as its
// own thread exits, while its other threads may still be exiting: until the
// last one has, the process is not gone (the agent is multi-threaded, and
// as a PID namespace's init it takes the namespace's other processes down
// only when its last thread exits).
func Alive(pid int, startTicks uint64) bool {
	if pid <= 0 {
		return false
	}
	ps, err := ReadStat(pid)
	if err != nil || ps.StartTicks != startTicks {
		return false
	}
	return !ps.Dead() || threadsLeft(pid)
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

// Pids lists the processes in /proc.
func Pids() []int {
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

// RSS is the resident memory of pid (0 if it is gone).
func RSS(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	rss, _ := strconv.ParseInt(f[1], 10, 64)
	return rss * int64(os.Getpagesize())
}

// WaitFor polls cond until it holds, d passes or ctx ends, and reports
// whether cond held.
func WaitFor(ctx context.Context, d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	wait := time.Millisecond
	for {
		if cond() {
			return true
		}
		if !time.Now().Before(deadline) || ctx.Err() != nil {
			return false
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
		wait = min(2*wait, 50*time.Millisecond)
	}
}

// KillPatience bounds how long a driver waits for SIGKILLed processes to
// vanish.
const KillPatience = 10 * time.Second

// Ending is how one driver ends one sandbox; End calls its parts in the
// order every driver follows.
type Ending struct {
	// Gone reports whether the sandbox has ended. Required.
	Gone func() bool
	// Thaw continues a suspended sandbox, so that it can act on Polite (a
	// frozen or stopped process handles no signal). Nil when it is not
	// suspended or cannot be continued.
	Thaw func()
	// Polite asks the sandbox to end (SIGTERM, Ctrl-Alt-Del). A non-nil
	// error means it was not asked, and End kills at once. Nil: kill at
	// once.
	Polite func() error
	// Kill sends SIGKILL to whatever is left; End calls it until Gone
	// holds or KillPatience passes. Required.
	Kill func()
	// What names the sandbox in the error for one that survives SIGKILL.
	What string
}

// End ends a sandbox in the one stop order: thaw it if it is suspended, ask
// it to end, wait up to grace for it to, then SIGKILL what is left until it
// is gone. A sandbox already gone is left alone.
func End(ctx context.Context, grace time.Duration, e Ending) (politeErr error, err error) {
	if e.Gone() {
		return nil, nil
	}
	if e.Thaw != nil {
		e.Thaw()
	}
	if e.Polite != nil && grace > 0 {
		if politeErr = e.Polite(); politeErr == nil {
			WaitFor(ctx, grace, e.Gone)
		}
	}
	gone := func() bool {
		if e.Gone() {
			return true
		}
		e.Kill()
		return false
	}
	if !WaitFor(ctx, KillPatience, gone) {
		if err := ctx.Err(); err != nil {
			return politeErr, err
		}
		return politeErr, fmt.Errorf("%s survives SIGKILL", e.What)
	}
	return politeErr, nil
}

// CPUMeter turns readings of cumulative CPU time into a percentage of one
// core since the previous reading, per replica.
type CPUMeter struct {
	mu   sync.Mutex
	last map[string]cpuSample
}

type cpuSample struct {
	at  time.Time
	cpu time.Duration
}

// Percent records that replica id had used cpu by now, and returns its use
// since the previous reading (since start on the first).
func (m *CPUMeter) Percent(id string, start, now time.Time, cpu time.Duration) float64 {
	m.mu.Lock()
	if m.last == nil {
		m.last = make(map[string]cpuSample)
	}
	prev, seen := m.last[id]
	m.last[id] = cpuSample{now, cpu}
	m.mu.Unlock()
	if !seen {
		prev = cpuSample{at: start}
	}
	if wall := now.Sub(prev.at); wall > 0 && cpu > prev.cpu {
		return 100 * float64(cpu-prev.cpu) / float64(wall)
	}
	return 0
}

// Forget drops the readings of replica id.
func (m *CPUMeter) Forget(id string) {
	m.mu.Lock()
	delete(m.last, id)
	m.mu.Unlock()
}

// Process reads the resident memory of the single process pid (a VMM)
// and its CPU use since the previous reading for replica id (since start
// on the first); ok is false when the process is gone.
func (m *CPUMeter) Process(id string, pid int, start time.Time) (rss int64, percent float64, ok bool) {
	now := time.Now()
	ps, err := ReadStat(pid)
	if err != nil {
		return 0, 0, false
	}
	return RSS(pid), m.Percent(id, start, now, ps.CPU()), true
}

// Kill SIGKILLs the process pid that started at startTicks until it is
// gone, for up to KillPatience; what names it in the error for one that
// survives.
func Kill(ctx context.Context, pid int, startTicks uint64, what string) error {
	_, err := End(ctx, 0, Ending{
		What: what,
		Gone: func() bool { return !Alive(pid, startTicks) },
		Kill: func() { syscall.Kill(pid, syscall.SIGKILL) },
	})
	return err
}
