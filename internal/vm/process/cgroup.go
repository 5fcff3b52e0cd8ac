package process

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/proc"
)

// cgroupRoot is where the unified (v2) hierarchy is mounted.
const cgroupRoot = "/sys/fs/cgroup"

// DefaultPidsMax is the pids.max of a replica's cgroup when
// Options.PidsMax is zero.
const DefaultPidsMax = 512

// cgroupConfig is the cgroup setup a Driver found at New.
type cgroupConfig struct {
	parent            string // cgroup v2; "" when replicas get no v2 cgroups
	cpu, memory, pids bool   // v2 controllers enabled for replicas' cgroups
	// v1 are the parents of replicas' cgroups in cgroup v1 hierarchies,
	// by controller (pids first), where there is no v2 hierarchy.
	v1      []v1Parent
	pidsMax int
	// none says why replicas get no pids limit ("" when they do).
	none string
}

type v1Parent struct{ controller, dir string }

// v1Controllers are the cgroup v1 controllers replicas are limited by.
var v1Controllers = []string{"pids", "memory", "cpu"}

// limited reports whether replicas get at least a pids limit.
func (cg cgroupConfig) limited() bool { return cg.none == "" }

// setupV1 prepares <hierarchy>/berth in each cgroup v1 hierarchy of
// v1Controllers; the pids one is required.
func setupV1(log *slog.Logger) cgroupConfig {
	var cg cgroupConfig
	for _, c := range v1Controllers {
		root := filepath.Join(cgroupRoot, c)
		if _, err := os.Stat(filepath.Join(root, "cgroup.procs")); err != nil {
			if c == "pids" {
				return cgroupConfig{none: "no cgroup v2 hierarchy, and no cgroup v1 pids controller at " + root}
			}
			log.Warn("process: no cgroup v1 controller; its size limits are not enforced", "controller", c)
			continue
		}
		dir := filepath.Join(root, "berth")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			if c == "pids" {
				return cgroupConfig{none: fmt.Sprintf("cannot make a cgroup v1 pids cgroup: %v", err)}
			}
			log.Warn("process: cannot make a cgroup v1 cgroup; its size limits are not enforced", "controller", c, "err", err)
			continue
		}
		cg.v1 = append(cg.v1, v1Parent{c, dir})
	}
	return cg
}

// setupCgroups prepares the parent of replicas' cgroups: it must be in a
// cgroup v2 hierarchy berth can write. It enables the cpu and memory
// controllers for the parent's children where the kernel lets it; the "no
// internal processes" rule refuses that when the parent's parent holds
// processes (berth in a non-root cgroup), and then replicas get cgroups (for
// membership, freezing and cgroup.kill) without limits.
func setupCgroups(parent string, pidsMax int, log *slog.Logger) cgroupConfig {
	cg := setupCgroupsAt(parent, log)
	cg.pidsMax = pidsMax
	return cg
}

func setupCgroupsAt(parent string, log *slog.Logger) cgroupConfig {
	switch parent {
	case "none":
		return cgroupConfig{none: `cgroups are disabled (CgroupParent "none")`}
	case "":
		if _, err := os.Stat(filepath.Join(cgroupRoot, "cgroup.controllers")); err != nil {
			if os.Geteuid() != 0 {
				return cgroupConfig{none: "berth is not root"}
			}
			return setupV1(log)
		}
		parent = filepath.Join(cgroupRoot, "berth")
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		log.Warn("process: replicas run without cgroups", "err", err)
		return cgroupConfig{none: fmt.Sprintf("cannot make the cgroup %s: %v", parent, err)}
	}
	if _, err := os.Stat(filepath.Join(parent, "cgroup.procs")); err != nil {
		log.Warn("process: replicas run without cgroups: not a cgroup v2 directory", "dir", parent)
		return cgroupConfig{none: parent + " is not a cgroup v2 directory"}
	}
	// One controller per write: the kernel refuses a whole write if one of
	// its controllers is unavailable.
	for _, dir := range []string{filepath.Dir(parent), parent} {
		for _, c := range []string{"+cpu", "+memory", "+pids"} {
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
			cg.pids = cg.pids || c == "pids"
		}
	}
	if !cg.pids {
		cg.none = "the cgroup v2 pids controller cannot be enabled in " + parent
	}
	return cg
}

// limits returns the cgroup v2 files and values that enforce a size:
// VCPUs whole CPUs of bandwidth per 100 ms period, and MemoryMB of memory;
// with low (StartBackground), the lowest CPU weight as well.
func limits(size vm.Size, pidsMax int, low bool) map[string]string {
	m := map[string]string{
		"cpu.max":    fmt.Sprintf("%d 100000", size.VCPUs*100000),
		"memory.max": strconv.FormatInt(int64(size.MemoryMB)<<20, 10),
		"pids.max":   strconv.Itoa(pidsMax),
	}
	if low {
		m["cpu.weight"] = lowWeight
	}
	return m
}

// The CPU weights of a replica started in the background (StartBackground)
// and of every other (the kernel's default), on cgroup v2 (cpu.weight)
// and v1 (cpu.shares).
const (
	lowWeight, normalWeight = "1", "100"
	lowShares, normalShares = "2", "1024"
)

