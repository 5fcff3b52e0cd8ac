package container

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/berth-dev/berth/internal/vm"
)

// procStat is what the driver reads from /proc/<pid>/stat.
type procStat struct {
	state      byte   // R, S, D, T, t, Z, X, ...
	startTicks uint64 // since boot, in clock ticks
}

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
	start, err := strconv.ParseUint(f[22-3], 10, 64)
	if err != nil {
		return procStat{}, false
	}
	return procStat{state: f[0][0], startTicks: start}, true
}

// isAlive reports whether pid is the process that started at startTicks
// and has not exited (a zombie has).
func isAlive(pid int, startTicks uint64) bool {
	ps, err := readStat(pid)
	return err == nil && ps.startTicks == startTicks && ps.state != 'Z' && ps.state != 'X'
}

// cpuSample is a reading of a replica's cumulative CPU time.
type cpuSample struct {
	at  time.Time
	cpu time.Duration
}

// Usage reports the replica's memory (its cgroup's usage) and its CPU use
// since the previous call (since its start on the first call).
func (d *Driver) Usage(ctx context.Context, id string) (vm.Usage, error) {
	st, err := d.load(id)
	if err != nil {
		return vm.Usage{}, err
	}
	if st.PID == 0 || !isAlive(st.PID, st.StartTicks) {
		return vm.Usage{}, nil
	}
	mem, cpu, err := cgroupUsage(st.PID)
	if err != nil {
		return vm.Usage{}, fmt.Errorf("container: usage of %s: %w", id, err)
	}
	now := time.Now()
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

// cgroupUsage reads the memory and cumulative CPU time of the cgroup of
// pid, on cgroup v2 (memory.current, cpu.stat) or v1 (memory and cpuacct
// hierarchies).
func cgroupUsage(pid int) (int64, time.Duration, error) {
	v2, memDir, cpuDir := cgroupDirs(pid)
	readInt := func(path string) (int64, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return 0, err
		}
		return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	}
	if v2 != "" {
		mem, err := readInt(filepath.Join(v2, "memory.current"))
		if err != nil {
			return 0, 0, err
		}
		b, err := os.ReadFile(filepath.Join(v2, "cpu.stat"))
		if err != nil {
			return 0, 0, err
		}
		for line := range strings.Lines(string(b)) {
			if v, ok := strings.CutPrefix(line, "usage_usec "); ok {
				usec, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				if err != nil {
					return 0, 0, err
				}
				return mem, time.Duration(usec) * time.Microsecond, nil
			}
		}
		return mem, 0, nil
	}
	if memDir == "" {
		return 0, 0, fmt.Errorf("no memory cgroup for pid %d", pid)
	}
	mem, err := readInt(filepath.Join(memDir, "memory.usage_in_bytes"))
	if err != nil {
		return 0, 0, err
	}
	var cpu int64
	if cpuDir != "" {
		cpu, _ = readInt(filepath.Join(cpuDir, "cpuacct.usage")) // nanoseconds
	}
	return mem, time.Duration(cpu), nil
}
