//go:build unix

package build

import (
	"errors"
	"fmt"
	"os/exec"
	"sort"
	"strings"
	"syscall"

	"github.com/berth-dev/berth/internal/mountinfo"
)

// inGroup starts cmd in a process group of its own, and has its context's
// end signal the whole group (SIGTERM; exec sends SIGKILL to the leader
// stopGrace later).
func inGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	}
}

// killGroup kills what is left of cmd's process group once it has exited:
// children it started and did not wait for.
func killGroup(cmd *exec.Cmd) {
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}

// unmountUnder detaches every mount at or below dir, deepest first, as
// /proc/self/mountinfo lists them.
func unmountUnder(dir string) error {
	ms, err := mountinfo.Read()
	if err != nil {
		return err
	}
	var under []string
	for _, m := range ms {
		if m.Point == dir || strings.HasPrefix(m.Point, dir+"/") {
			under = append(under, m.Point)
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(under)))
	for _, mp := range under {
		if err := syscall.Unmount(mp, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
			return fmt.Errorf("unmount %s: %w", mp, err)
		}
	}
	return nil
}
