// Package drivers opens the vm drivers a host can run. Each driver has a
// factory here, in a file of its own beside the others (process.go,
// container.go, firecracker.go, kvm.go, libvirt.go): its name, a cheap
// check of what it needs of the host, and how to open it. The composition
// root (package server) opens them all through Open, and knows no driver
// by name.
//
// Decision: the factories are listed explicitly (factories, below), as
// Nomad's catalog does, not registered by init functions as Caddy's
// modules are: registration would need a blank import of every driver
// package somewhere, which is a list too, only a hidden one, and the
// order in which drivers are opened (and logged) would be the import
// order. Adding a driver is a file here and a line in factories.
//
// The package reads no environment: Options carries the operator's
// settings, which cmd/berth reads from the environment variables named in
// each field's comment.
package drivers

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"

	"github.com/berth-dev/berth/internal/hostnet"
	"github.com/berth-dev/berth/internal/image"
	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/guest"
)

// Options are the operator's settings for the drivers. The zero value is
// every driver's default.
type Options struct {
	// AllowUnlimited lets a root berth start process replicas where no
	// cgroup can limit their pids, memory and CPU
	// (BERTH_ALLOW_UNLIMITED=1): an operator's explicit choice, for hosts
	// without cgroups.
	AllowUnlimited bool
	// ContainerAgent is another berth to run as the containers' init
	// (BERTH_CONTAINER_AGENT); default this one (a dynamic one gets its
	// libc bundled). It is the microVM guests' agent too unless
	// GuestAgent is set.
	ContainerAgent string
	// OCIRuntime is the container driver's OCI runtime
	// (BERTH_OCI_RUNTIME); default the driver's.
	OCIRuntime string
	// LibvirtSocket is libvirtd's socket (BERTH_LIBVIRT_SOCKET); default
	// libvirt.DefaultSocket.
	LibvirtSocket string
	// KVMAccel is the kvm driver's accelerator (BERTH_KVM_ACCEL): kvm,
	// tcg, or empty: kvm where a probe boot under KVM works, else tcg
	// (kvm.ProbeAccel).
	KVMAccel string
	// GuestKernel is the kvm and libvirt drivers' guest kernel, its module
	// tree and initramfs (BERTH_GUEST_KERNEL, BERTH_GUEST_MODULES,
	// BERTH_GUEST_INITRD).
	GuestKernel guest.Kernel
	// GuestAgent is the berth put into every microVM guest as its init
	// (BERTH_GUEST_AGENT). Default: ContainerAgent, then the running
	// berth. A dynamically linked one gets its interpreter and libraries
	// beside it.
	GuestAgent string
	// FirecrackerKernel is the firecracker driver's guest kernel
	// (BERTH_FC_KERNEL): a vmlinux with virtio-mmio, ext4 and IP_PNP
	// built in, since it boots without an initramfs (Debian's modular
	// kernel will not do). FirecrackerBin is its firecracker binary
	// (BERTH_FC_BIN); default firecracker in PATH.
	FirecrackerKernel, FirecrackerBin string
}

// Config is what Open opens the drivers with.
type Config struct {
	Options
	// DataDir is berth's data directory, absolute; each driver keeps its
	// state in a directory of its own below it.
	DataDir string
	// AgentCommand and AgentEnv override how the process driver starts the
	// in-sandbox agent (default: this executable's "agent" mode).
	AgentCommand, AgentEnv []string
	// Images is the image store of the isolating drivers.
	Images *image.Store
	// Net is the guest network of the isolating drivers; nil when the host
	// has none (`berth host setup` makes one), and then they are left out.
	Net *hostnet.Network
	Log *slog.Logger
}

// stateDirs names each driver's directory of replica state below the
// data directory: <data>/<dir>/<replica id>/ (package replicadir).
var stateDirs = map[string]string{
	"process":     "replicas",
	"container":   "containers",
	"kvm":         "kvm",
	"libvirt":     "libvirt",
	"firecracker": "firecracker",
}

