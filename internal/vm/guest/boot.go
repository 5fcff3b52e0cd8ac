package guest

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/berth-dev/berth/internal/image"
	"github.com/berth-dev/berth/internal/vm/kvm"
)

// Kernel says which guest kernel the kvm driver boots. Every field may be
// empty.
type Kernel struct {
	// Path is the guest kernel (a bzImage or a vmlinux;
	// BERTH_GUEST_KERNEL). Default: the newest /boot/vmlinuz-<release>
	// that has its module tree, as Debian's linux-image-amd64 installs it.
	Path string
	// Modules is that kernel's module tree, which the initramfs is built
	// from (BERTH_GUEST_MODULES). Default: /lib/modules/<release>, the
	// release taken from the kernel's file name.
	Modules string
	// Initrd is a ready initramfs (see kvm.WriteInitrd), which is then not
	// built (BERTH_GUEST_INITRD).
	Initrd string
}

// Boot is the kvm driver's guest kernel and initramfs. The driver is
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
type Boot struct {
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

// Source is the configured kernel.
func (b *Boot) Source() string { return b.src }

// Kernel is the kernel the driver boots: under TCG the unpacked vmlinux
// when TCGKernel says so, else Source.
func (b *Boot) Kernel() string { return b.kernel }

// Initrd is the initramfs the driver boots.
func (b *Boot) Initrd() string { return b.initrd }

// TCGKernel reports whether Kernel is a vmlinux unpacked from Source for
// TCG (the kvm driver's Options.TCGKernel).
func (b *Boot) TCGKernel() bool { return b.tcg }

// Files in the guest cache directory.
const (
	bootKernel = "vmlinux"
	bootInitrd = "initrd.img"
	bootStamp  = "inputs"
)

// NewBoot finds the guest kernel and its module tree and sees whether
// dir holds boot files built from them. Missing files are created empty,
// since the driver checks the paths exist; the first Start fills them.
func NewBoot(dir string, k Kernel, tcg bool, log *slog.Logger) (*Boot, error) {
	b := &Boot{log: log}
	kernel, modules := k.Path, k.Modules
	if kernel == "" {
		if kernel, modules = kvm.FindKernel(modules); kernel == "" {
			return nil, Unavailablef("no guest kernel: install Debian's linux-image-amd64 (a /boot/vmlinuz-<release> with /lib/modules/<release>) or set BERTH_GUEST_KERNEL")
		}
	}
	kernelKey, err := fileKey(kernel)
	if err != nil {
		return nil, Unavailablef("guest kernel: %v", err)
	}
	b.src, b.kernel, b.initrd = kernel, kernel, k.Initrd
	keys := []string{kvm.InitrdVersion(), kernelKey}
	if b.initrd == "" {
		if modules == "" {
			r := kvm.KernelRelease(kernel)
			if r == "" {
				return nil, Unavailablef("cannot tell the module tree of the guest kernel %s from its name: set BERTH_GUEST_MODULES (or BERTH_GUEST_INITRD)", kernel)
			}
			modules = filepath.Join("/lib/modules", r)
		}
		dep, err := fileKey(filepath.Join(modules, "modules.dep"))
		if err != nil {
			return nil, Unavailablef("the guest kernel's module tree: %v (set BERTH_GUEST_MODULES or BERTH_GUEST_INITRD)", err)
		}
		bb, err := exec.LookPath("busybox")
		if err != nil {
			return nil, Unavailablef("no busybox for the guest initramfs (Debian: apt-get install busybox-static)")
		}
		if err := CheckStatic(bb); err != nil {
			return nil, Unavailablef("busybox for the guest initramfs: %v (Debian: apt-get install busybox-static)", err)
		}
		bbKey, err := fileKey(bb)
		if err != nil {
			return nil, Unavailablef("busybox: %v", err)
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
		return nil, Unavailablef("guest boot files: %v", err)
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
			return nil, Unavailablef("guest boot files: %v", err)
		}
		f.Close()
	}
	if got, err := os.ReadFile(b.stamp); built && err == nil && string(got) == b.key {
		b.ready = true
	}
	return b, nil
}

// Wait builds the boot files unless they are built, or waits for the
// build another Start began, until ctx ends. A failed build is returned to
// the Starts that waited for it, and the next Start tries again.
func (b *Boot) Wait(ctx context.Context) error {
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

// Ready reports whether the boot files are built.
func (b *Boot) Ready() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ready
}

// Close waits for a build under way (which no Start's end cancels) to
// end, so that none outlives the driver's owner; it is the driver's
// closer while boot files are pending. It returns nil.
func (b *Boot) Close() error {
	b.mu.Lock()
	done := b.building
	b.mu.Unlock()
	if done != nil {
		<-done
	}
	return nil
}

// build makes the boot files and closes done. It runs on its own, not in
// a Start's context: a Start given up on should not waste the work.
func (b *Boot) build(done chan struct{}) {
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
func (b *Boot) write() error {
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
