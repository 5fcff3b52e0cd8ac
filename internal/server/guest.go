package server

import (
	"bufio"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/berth-dev/berth/internal/agentbin"
	"github.com/berth-dev/berth/internal/hostnet"
	"github.com/berth-dev/berth/internal/image"
	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/firecracker"
	"github.com/berth-dev/berth/internal/vm/kvm"
)

// The environment that configures the microVM drivers' guests. They are
// read from the environment only, as the container driver's settings are:
// they describe the host, not the gateway.
const (
	// envGuestKernel is the kvm driver's guest kernel (a bzImage or a
	// vmlinux). Default: the newest /boot/vmlinuz-<release> that has its
	// module tree, as Debian's linux-image-amd64 installs it.
	envGuestKernel = "BERTH_GUEST_KERNEL"
	// envGuestModules is that kernel's module tree, which the initramfs is
	// built from. Default: /lib/modules/<release>, the release taken from
	// the kernel's file name (vmlinuz-<release> or vmlinux-<release>).
	envGuestModules = "BERTH_GUEST_MODULES"
	// envGuestInitrd is a ready initramfs for the kvm driver (see
	// kvm.WriteInitrd), which berth then does not build.
	envGuestInitrd = "BERTH_GUEST_INITRD"
	// envGuestAgent is the berth put into every microVM guest as its init
	// (/berth-agent). Default: $BERTH_CONTAINER_AGENT, then the running
	// berth. A dynamically linked one gets its interpreter and libraries
	// beside it (guestLibDir).
	envGuestAgent = "BERTH_GUEST_AGENT"
	// envKVMAccel is the kvm driver's accelerator: kvm, tcg or empty
	// (kvm where a probe boot under KVM works, else tcg: kvm.ProbeAccel).
	envKVMAccel = "BERTH_KVM_ACCEL"
	// envFCKernel and envFCBin are the firecracker driver's guest kernel
	// (a vmlinux with virtio-mmio, ext4 and IP_PNP built in: it boots
	// without an initramfs, so Debian's modular kernel will not do) and
	// its firecracker binary (default: firecracker in PATH). The names
	// are the ones its tests use.
	envFCKernel = "BERTH_FC_KERNEL"
	envFCBin    = "BERTH_FC_BIN"
)

// guestInit is where the agent goes in every guest disk: the drivers'
// default GuestInit.
const guestInit = "/berth-agent"

// guestLibDir is where a dynamically linked agent's interpreter and
// libraries (package agentbin) go in every guest disk. The guest runs the
// agent through that interpreter, so it never uses the image's libc.
const guestLibDir = "/berth-lib"

// unavailablef is an error wrapping vm.ErrUnavailable, so that buildDrivers
// logs the driver as unavailable and serves on without it.
func unavailablef(format string, args ...any) error {
	return fmt.Errorf(format+": %w", append(args, vm.ErrUnavailable)...)
}

// kvmOptions checks what the kvm driver needs of this host and returns
// its options and the guest's boot files, or an error wrapping
// vm.ErrUnavailable that says what is missing and how to get it. The
// cheap checks come first, so that a host without QEMU or a guest network
// spends nothing on the guest kernel.
func kvmOptions(dir string, disks *agentDisks, net *hostnet.Network, log *slog.Logger) (kvm.Options, *guestBoot, error) {
	o := kvm.Options{Dir: dir, Accel: os.Getenv(envKVMAccel), Log: log}
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		return o, nil, unavailablef("no QEMU (qemu-system-x86_64 not in PATH; Debian: apt-get install qemu-system-x86)")
	}
	if net == nil {
		return o, nil, unavailablef("no guest network (run berth host setup)")
	}
	if disks.err != nil {
		return o, nil, disks.err
	}
	o.Images, o.Net = disks, net
	disks.initOptions(&o)
	// Unless told kvm, the guests may run under TCG (the driver's first
	// Start probes KVM), which boots the unpacked vmlinux faster.
	b, err := newGuestBoot(filepath.Join(dir, "guest"), o.Accel != "kvm", log)
	if err != nil {
		return o, nil, err
	}
	o.Kernel, o.Initrd = b.src, b.initrd
	if b.tcg {
		o.TCGKernel = b.kernel
	}
	// Shared by the kvm and libvirt drivers (and berth host check): the
	// probe's answer is the host's and the kernel's.
	o.ProbeCache = kvm.ProbeCacheDir(filepath.Dir(dir))
	return o, b, nil
}

