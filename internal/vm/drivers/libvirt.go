package drivers

import (
	"io"

	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/libvirt"
)

// libvirtFactory opens the libvirt driver, which runs the kvm driver's
// guests (the same boot files and disks) as libvirtd's domains; it needs
// libvirtd answering on its socket (Options.LibvirtSocket).
var libvirtFactory = Factory{
	Name:  "libvirt",
	Check: kvmCheck,
	Open: func(e *Env) (vm.Driver, io.Closer, error) {
		ko, boot, err := kvmOptions(e, StateDirs(e.DataDir)["libvirt"])
		if err != nil {
			return nil, nil, err
		}
		d, err := libvirt.New(libvirt.Options{Options: ko, Socket: e.LibvirtSocket})
		if err != nil {
			return nil, nil, err
		}
		e.Log.Info("vm driver libvirt", "accel", accelLabel(d.Accel()), "kernel", boot.Source(), "boot_files_built", boot.Ready())
		if !boot.Ready() {
			// The hypervisor lives in d.Driver: the lazy wrapper keeps it.
			// A build under way ends before the connection closes.
			return newLazyKVM(d.Driver, boot), closers{boot, d}, nil
		}
		return d, d, nil
	},
}
