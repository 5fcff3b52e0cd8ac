package main

import (
	"os"

	"github.com/berth-dev/berth/internal/vm/drivers"
	"github.com/berth-dev/berth/internal/vm/guest"
)

// driverOptions reads the vm drivers' settings from the environment (the
// "VM drivers" part of serveEnvHelp): the one place they are read.
func driverOptions() drivers.Options {
	return drivers.Options{
		AllowUnlimited: os.Getenv("BERTH_ALLOW_UNLIMITED") == "1",
		ContainerAgent: os.Getenv("BERTH_CONTAINER_AGENT"),
		OCIRuntime:     os.Getenv("BERTH_OCI_RUNTIME"),
		LibvirtSocket:  os.Getenv("BERTH_LIBVIRT_SOCKET"),
		KVMAccel:       os.Getenv("BERTH_KVM_ACCEL"),
		GuestKernel: guest.Kernel{
			Path:    os.Getenv("BERTH_GUEST_KERNEL"),
			Modules: os.Getenv("BERTH_GUEST_MODULES"),
			Initrd:  os.Getenv("BERTH_GUEST_INITRD"),
		},
		GuestAgent:        os.Getenv("BERTH_GUEST_AGENT"),
		FirecrackerKernel: os.Getenv("BERTH_FC_KERNEL"),
		FirecrackerBin:    os.Getenv("BERTH_FC_BIN"),
	}
}