// guestBoot is the kvm driver's guest kernel and initramfs. The driver is
// given fixed paths in its cache directory (Kernel, Initrd), which the
// first Start fills (build) unless the files there were built from the
// same inputs already: the initramfs from the kernel's module tree and
// busybox (kvm.WriteInitrd), and unless the accelerator is set to kvm the
// vmlinux unpacked from the bzImage (kvm.ExtractVmlinux), which boots
// seconds faster under TCG (the driver's TCGKernel; KVM boots the bzImage,
// and the driver's probe decides which runs). A stamp file
// records the inputs of what is there, so restarts build nothing.
//
// Decision: built at the first kvm Start, not when berth starts. It takes
// a second or two of CPU (the vmlinux is 60 MB of xz output), which berth
// serve's start-up, and every other driver, should not wait for, and under
// TCG a guest's boot takes several seconds anyway. What is missing (a
// kernel, its modules, busybox) is still found and reported at start-up.
type guestBoot struct {
	kernel, initrd string // what the driver boots (kernel: under TCG)
	log            *slog.Logger

	src     string // the configured kernel
	modules string // its module tree; "" when the initramfs is given
	tcg     bool   // unpack the vmlinux (kernel is then a file in dir)
	stamp   string // the file holding key once built
	key     string // the inputs

	mu       sync.Mutex
	ready    bool
	building chan struct{} // closed when the build under way ends
	err      error         // of the last build
}

// Files in the guest cache directory.
const (
	bootKernel = "vmlinux"
	bootInitrd = "initrd.img"
	bootStamp  = "inputs"
)

// newGuestBoot finds the guest kernel and its module tree and sees whether
// dir holds boot files built from them. Missing files are created empty,
// since the driver checks the paths exist; the first Start fills them.
func newGuestBoot(dir string, tcg bool, log *slog.Logger) (*guestBoot, error) {
	b := &guestBoot{log: log}
	kernel, modules := os.Getenv(envGuestKernel), os.Getenv(envGuestModules)
	if kernel == "" {
		if kernel, modules = kvm.FindKernel(modules); kernel == "" {
			return nil, unavailablef("no guest kernel: install Debian's linux-image-amd64 (a /boot/vmlinuz-<release> with /lib/modules/<release>) or set %s", envGuestKernel)
		}
	}
	kernelKey, err := fileKey(kernel)
	if err != nil {
		return nil, unavailablef("guest kernel: %v", err)
	}
	b.src, b.kernel, b.initrd = kernel, kernel, os.Getenv(envGuestInitrd)
	keys := []string{kvm.InitrdVersion(), kernelKey}
	if b.initrd == "" {
		if modules == "" {
			r := kvm.KernelRelease(kernel)
			if r == "" {
				return nil, unavailablef("cannot tell the module tree of the guest kernel %s from its name: set %s (or %s)", kernel, envGuestModules, envGuestInitrd)
			}
			modules = filepath.Join("/lib/modules", r)
		}
		dep, err := fileKey(filepath.Join(modules, "modules.dep"))
		if err != nil {
			return nil, unavailablef("the guest kernel's module tree: %v (set %s or %s)", err, envGuestModules, envGuestInitrd)
		}
		bb, err := exec.LookPath("busybox")
		if err != nil {
			return nil, unavailablef("no busybox for the guest initramfs (Debian: apt-get install busybox-static)")
		}
		if err := checkStatic(bb); err != nil {
			return nil, unavailablef("busybox for the guest initramfs: %v (Debian: apt-get install busybox-static)", err)
		}
		bbKey, err := fileKey(bb)
		if err != nil {
			return nil, unavailablef("busybox: %v", err)
		}
		b.modules, b.initrd = modules, filepath.Join(dir, bootInitrd)
		keys = append(keys, dep, bbKey)
	}
	if tcg && isBzImage(kernel) {
		b.tcg, b.kernel = true, filepath.Join(dir, bootKernel)
		keys = append(keys, "vmlinux")
	}
	if b.modules == "" && !b.tcg {
		b.ready = true // nothing to build
		return b, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, unavailablef("guest boot files: %v", err)
	}
	h := sha256.Sum256([]byte(strings.Join(keys, "\x00")))
	b.key, b.stamp = hex.EncodeToString(h[:]), filepath.Join(dir, bootStamp)
	built := true
	for _, p := range []string{b.kernel, b.initrd} {
		if filepath.Dir(p) != dir {
			continue
		}
		if fi, err := os.Stat(p); err == nil && fi.Size() > 0 {
			continue
		}
		built = false
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE, 0o644)
		if err != nil {
			return nil, unavailablef("guest boot files: %v", err)
		}
		f.Close()
	}
	if got, err := os.ReadFile(b.stamp); built && err == nil && string(got) == b.key {
		b.ready = true
	}
	return b, nil
}

