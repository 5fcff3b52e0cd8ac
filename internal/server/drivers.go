package server

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/berth-dev/berth/internal/hostnet"
	"github.com/berth-dev/berth/internal/image"
	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/container"
	"github.com/berth-dev/berth/internal/vm/firecracker"
	"github.com/berth-dev/berth/internal/vm/kvm"
	"github.com/berth-dev/berth/internal/vm/process"
)

// buildDrivers returns the vm drivers this host can run, by the name specs
// use in vm.driver. The process driver always works; the isolating drivers
// are added when their host requirements are met (a driver whose New
// answers an error wrapping vm.ErrUnavailable is left out and logged).
//
// images and net are the image store and the guest network of the
// isolating drivers; net is nil when the host has no guest bridge (`berth
// host setup` makes one), and then those drivers are left out.
func buildDrivers(o Options, images *image.Store, net *hostnet.Network) (map[string]vm.Driver, error) {
	ds := map[string]vm.Driver{}
	p, err := process.New(process.Options{
		Dir: filepath.Join(o.DataDir, "replicas"), AgentCommand: o.AgentCommand, AgentEnv: o.AgentEnv, Log: o.Log,
	})
	if err != nil {
		return nil, fmt.Errorf("process driver: %w", err)
	}
	ds["process"] = p
	// Further drivers register here, each guarded by its availability.
	if net == nil {
		o.Log.Info("vm driver unavailable", "driver", "container", "why", "no guest network (run berth host setup)")
	} else if d, err := container.New(container.Options{
		Dir: filepath.Join(o.DataDir, "containers"), Images: images, Net: net, Log: o.Log,
		// A statically linked berth to run as the containers' init when
		// this one is not (built with cgo).
		Agent: os.Getenv("BERTH_CONTAINER_AGENT"), Runtime: os.Getenv("BERTH_OCI_RUNTIME"),
	}); err == nil {
		ds["container"] = d
	} else if !errors.Is(err, vm.ErrUnavailable) {
		return nil, fmt.Errorf("container driver: %w", err)
	} else {
		o.Log.Info("vm driver unavailable", "driver", "container", "why", err)
	}
	// The microVM drivers boot the image store's disks with a static
	// berth written in as the guests' init (agentDisks).
	disks := newAgentDisks(images, filepath.Join(o.DataDir, "guest-disks"))
	// The firecracker driver needs /dev/kvm, its binary and a guest kernel
	// of its own ($BERTH_FC_KERNEL); firecrackerOptions says which is
	// missing.
	if fc, err := firecrackerOptions(filepath.Join(o.DataDir, "firecracker"), disks, net, o.Log); err != nil {
		o.Log.Info("vm driver unavailable", "driver", "firecracker", "why", err)
	} else if d, err := firecracker.New(fc); err == nil {
		ds["firecracker"] = d
	} else if !errors.Is(err, vm.ErrUnavailable) {
		return nil, fmt.Errorf("firecracker driver: %w", err)
	} else {
		o.Log.Info("vm driver unavailable", "driver", "firecracker", "why", err)
	}
	// The kvm driver (QEMU; KVM where /dev/kvm exists, TCG emulation
	// elsewhere) boots a guest kernel with an initramfs made for it, found
	// by kvmOptions and built (once, cached) at its first Start.
	if ko, boot, err := kvmOptions(filepath.Join(o.DataDir, "kvm"), disks, net, o.Log); err != nil {
		if !errors.Is(err, vm.ErrUnavailable) {
			return nil, fmt.Errorf("kvm driver: %w", err)
		}
		o.Log.Info("vm driver unavailable", "driver", "kvm", "why", err)
	} else if d, err := kvm.New(ko); err == nil {
		ds["kvm"] = d
		if !boot.ready {
			ds["kvm"] = newLazyKVM(d, boot)
		}
		o.Log.Info("vm driver kvm", "accel", d.Accel(), "kernel", boot.src, "boot_files_built", boot.ready)
	} else if !errors.Is(err, vm.ErrUnavailable) {
		return nil, fmt.Errorf("kvm driver: %w", err)
	} else {
		o.Log.Info("vm driver unavailable", "driver", "kvm", "why", err)
	}
	return ds, nil
}