// limitsV1 are limits in cgroup v1 files, by controller, in the order to
// write them.
func limitsV1(size vm.Size, pidsMax int, low bool) map[string][][2]string {
	m := map[string][][2]string{
		"pids":   {{"pids.max", strconv.Itoa(pidsMax)}},
		"memory": {{"memory.limit_in_bytes", strconv.FormatInt(int64(size.MemoryMB)<<20, 10)}},
		"cpu":    {{"cpu.cfs_period_us", "100000"}, {"cpu.cfs_quota_us", strconv.Itoa(size.VCPUs * 100000)}},
	}
	if low {
		m["cpu"] = append(m["cpu"], [2]string{"cpu.shares", lowShares})
	}
	return m
}

// createV1 makes the cgroup v1 cgroups of a replica with the limits of its
// size, pids first, and returns their directories. A limit that cannot be
// set fails it: the agent must not run in a cgroup that does not limit.
func (cg cgroupConfig) createV1(id string, size vm.Size, low bool) ([]string, error) {
	var dirs []string
	for _, p := range cg.v1 {
		dir := filepath.Join(p.dir, id)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			removeCgroups(dirs)
			return nil, err
		}
		dirs = append(dirs, dir)
	}
	if err := cg.limitV1(dirs, size, low); err != nil {
		removeCgroups(dirs)
		return nil, err
	}
	return dirs, nil
}

// limitV1 sets the limits of size in the cgroups of createV1.
func (cg cgroupConfig) limitV1(dirs []string, size vm.Size, low bool) error {
	lim := limitsV1(size, cg.pidsMax, low)
	for i, p := range cg.v1 {
		for _, kv := range lim[p.controller] {
			if err := os.WriteFile(filepath.Join(dirs[i], kv[0]), []byte(kv[1]), 0o644); err != nil {
				return fmt.Errorf("setting %s: %w", kv[0], err)
			}
		}
	}
	return nil
}

// renameV1 moves the cgroups of createV1 to the name id, with the limits
// of size: a spare's cgroups become its replica's without moving the
// agent, which on cgroup v1 costs an RCU grace period (milliseconds).
func (cg cgroupConfig) renameV1(dirs []string, id string, size vm.Size, low bool) ([]string, error) {
	out := slices.Clone(dirs) // where they are, whatever fails
	for i, p := range cg.v1 {
		to := filepath.Join(p.dir, id)
		if err := syscall.Rename(dirs[i], to); err != nil {
			return out, &os.LinkError{Op: "rename", Old: dirs[i], New: to, Err: err}
		}
		out[i] = to
	}
	return out, cg.limitV1(out, size, low)
}

// removeCgroups removes cgroups (see removeCgroup).
func removeCgroups(dirs []string) {
	for _, d := range dirs {
		removeCgroup(d)
	}
}

// create makes the cgroup of a replica with the limits of its size (and
// the lowest CPU weight with low) and returns its path and an open directory for SysProcAttr.CgroupFD. A
// leftover cgroup of the same id (berth died during Stop) is reused.
func (cg cgroupConfig) create(id string, size vm.Size, low bool, log *slog.Logger) (string, *os.File, error) {
	dir := filepath.Join(cg.parent, id)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", nil, err
	}
	for file, value := range limits(size, cg.pidsMax, low) {
		if !cg.cpu && strings.HasPrefix(file, "cpu.") || !cg.memory && strings.HasPrefix(file, "memory.") || !cg.pids && strings.HasPrefix(file, "pids.") {
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
// (cgroup.events says "frozen 1") before ctx ended or proc.KillPatience passed.
func freezeCgroup(ctx context.Context, dir string) bool {
	if os.WriteFile(filepath.Join(dir, "cgroup.freeze"), []byte("1"), 0) != nil {
		return false
	}
	return proc.WaitFor(ctx, proc.KillPatience, func() bool {
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

// Foreground gives a replica started with StartBackground the CPU
// priority of any other: its cgroup's cpu.weight (cpu.shares on cgroup v1)
// back to the kernel's default, and every thread of its processes at nice
// proc.BackgroundNice back to berth's own. berth calls it when the
// replica is promoted (starts taking traffic). It is idempotent, and
// changes nothing of a replica started with Start (its app may have
// lowered the priority of its own processes, which stays).
func (d *Driver) Foreground(ctx context.Context, id string) error {
	st, err := d.rd.Load(id)
	if err != nil {
		return err
	}
	st = d.adopt(st)
	var errs []error
	if st.Cgroup != "" && d.cg.cpu {
		if err := os.WriteFile(filepath.Join(st.Cgroup, "cpu.weight"), []byte(normalWeight), 0); err != nil {
			errs = append(errs, err)
		}
	}
	for i, p := range d.cg.v1 {
		if p.controller == "cpu" && i < len(st.CgroupsV1) && filepath.Dir(st.CgroupsV1[i]) == p.dir {
			if err := os.WriteFile(filepath.Join(st.CgroupsV1[i], "cpu.shares"), []byte(normalShares), 0); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if d.niceSpares && st.PID != 0 && proc.Alive(st.PID, st.StartTicks) {
		members := func() []int { return append(d.members(st), st.PID) }
		if err := proc.Renice(members, d.nice, func(n int) bool { return n == proc.BackgroundNice }); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("process: restoring the CPU priority of %s: %w", id, err)
	}
	return nil
}