// wait builds the boot files unless they are built, or waits for the
// build another Start began, until ctx ends. A failed build is returned to
// the Starts that waited for it, and the next Start tries again.
func (b *guestBoot) wait(ctx context.Context) error {
	b.mu.Lock()
	if b.ready {
		b.mu.Unlock()
		return nil
	}
	if b.building == nil {
		b.building = make(chan struct{})
		go b.build(b.building)
	}
	done := b.building
	b.mu.Unlock()
	select {
	case <-done:
	case <-ctx.Done():
		return ctx.Err()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

// isReady reports whether the boot files are built.
func (b *guestBoot) isReady() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ready
}

// build makes the boot files and closes done. It runs on its own, not in
// a Start's context: a Start given up on should not waste the work.
func (b *guestBoot) build(done chan struct{}) {
	t0 := time.Now()
	err := b.write()
	b.mu.Lock()
	b.ready, b.err, b.building = err == nil, err, nil
	b.mu.Unlock()
	close(done)
	if err != nil {
		b.log.Warn("kvm: building the guest boot files", "err", err)
		return
	}
	b.log.Info("kvm: guest boot files built", "kernel", b.kernel, "initrd", b.initrd, "took", time.Since(t0).Round(time.Millisecond))
}

// write writes the boot files, then the stamp that says they are whole.
func (b *guestBoot) write() error {
	os.Remove(b.stamp) // until all of it is rebuilt
	if b.modules != "" {
		bb, err := exec.LookPath("busybox")
		if err != nil {
			return fmt.Errorf("busybox for the guest initramfs: %w", err)
		}
		err = writeAtomic(b.initrd, func(w io.Writer) error {
			return kvm.WriteInitrd(w, kvm.InitrdOptions{ModulesDir: b.modules, Busybox: bb})
		})
		if err != nil {
			return fmt.Errorf("building the guest initramfs: %w", err)
		}
	}
	if b.tcg {
		tmp := b.kernel + ".tmp"
		if err := kvm.ExtractVmlinux(b.src, tmp); err != nil {
			// The bzImage boots too, only slower.
			b.log.Warn("kvm: booting the compressed guest kernel", "kernel", b.src, "why", err)
			if err := image.CloneFile(tmp, b.src); err != nil {
				os.Remove(tmp)
				return fmt.Errorf("copying the guest kernel: %w", err)
			}
		}
		if err := os.Rename(tmp, b.kernel); err != nil {
			os.Remove(tmp)
			return fmt.Errorf("guest kernel: %w", err)
		}
	}
	if err := os.WriteFile(b.stamp, []byte(b.key), 0o644); err != nil {
		return fmt.Errorf("guest boot files: %w", err)
	}
	return nil
}

// lazyKVM is the kvm driver while its boot files are not built: Start
// builds them first (guestBoot). Meanwhile the replica is reported as
// starting (Inspect), as the driver itself reports a replica it is
// starting, so that the fleet does not take it for gone; a Stop meanwhile
// cancels its start. Everything else is the driver's own (embedded, so
// that its optional abilities stay visible to the fleet).
type lazyKVM struct {
	*kvm.Driver
	boot *guestBoot

	mu      sync.Mutex
	waiting map[string]context.CancelFunc // Starts waiting for the build
}

func newLazyKVM(d *kvm.Driver, b *guestBoot) *lazyKVM {
	return &lazyKVM{Driver: d, boot: b, waiting: make(map[string]context.CancelFunc)}
}

// Start builds the guest's boot files if need be, then starts the replica.
func (l *lazyKVM) Start(ctx context.Context, spec vm.Spec) (vm.Instance, error) {
	if !l.boot.isReady() {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		l.mu.Lock()
		if _, dup := l.waiting[spec.Name]; dup {
			l.mu.Unlock()
			return vm.Instance{}, fmt.Errorf("kvm: start %s: the replica already exists", spec.Name)
		}
		l.waiting[spec.Name] = cancel
		l.mu.Unlock()
		err := l.boot.wait(ctx)
		l.mu.Lock()
		delete(l.waiting, spec.Name)
		l.mu.Unlock()
		if err != nil {
			return vm.Instance{}, fmt.Errorf("kvm: start %s: waiting for the guest boot files: %w", spec.Name, err)
		}
	}
	return l.Driver.Start(ctx, spec)
}

// Inspect reports a replica whose Start waits for the boot files as
// starting; others are the driver's.
func (l *lazyKVM) Inspect(ctx context.Context, id string) (vm.Instance, error) {
	l.mu.Lock()
	_, waiting := l.waiting[id]
	l.mu.Unlock()
	if waiting {
		dep, _ := vm.Owner(id)
		return vm.Instance{ID: id, Deployment: dep, State: vm.StateStarting}, nil
	}
	return l.Driver.Inspect(ctx, id)
}

// Stop cancels the Start of a replica that waits for the boot files, and
// stops the driver's replica otherwise.
func (l *lazyKVM) Stop(ctx context.Context, id string, grace time.Duration) error {
	l.mu.Lock()
	cancel, waiting := l.waiting[id]
	l.mu.Unlock()
	if waiting {
		cancel()
		return nil
	}
	return l.Driver.Stop(ctx, id, grace)
}

// firecrackerOptions returns the firecracker driver's options, or an error
// wrapping vm.ErrUnavailable saying what is missing, in the order a host
// would get them: KVM, the binary, a guest kernel, the guest network, an
// agent, which must be static: Firecracker boots without an initramfs,
// and its driver cannot run a dynamic berth through its interpreter yet.
func firecrackerOptions(dir string, disks *agentDisks, net *hostnet.Network, log *slog.Logger) (firecracker.Options, error) {
	o := firecracker.Options{Dir: dir, FirecrackerBin: os.Getenv(envFCBin), Kernel: os.Getenv(envFCKernel), Log: log}
	if _, err := os.Stat("/dev/kvm"); err != nil {
		return o, unavailablef("no KVM on this host (%v); Firecracker cannot emulate, the kvm driver can (TCG)", err)
	}
	bin := o.FirecrackerBin
	if bin == "" {
		bin = "firecracker"
	}
	if _, err := exec.LookPath(bin); err != nil {
		return o, unavailablef("no firecracker binary (%v): put a release's firecracker in PATH or set %s", err, envFCBin)
	}
	if o.Kernel == "" {
		return o, unavailablef("no guest kernel: set %s to a vmlinux with virtio-mmio, ext4 and IP_PNP built in (Firecracker boots it without an initramfs)", envFCKernel)
	}
	if net == nil {
		return o, unavailablef("no guest network (run berth host setup)")
	}
	if disks.err != nil {
		return o, disks.err
	}
	if !disks.bin.Static() {
		return o, unavailablef("the guest agent %s is dynamically linked, which the firecracker driver cannot start yet: set %s to a static berth (CGO_ENABLED=0 go build ./cmd/berth)", disks.agent, envGuestAgent)
	}
	o.Images, o.Net = disks, net
	return o, nil
}

// isBzImage reports whether the file is a bzImage (the "HdrS" magic of the
// x86 boot protocol at offset 0x202), not an ELF vmlinux.
func isBzImage(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var b [4]byte
	_, err = f.ReadAt(b[:], 0x202)
	return err == nil && string(b[:]) == "HdrS"
}

// fileKey identifies a file's content cheaply, by path, size and
// modification time: a package upgrade rewrites the files it replaces.
func fileKey(path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%s:%d:%d", path, fi.Size(), fi.ModTime().UnixNano()), nil
}

// writeAtomic writes path through a temporary file renamed into place, so
// that a crash never leaves a half-written file under the final name.
func writeAtomic(path string, write func(io.Writer) error) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	err = write(bw)
	if err == nil {
		err = bw.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// guestAgent returns the berth that microVM guests run as their init:
// $BERTH_GUEST_AGENT, else $BERTH_CONTAINER_AGENT, else the running
// executable. It answers an error wrapping vm.ErrUnavailable when that is
// not an x86-64 executable. A dynamically linked one (built with cgo or
// the race detector) will do: agentDisks bundles its libraries.
func guestAgent() (string, error) {
	path := os.Getenv(envGuestAgent)
	if path == "" {
		path = os.Getenv("BERTH_CONTAINER_AGENT")
	}
	if path == "" {
		exe, err := os.Executable()
		if err != nil {
			return "", unavailablef("finding the guest agent: %v (set %s)", err, envGuestAgent)
		}
		path = exe
	}
	if err := checkX86(path); err != nil {
		return "", unavailablef("guest agent: %v: set %s to a berth built for linux/amd64", err, envGuestAgent)
	}
	return path, nil
}

// checkX86 says why path is not an x86-64 executable, or nil.
func checkX86(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if f.Machine != elf.EM_X86_64 {
		return fmt.Errorf("%s is not an x86-64 executable", path)
	}
	return nil
}

// checkStatic says why path is not a statically linked x86-64 executable,
// which a guest can run whatever its image holds (the initramfs's
// busybox), or nil.
func checkStatic(path string) error {
	if err := checkX86(path); err != nil {
		return err
	}
	static, err := agentbin.IsStatic(path)
	if err != nil {
		return err
	}
	if !static {
		return fmt.Errorf("%s is dynamically linked (built with cgo or the race detector)", path)
	}
	return nil
}

// agentDisks gives the microVM drivers their root disks: the image store's
// ext4 disk of an image with the agent written into it as /berth-agent,
// and a dynamically linked agent's interpreter and libraries (resolved on
// the host, package agentbin) into /berth-lib, made once per image disk
// and agent (with its libraries) and kept in dir. An image then needs no
// berth of its own, nor a libc matching it, and every guest runs the agent
// of the berth that starts it, whatever (if any) /berth-agent the image
// has. A static agent costs nothing more: no /berth-lib is written.
//
// Decision: the agent goes into a copy of the disk (debugfs, from the same
// e2fsprogs as the image store's mkfs.ext4; nothing is mounted), not into
// the initramfs: it then costs nothing at boot (a 20-30 MB agent in the
// initramfs would be unpacked, and under TCG slowly, by every guest), it
// serves the firecracker driver too, which boots without an initramfs, and
// the drivers copy the disk per replica anyway.
type agentDisks struct {
	images *image.Store
	agent  string
	bin    agentbin.Bin // the agent and, if it is dynamic, its bundle
	dir    string
	err    error // why there is no agent (wraps vm.ErrUnavailable)

	digest func() (string, error) // the agent's (and its bundle's) SHA-256, read once
	mu     sync.Mutex             // serializes builds
}

// newAgentDisks returns the disk maker over images keeping its disks in
// dir; its err says why guests cannot get an agent, if they cannot.
func newAgentDisks(images *image.Store, dir string) *agentDisks {
	a := &agentDisks{images: images, dir: dir}
	a.agent, a.err = guestAgent()
	if a.err == nil && images == nil {
		a.err = unavailablef("no image store")
	}
	if a.err == nil {
		// Copied now, so that a host upgrade of libc while berth runs
		// does not change what its guests get.
		lib := filepath.Join(dir, agentLibDir)
		os.RemoveAll(lib) // a former agent's libraries
		var err error
		if a.bin, err = agentbin.Bundle(a.agent, lib); err != nil {
			a.err = unavailablef("guest agent: %v", err)
		}
	}
	a.digest = sync.OnceValues(a.sum)
	return a
}

// initOptions sets the kvm driver's guest init to start the agent: the
// driver's default (/berth-agent itself) for a static agent, and for a
// dynamic one the interpreter bundled into the disk, which runs the agent
// with the bundle's libraries.
func (a *agentDisks) initOptions(o *kvm.Options) {
	if a.bin.Static() {
		return
	}
	argv := a.bin.Command(guestInit, guestLibDir)
	o.GuestInit, o.GuestInitArgs = argv[0], argv[1:]
}

// agentLibDir is the directory under agentDisks.dir holding a dynamic
// agent's bundle.
const agentLibDir = "agent-lib"

// sum is the SHA-256 of the agent, and with a dynamic agent of its
// bundle's file names and contents too: a changed libc makes new disks.
func (a *agentDisks) sum() (string, error) {
	s, err := fileSum(a.agent)
	if err != nil || a.bin.Static() {
		return s, err
	}
	files, err := bundleFiles(a.bin)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	io.WriteString(h, s)
	for _, f := range files {
		fs, err := fileSum(filepath.Join(a.bin.LibDir, f))
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "\x00%s\x00%s", f, fs)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// bundleFiles lists the regular files of a dynamic agent's bundle, by
// name, sorted.
func bundleFiles(b agentbin.Bin) ([]string, error) {
	ents, err := os.ReadDir(b.LibDir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range ents {
		if e.Type().IsRegular() && !strings.HasPrefix(e.Name(), ".") {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

// Ext4 returns the image's disk with the agent in it (see agentDisks), as
// the kvm and firecracker drivers' Images. Callers copy it per replica.
func (a *agentDisks) Ext4(name string, sizeGB int) (string, error) {
	if a.err != nil {
		return "", a.err
	}
	src, err := a.images.Ext4(name, sizeGB)
	if err != nil {
		return "", err
	}
	sum, err := a.digest()
	if err != nil {
		return "", fmt.Errorf("reading the guest agent: %w", err)
	}
	// The image store's disk paths are content addressed (digest and
	// size), so the source path and the agent's digest name the result.
	h := sha256.Sum256([]byte(src + "\x00" + sum))
	name = "disk-" + hex.EncodeToString(h[:8])
	path := filepath.Join(a.dir, name+".ext4")
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	if err := os.MkdirAll(a.dir, 0o700); err != nil {
		return "", err
	}
	tmp := path + ".tmp"
	if err := image.CloneFile(tmp, src); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("copying the image disk: %w", err)
	}
	if err := writeAgent(tmp, a.bin); err != nil {
		os.Remove(tmp)
		return "", err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return "", err
	}
	// The source of each disk is recorded beside it, so that disks of
	// deleted images or of an older agent can be found and removed.
	os.WriteFile(filepath.Join(a.dir, name+".src"), []byte(src+"\n"+sum+"\n"), 0o600)
	a.prune(sum)
	return path, nil
}

// prune removes the disks made for an image disk that is gone or for
// another agent than sum, and leftovers of interrupted builds.
func (a *agentDisks) prune(sum string) {
	ents, _ := os.ReadDir(a.dir)
	for _, e := range ents {
		n := e.Name()
		if strings.HasSuffix(n, ".tmp") {
			os.Remove(filepath.Join(a.dir, n))
			continue
		}
		base, ok := strings.CutSuffix(n, ".src")
		if !ok {
			continue
		}
		b, _ := os.ReadFile(filepath.Join(a.dir, n))
		src, agent, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
		if _, err := os.Stat(src); err == nil && agent == sum {
			continue
		}
		os.Remove(filepath.Join(a.dir, base+".ext4"))
		os.Remove(filepath.Join(a.dir, n))
	}
}

// writeAgent writes the agent into the ext4 disk img as /berth-agent
// (root's, mode 0755), replacing what the image had there, and a dynamic
// agent's bundle into /berth-lib, with debugfs, and reads every file back
// to check that it arrived whole: debugfs reports failed requests (a full
// disk) on stderr, not in its exit status, and records the whole size
// even when it could not write every block.
func writeAgent(img string, bin agentbin.Bin) error {
	files := [][2]string{{bin.Path, guestInit}} // host path, guest path
	if !bin.Static() {
		names, err := bundleFiles(bin)
		if err != nil {
			return fmt.Errorf("guest agent's libraries: %w", err)
		}
		for _, n := range names {
			files = append(files, [2]string{filepath.Join(bin.LibDir, n), guestLibDir + "/" + n})
		}
	}
	debugfs, err := exec.LookPath("debugfs")
	if err != nil {
		return errors.New("no debugfs to put the agent into the guest disk (Debian: apt-get install e2fsprogs)")
	}
	var script []string
	if !bin.Static() {
		// mkdir fails harmlessly when the image has the directory.
		script = append(script, "mkdir "+guestLibDir, "set_inode_field "+guestLibDir+" mode 040755",
			"set_inode_field "+guestLibDir+" uid 0", "set_inode_field "+guestLibDir+" gid 0")
	}
	for _, f := range files {
		if strings.ContainsAny(f[0], "\"\n\\") {
			return fmt.Errorf("guest agent path %q: quotes, backslashes and newlines are not supported", f[0])
		}
		script = append(script,
			"rm "+f[1], // fails harmlessly when the image has none
			fmt.Sprintf("write %q %s", f[0], f[1]),
			"set_inode_field "+f[1]+" mode 0100755",
			"set_inode_field "+f[1]+" uid 0",
			"set_inode_field "+f[1]+" gid 0")
	}
	cmd := exec.Command(debugfs, "-w", "-f", "-", img)
	cmd.Stdin = strings.NewReader(strings.Join(script, "\n") + "\n")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("debugfs: %v: %s", err, strings.TrimSpace(string(out)))
	}
	for _, f := range files {
		want, err := fileSum(f[0])
		if err != nil {
			return fmt.Errorf("guest agent: %w", err)
		}
		h := sha256.New()
		var stderr strings.Builder
		cat := exec.Command(debugfs, "-R", "cat "+f[1], img)
		cat.Stdout, cat.Stderr = h, &stderr
		if err := cat.Run(); err != nil {
			return fmt.Errorf("debugfs cat: %v: %s", err, strings.TrimSpace(stderr.String()))
		}
		if got := hex.EncodeToString(h.Sum(nil)); got != want {
			return fmt.Errorf("writing %s into the guest disk failed (disk full?): %s", f[1], strings.TrimSpace(string(out)))
		}
	}
	return nil
}

// fileSum is the hex SHA-256 of a file's content.
func fileSum(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
