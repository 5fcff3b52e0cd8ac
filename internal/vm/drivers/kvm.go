package drivers

import (
	"io"
	"os/exec"
	"path/filepath"

	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/guest"
	"github.com/berth-dev/berth/internal/vm/kvm"
)

// kvmFactory opens the kvm driver (QEMU; KVM where a probe boot works,
// TCG emulation elsewhere). It boots a guest kernel with an initramfs
// made for it, found by kvmOptions and built (once, cached) at its first
// Start (lazyKVM).
var kvmFactory = Factory{
	Name:  "kvm",
	Check: kvmCheck,
	Open: func(e *Env) (vm.Driver, io.Closer, error) {
		o, boot, err := kvmOptions(e, StateDirs(e.DataDir)["kvm"])
		if err != nil {
			return nil, nil, err
		}
		d, err := kvm.New(o)
		if err != nil {
			return nil, nil, err
		}
		e.Log.Info("vm driver kvm", "accel", accelLabel(d.Accel()), "kernel", boot.Source(), "boot_files_built", boot.Ready())
		if !boot.Ready() {
			return newLazyKVM(d, boot), boot, nil
		}
		return d, nil, nil
	},
}

// kvmCheck checks what the kvm and libvirt drivers need of the host
// before the guest's files: QEMU and the guest network.
func kvmCheck(e *Env) error {
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		return guest.Unavailablef("no QEMU (qemu-system-x86_64 not in PATH; Debian: apt-get install qemu-system-x86)")
	}
	return needNet(e)
}

// kvmOptions returns the kvm driver's options for a driver keeping its
// state in dir, and the guest's boot files, or an error wrapping
// vm.ErrUnavailable that says what is missing and how to get it.
func kvmOptions(e *Env, dir string) (kvm.Options, *guest.Boot, error) {
	o := kvm.Options{Dir: dir, Accel: e.KVMAccel, Log: e.Log}
	disks := e.Disks()
	if err := disks.Err(); err != nil {
		return o, nil, err
	}
	o.Images, o.Net = disks, e.Net
	o.GuestInit, o.GuestInitArgs = disks.GuestInit()
	// Unless told kvm, the guests may run under TCG (the driver's first
	// Start probes KVM), which boots the unpacked vmlinux faster.
	b, err := guest.NewBoot(filepath.Join(dir, "guest"), e.GuestKernel, o.Accel != "kvm", e.Log)
	if err != nil {
		return o, nil, err
	}
	o.Kernel, o.Initrd = b.Source(), b.Initrd()
	if b.TCGKernel() {
		o.TCGKernel = b.Kernel()
	}
	// Shared by the kvm and libvirt drivers (and berth host check): the
	// probe's answer is the host's and the kernel's.
	o.ProbeCache = kvm.ProbeCacheDir(filepath.Dir(dir))
	return o, b, nil
}

// accelLabel is a kvm driver's accelerator for the log: "" means its first
// Start probes it.
func accelLabel(a string) string {
	if a == "" {
		return "probed at the first start"
	}
	return a
}
