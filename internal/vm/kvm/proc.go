package kvm

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/berth-dev/berth/internal/vm"
)

// procStat is what the driver reads from /proc/<pid>/stat.
type procStat struct {
	state      byte
	cpuTicks   uint64 // utime + stime, in clock ticks
	startTicks uint64 // since boot, in clock ticks
}

// clockTicks is USER_HZ, the unit of /proc times.
const clockTicks = 100

// readStat parses /proc/<pid>/stat; the command name (field 2) may hold
// spaces and parentheses, so fields are counted from its last ')'.
func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 || len(f[0]) != 1 {
		return procStat{}, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	num := func(n int) uint64 {
		v, _ := strconv.ParseUint(f[n-3], 10, 64)
		return v
	}
	return procStat{state: f[0][0], cpuTicks: num(14) + num(15), startTicks: num(22)}, nil
}

// isAlive reports whether pid is the process that started at startTicks and
// has not exited (a zombie has).
func isAlive(pid int, startTicks uint64) bool {
	if pid <= 0 {
		return false
	}
	ps, err := readStat(pid)
	return err == nil && ps.startTicks == startTicks && ps.state != 'Z' && ps.state != 'X'
}

// cpuSample is a reading of a QEMU process's cumulative CPU time.
type cpuSample struct {
	at  time.Time
	cpu time.Duration
}

// Usage reports the QEMU process's resident memory (guest memory the guest has
// touched, plus the QEMU process's own) and its CPU use since the previous call
// (since its start on the first). A suspended replica uses nothing.
func (d *Driver) Usage(ctx context.Context, id string) (vm.Usage, error) {
	st, err := d.load(id)
	if err != nil {
		return vm.Usage{}, err
	}
	if st.Suspended || !isAlive(st.PID, st.StartTicks) {
		return vm.Usage{}, nil
	}
	now := time.Now()
	ps, err := readStat(st.PID)
	if err != nil {
		return vm.Usage{}, nil
	}
	cpu := time.Duration(ps.cpuTicks) * time.Second / clockTicks
	var mem int64
	if b, err := os.ReadFile("/proc/" + strconv.Itoa(st.PID) + "/statm"); err == nil {
		if f := strings.Fields(string(b)); len(f) > 1 {
			rss, _ := strconv.ParseInt(f[1], 10, 64)
			mem = rss * int64(os.Getpagesize())
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
