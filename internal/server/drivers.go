package server

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/berth-dev/berth/internal/hostnet"
	"github.com/berth-dev/berth/internal/image"
	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/container"
	"github.com/berth-dev/berth/internal/vm/firecracker"
	"github.com/berth-dev/berth/internal/vm/kvm"
	"github.com/berth-dev/berth/internal/vm/libvirt"
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
//
// The closers returned end what the drivers keep beside their replicas
// (spare sandboxes, connections to libvirtd); replicas themselves outlive
// them. On error the drivers built so far are closed already.
func buildDrivers(o Options, images *image.Store, net *hostnet.Network) (_ map[string]vm.Driver, closers []io.Closer, err error) {
	ds := map[string]vm.Driver{}
	defer func() {
		if err != nil {
			closeAll(closers, o.Log)
			closers = nil
		}
	}()
	p, err := process.New(process.Options{
		Dir: filepath.Join(o.DataDir, "replicas"), AgentCommand: o.AgentCommand, AgentEnv: o.AgentEnv, Log: o.Log,
		// An operator's explicit choice, for hosts without cgroups.
		AllowUnlimited: os.Getenv("BERTH_ALLOW_UNLIMITED") == "1",
		HideDirs:       []string{o.DataDir},
	})
	if err != nil {
		return nil, nil, fmt.Errorf("process driver: %w", err)
	}
	ds["process"] = p
	closers = append(closers, p)
	// Further drivers register here, each guarded by its availability.
	if net == nil {
		o.Log.Info("vm driver unavailable", "driver", "container", "why", "no guest network (run berth host setup)")
	} else if d, err := container.New(container.Options{
		Dir: filepath.Join(o.DataDir, "containers"), Images: images, Net: net, Log: o.Log,
		// Another berth to run as the containers' init; by default this
		// one (a dynamic one gets its libc bundled).
		Agent: os.Getenv("BERTH_CONTAINER_AGENT"), Runtime: os.Getenv("BERTH_OCI_RUNTIME"),
	}); err == nil {
		ds["container"] = d
		closers = append(closers, d)
	} else if !errors.Is(err, vm.ErrUnavailable) {
		return nil, closers, fmt.Errorf("container driver: %w", err)
	} else {
		o.Log.Info("vm driver unavailable", "driver", "container", "why", err)
	}
	// The microVM drivers boot the image store's disks with berth (and a
	// dynamic berth's libraries) written in as the guests' init
	// (agentDisks).
	disks := newAgentDisks(images, filepath.Join(o.DataDir, "guest-disks"))
	// The firecracker driver needs /dev/kvm, its binary and a guest kernel
	// of its own ($BERTH_FC_KERNEL); firecrackerOptions says which is
	// missing.
	if fc, err := firecrackerOptions(filepath.Join(o.DataDir, "firecracker"), disks, net, o.Log); err != nil {
		o.Log.Info("vm driver unavailable", "driver", "firecracker", "why", err)
	} else if d, err := firecracker.New(fc); err == nil {
		ds["firecracker"] = d
	} else if !errors.Is(err, vm.ErrUnavailable) {
		return nil, closers, fmt.Errorf("firecracker driver: %w", err)
	} else {
		o.Log.Info("vm driver unavailable", "driver", "firecracker", "why", err)
	}
	// The kvm driver (QEMU; KVM where a probe boot works, TCG emulation
	// elsewhere) boots a guest kernel with an initramfs made for it, found
	// by kvmOptions and built (once, cached) at its first Start.
	if ko, boot, err := kvmOptions(filepath.Join(o.DataDir, "kvm"), disks, net, o.Log); err != nil {
		if !errors.Is(err, vm.ErrUnavailable) {
			return nil, closers, fmt.Errorf("kvm driver: %w", err)
		}
		o.Log.Info("vm driver unavailable", "driver", "kvm", "why", err)
	} else if d, err := kvm.New(ko); err == nil {
		ds["kvm"] = d
		if !boot.ready {
			ds["kvm"] = newLazyKVM(d, boot)
		}
		o.Log.Info("vm driver kvm", "accel", accelLabel(d.Accel()), "kernel", boot.src, "boot_files_built", boot.ready)
	} else if !errors.Is(err, vm.ErrUnavailable) {
		return nil, closers, fmt.Errorf("kvm driver: %w", err)
	} else {
		o.Log.Info("vm driver unavailable", "driver", "kvm", "why", err)
	}
	// The libvirt driver runs the kvm driver's guests (the same boot files
	// and disks) as libvirtd's domains; it needs libvirtd answering on its
	// socket ($BERTH_LIBVIRT_SOCKET, default libvirt.DefaultSocket).
	if ko, boot, err := kvmOptions(filepath.Join(o.DataDir, "libvirt"), disks, net, o.Log); err != nil {
		if !errors.Is(err, vm.ErrUnavailable) {
			return nil, closers, fmt.Errorf("libvirt driver: %w", err)
		}
		o.Log.Info("vm driver unavailable", "driver", "libvirt", "why", err)
	} else if d, err := libvirt.New(libvirt.Options{Options: ko, Socket: os.Getenv("BERTH_LIBVIRT_SOCKET")}); err == nil {
		ds["libvirt"] = d
		closers = append(closers, d)
		if !boot.ready {
			// The hypervisor lives in d.Driver: the lazy wrapper keeps it.
			ds["libvirt"] = newLazyKVM(d.Driver, boot)
		}
		o.Log.Info("vm driver libvirt", "accel", accelLabel(d.Accel()), "kernel", boot.src, "boot_files_built", boot.ready)
	} else if !errors.Is(err, vm.ErrUnavailable) {
		return nil, closers, fmt.Errorf("libvirt driver: %w", err)
	} else {
		o.Log.Info("vm driver unavailable", "driver", "libvirt", "why", err)
	}
	return ds, closers, nil
}

// accelLabel is a kvm driver's accelerator for the log: "" means its first
// Start probes it.
func accelLabel(a string) string {
	if a == "" {
		return "probed at the first start"
	}
	return a
}

// closeAll closes cs, logging failures.
func closeAll(cs []io.Closer, log interface{ Warn(string, ...any) }) {
	for _, c := range cs {
		if err := c.Close(); err != nil {
			log.Warn("closing a vm driver", "err", err)
		}
	}
}