// StateDirs returns, by driver name, the directory under dataDir in which
// each driver keeps one directory per replica: what the disk census
// (package disks) walks, whether or not the driver can run here.
func StateDirs(dataDir string) map[string]string {
	out := make(map[string]string, len(stateDirs))
	for name, dir := range stateDirs {
		out[name] = filepath.Join(dataDir, dir)
	}
	return out
}

// Env is what a factory opens its driver with: the Config, and what the
// drivers share.
type Env struct {
	Config
	disks func() *guest.Disks
}

// Disks are the microVM drivers' root disks with the agent written in
// (package guest), made at the first call and shared by the drivers.
func (e *Env) Disks() *guest.Disks { return e.disks() }

// guestAgent is the agent the microVM guests run: GuestAgent, else
// ContainerAgent, else "" (the running berth).
func (o Options) guestAgent() string {
	if o.GuestAgent != "" {
		return o.GuestAgent
	}
	return o.ContainerAgent
}

// A Factory opens one driver.
type Factory struct {
	// Name is the driver's name, as specs give it in vm.driver.
	Name string
	// Check says why the driver cannot run on this host (an error
	// wrapping vm.ErrUnavailable, naming what is missing and how to get
	// it), or nil. It is cheap: it comes before anything Open prepares.
	// Nil means the driver can always be opened.
	Check func(*Env) error
	// Open opens the driver, and returns what to close when berth stops
	// (what the driver keeps beside its replicas: spares, connections),
	// or nil. An error wrapping vm.ErrUnavailable leaves the driver out;
	// another error fails berth's start.
	Open func(*Env) (vm.Driver, io.Closer, error)
}

// factories are the drivers, in the order they are opened. The process
// driver comes first and always opens; the isolating drivers are added
// when their host requirements are met.
var factories = []Factory{processFactory, containerFactory, firecrackerFactory, kvmFactory, libvirtFactory}

// Open opens the drivers this host can run, by name. A driver whose Check
// or Open answers an error wrapping vm.ErrUnavailable is left out and
// logged; any other error closes what was opened and is returned.
//
// The closers returned end what the drivers keep beside their replicas;
// replicas themselves outlive them.
func Open(c Config) (_ map[string]vm.Driver, closers []io.Closer, err error) {
	return open(c, factories)
}

func open(c Config, fs []Factory) (_ map[string]vm.Driver, closers []io.Closer, err error) {
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	e := &Env{Config: c}
	e.disks = sync.OnceValue(func() *guest.Disks {
		// The microVM drivers boot the image store's disks with berth
		// (and a dynamic berth's libraries) written in as the guests'
		// init.
		return guest.NewDisks(c.Images, filepath.Join(c.DataDir, "guest-disks"), c.guestAgent())
	})
	ds := map[string]vm.Driver{}
	defer func() {
		if err != nil {
			CloseAll(closers, c.Log)
			closers = nil
		}
	}()
	for _, f := range fs {
		var err error
		if f.Check != nil {
			err = f.Check(e)
		}
		var d vm.Driver
		var cl io.Closer
		if err == nil {
			d, cl, err = f.Open(e)
		}
		switch {
		case err == nil:
			ds[f.Name] = d
			if cl != nil {
				closers = append(closers, cl)
			}
		case errors.Is(err, vm.ErrUnavailable):
			c.Log.Info("vm driver unavailable", "driver", f.Name, "why", err)
		default:
			return nil, closers, fmt.Errorf("%s driver: %w", f.Name, err)
		}
	}
	return ds, closers, nil
}

// closers close in turn, returning the first error.
type closers []io.Closer

func (cs closers) Close() error {
	var first error
	for _, c := range cs {
		if err := c.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// CloseAll closes cs, logging failures.
func CloseAll(cs []io.Closer, log *slog.Logger) {
	for _, c := range cs {
		if err := c.Close(); err != nil {
			log.Warn("closing a vm driver", "err", err)
		}
	}
}
