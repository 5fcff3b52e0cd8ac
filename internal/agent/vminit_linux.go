package agent

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// vmMounts are the file systems a guest init mounts before anything runs.
var vmMounts = []struct{ source, target, fstype, data string }{
	{"proc", "/proc", "proc", ""},
	{"sysfs", "/sys", "sysfs", ""},
	{"devtmpfs", "/dev", "devtmpfs", "mode=0755"},
	{"devpts", "/dev/pts", "devpts", "mode=0620,ptmxmode=0666"},
	{"tmpfs", "/dev/shm", "tmpfs", "mode=1777"},
	{"tmpfs", "/run", "tmpfs", "mode=0755"},
	{"tmpfs", "/tmp", "tmpfs", "mode=1777"},
}

// vmInit does what init does first in a VM guest: mount /proc, /sys, /dev
// and the tmpfs directories (one the kernel mounted already, like /dev with
// CONFIG_DEVTMPFS_MOUNT, is kept), and ask the kernel to turn Ctrl-Alt-Del
// into SIGINT for init instead of an immediate reboot, so the VMM's
// SendCtrlAltDel is a polite stop that the agent forwards to COMMAND.
func vmInit() error {
	for _, m := range vmMounts {
		if err := os.MkdirAll(m.target, 0o755); err != nil {
			return err
		}
		err := unix.Mount(m.source, m.target, m.fstype, unix.MS_NOSUID, m.data)
		if err != nil && !errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("mounting %s on %s: %w", m.fstype, m.target, err)
		}
	}
	if err := unix.Reboot(unix.LINUX_REBOOT_CMD_CAD_OFF); err != nil {
		return fmt.Errorf("disabling Ctrl-Alt-Del reboots: %w", err)
	}
	return nil
}

// vmPowerOff ends the guest once the agent is done: it flushes the file
// systems and reboots, which makes Firecracker (started with reboot=k)
// exit; it has no ACPI power-off. It returns only if the kernel refused.
func vmPowerOff() {
	unix.Sync()
	_ = unix.Reboot(unix.LINUX_REBOOT_CMD_RESTART)
}

func setHostname(name string) error { return unix.Sethostname([]byte(name)) }
