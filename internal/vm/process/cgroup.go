package process

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/berth-dev/berth/internal/vm"
)

// cgroupRoot is where the unified (v2) hierarchy is mounted.
const cgroupRoot = "/sys/fs/cgroup"

// cgroupConfig is the cgroup v2 setup a Driver found at New.
type cgroupConfig struct {
	parent      string // "" when replicas get no cgroups
	cpu, memory bool   // controllers enabled for replicas' cgroups
}

// setupCgroups prepares the parent of replicas' cgroups: it must be in a
// cgroup v2 hierarchy berth can write. It enables the cpu and memory
// controllers for the parent's children where the kernel lets it; the "no
// internal processes" rule refuses that when the parent's parent holds
// processes (berth in a non-root cgroup), and then replicas get cgroups (for
// membership, freezing and cgroup.kill) without limits.
func setupCgroups(parent string, log *slog.Logger) cgroupConfig {
	switch parent {
	case "none":
		return cgroupConfig{}
	case "":
		if _, err := os.Stat(filepath.Join(cgroupRoot, "cgroup.controllers")); err != nil {
			return cgroupConfig{} // no cgroup v2 here: nothing to degrade from
		}
		parent = filepath.Join(cgroupRoot, "berth")
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		log.Warn("process: replicas run without cgroups", "err", err)
		return cgroupConfig{}
	}
	if _, err := os.Stat(filepath.Join(parent, "cgroup.procs")); err != nil {
		log.Warn("process: replicas run without cgroups: not a cgroup v2 directory", "dir", parent)
		return cgroupConfig{}
	}
	// One controller per write: the kernel refuses a whole write if one of
	// its controllers is unavailable.
	for _, dir := range []string{filepath.Dir(parent), parent} {
		for _, c := range []string{"+cpu", "+memory"} {
			if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte(c), 0); err != nil {
				log.Warn("process: cannot enable a cgroup controller; its size limits are not enforced", "dir", dir, "controller", c[1:], "err", err)
			}
		}
	}
	cg := cgroupConfig{parent: parent}
	if b, err := os.ReadFile(filepath.Join(parent, "cgroup.subtree_control")); err == nil {
		for _, c := range strings.Fields(string(b)) {
			cg.cpu = cg.cpu || c == "cpu"
			cg.memory = cg.memory || c == "memory"
		}
	}
	return cg
}

// limits returns the cgroup v2 files and values that enforce a size:
// VCPUs whole CPUs of bandwidth per 100 ms period, and MemoryMB of memory.
func limits(size vm.Size) map[string]string {
	return map[string]string{
		"cpu.max":    fmt.Sprintf("%d 100000", size.VCPUs*100000),
		"memory.max": strconv.FormatInt(int64(size.MemoryMB)<<20, 10),
	}
}

// create makes the cgroup of a replica with the limits of its size and
// returns its path and an open directory for SysProcAttr.CgroupFD. A
// leftover cgroup of the same id (berth died during Stop) is reused.
func (cg cgroupConfig) create(id string, size vm.Size, log *slog.Logger) (string, *os.File, error) {
	dir := filepath.Join(cg.parent, id)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", nil, err
	}
	for file, value := range limits(size) {
		if !cg.cpu && strings.HasPrefix(file, "cpu.") || !cg.memory && strings.HasPrefix(file, "memory.") {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, file), []byte(value), 0o644); err != nil {
			log.Warn("process: cannot set a cgroup limit", "id", id, "file", file, "err", err)
		}
	}
	f, err := os.Open(dir)
	if err != nil {
		os.Remove(dir)
		return "", nil, err
	}
	return dir, f, nil
}

// removeCgroup removes a replica's cgroup once its processes are gone; the
// kernel refuses (EBUSY) while exiting tasks are still accounted to it.
func removeCgroup(dir string) {
	deadline := time.Now().Add(2 * time.Second)
	for {
		err := syscall.Rmdir(dir)
		if err == nil || !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// cgroupUsage reads a cgroup's memory.current and cpu.stat usage_usec.
func cgroupUsage(dir string) (mem int64, cpu time.Duration, ok bool) {
	if dir == "" {
		return 0, 0, false
	}
	b, err := os.ReadFile(filepath.Join(dir, "memory.current"))
	if err != nil {
		return 0, 0, false
	}
	if mem, err = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err != nil {
		return 0, 0, false
	}
	b, err = os.ReadFile(filepath.Join(dir, "cpu.stat"))
	if err != nil {
		return 0, 0, false
	}
	for line := range strings.Lines(string(b)) {
		if v, found := strings.CutPrefix(line, "usage_usec "); found {
			usec, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return 0, 0, false
			}
			return mem, time.Duration(usec) * time.Microsecond, true
		}
	}
	return 0, 0, false
}

// freezeCgroup freezes a cgroup and reports whether the kernel confirmed it
// (cgroup.events says "frozen 1") before ctx ended or killPatience passed.
func freezeCgroup(ctx context.Context, dir string) bool {
	if os.WriteFile(filepath.Join(dir, "cgroup.freeze"), []byte("1"), 0) != nil {
		return false
	}
	return waitFor(ctx, killPatience, func() bool {
		b, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
		if err != nil {
			return false
		}
		for line := range strings.Lines(string(b)) {
			if strings.TrimSpace(line) == "frozen 1" {
				return true
			}
		}
		return false
	})
}
