package container

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

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/berth-dev/berth/internal/vm/proc"
)

// A replica started in the background (StartBackground) runs at a low CPU
// priority until Foreground: its cgroup at the lowest CPU weight, its
// processes at nice proc.BackgroundNice.

// The cgroup CPU weights of a replica in the background and of any other
// (the kernel's default): cpu.weight on cgroup v2, cpu.shares on v1. The
// OCI config says shares, which the runtimes convert for cgroup v2
// (shares 2 is weight 1).
const (
	lowShares, normalShares = 2, 1024
	lowWeight, normalWeight = 1, 100
)

// lowPriority gives the container of cfg the lowest CPU weight from its
// creation.
func lowPriority(cfg *specs.Spec) {
	shares := uint64(lowShares)
	cfg.Linux.Resources.CPU.Shares = &shares
}

// Foreground gives a replica started with StartBackground the CPU
// priority of any other: its cgroup's CPU weight back to the kernel's
// default, and every thread of its processes at nice
// proc.BackgroundNice back to berth's own. berth calls it when the
// replica is promoted (starts taking traffic). It is idempotent, and
// harmless on a replica started with Start. A replica still being
// started (berth gives up on its low priority when its boot takes long)
// gets it too: the runtime at work on it is reniced, and what it starts
// after that inherits the normal priority.
func (d *Driver) Foreground(ctx context.Context, id string) error {
	st, err := d.rd.Load(id)
	if err != nil {
		return err
	}
	if st.PID != 0 && !proc.Alive(st.PID, st.StartTicks) {
		return fmt.Errorf("container: foreground %s: the replica is not running", id)
	}
	if err := d.setPriority(st, false); err != nil {
		return fmt.Errorf("container: foreground %s: %w", id, err)
	}
	return nil
}

// setPriority sets the CPU priority of the container of st: low (the
// lowest CPU weight, every thread at nice proc.BackgroundNice) or normal
// (the default weight, the threads at proc.BackgroundNice at berth's
// own nice).
func (d *Driver) setPriority(st state, low bool) error {
	var errs []error
	dirs := cpuCgroupDirs(st.Cgroup)
	if len(dirs) == 0 && st.PID != 0 {
		// (One being started may have none yet.)
		errs = append(errs, fmt.Errorf("no cpu cgroup %s", st.Cgroup))
	}
	for _, dir := range dirs {
		file, value := "cpu.weight", normalWeight
		if low {
			value = lowWeight
		}
		if dir.v1 {
			file, value = "cpu.shares", normalShares
			if low {
				value = lowShares
			}
		}
		if err := os.WriteFile(filepath.Join(dir.path, file), []byte(strconv.Itoa(value)), 0); err != nil {
			errs = append(errs, err)
		}
	}
	bundle := d.path(st.ID, bundleDir)
	members := func() []int {
		var pids []int
		if st.PID != 0 {
			pids = append(pids, st.PID)
		} else {
			// Being started: the runtime's processes at work on it
			// name its bundle, and its cgroup may be there by now.
			pids = withArg(bundle)
			dirs = cpuCgroupDirs(st.Cgroup)
		}
		for _, dir := range dirs {
			b, err := os.ReadFile(filepath.Join(dir.path, "cgroup.procs"))
			if err != nil {
				continue
			}
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil && pid != st.PID {
					pids = append(pids, pid)
				}
			}
			break // one hierarchy lists them all
		}
		return pids
	}
	nice, which := d.nice, func(n int) bool { return n == proc.BackgroundNice }
	if low {
		nice, which = proc.BackgroundNice, proc.AnyNice
	}
	if err := proc.Renice(members, nice, which); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// withArg lists the live processes one of whose arguments is arg.
func withArg(arg string) []int {
	want := []byte(arg)
	var out []int
	for _, pid := range proc.Pids() {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		if err != nil || !bytes.Contains(b, want) {
			continue
		}
		if slices.ContainsFunc(bytes.Split(b, []byte{0}), func(a []byte) bool { return bytes.Equal(a, want) }) {
			out = append(out, pid)
		}
	}
	return out
}

// cpuDir is a container's cgroup directory in a hierarchy with the cpu
// controller.
type cpuDir struct {
	path string
	v1   bool // cpu.shares; else cpu.weight (cgroup v2)
}

// cpuCgroupDirs finds the directories of the cgroup at path (a
// cgroupsPath) that have the cpu controller: the cgroup v2 one, or the
// cgroup v1 cpu hierarchy's.
func cpuCgroupDirs(path string) []cpuDir {
	if path == "" || !filepath.IsAbs(path) || filepath.Clean(path) == "/" {
		return nil
	}
	var out []cpuDir
	for _, m := range cgroupMounts() {
		dir := filepath.Join(m, path)
		if _, err := os.Stat(filepath.Join(dir, "cpu.weight")); err == nil {
			out = append(out, cpuDir{path: dir})
		} else if _, err := os.Stat(filepath.Join(dir, "cpu.shares")); err == nil {
			out = append(out, cpuDir{path: dir, v1: true})
		}
	}
	return out
}
