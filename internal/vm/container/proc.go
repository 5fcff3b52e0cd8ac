package container

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/proc"
)

// Usage reports the replica's memory (its cgroup's usage) and its CPU use
// since the previous call (since its start on the first call).
func (d *Driver) Usage(ctx context.Context, id string) (vm.Usage, error) {
	st, err := d.rd.Load(id)
	if err != nil {
		return vm.Usage{}, err
	}
	if st.PID == 0 || !proc.Alive(st.PID, st.StartTicks) {
		return vm.Usage{}, nil
	}
	mem, cpu, err := cgroupUsage(st.PID)
	if err != nil {
		return vm.Usage{}, fmt.Errorf("container: usage of %s: %w", id, err)
	}
	now := time.Now()
	return vm.Usage{MemoryBytes: mem, CPUPercent: d.cpu.Percent(id, st.StartedAt, now, cpu)}, nil
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
