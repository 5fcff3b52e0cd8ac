package kvm

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
)

// ExtractVmlinux writes the uncompressed kernel inside a bzImage (such as
// Debian's /boot/vmlinuz-*) to out: the xz stream after the setup code,
// decompressed with xz into an ELF vmlinux, which QEMU boots through its
// PVH entry. Under TCG that boots seconds faster than the bzImage, since
// the emulated guest need not decompress itself. Kernels compressed other
// than with xz are refused (the caller then boots the bzImage as it is).
func ExtractVmlinux(bzImage, out string) error {
	b, err := os.ReadFile(bzImage)
	if err != nil {
		return fmt.Errorf("kvm: vmlinux: %w", err)
	}
	i := bytes.Index(b, []byte("\xfd7zXZ\x00"))
	if i < 0 {
		return fmt.Errorf("kvm: vmlinux: %s has no xz payload", bzImage)
	}
	cmd := exec.Command("xz", "-dc")
	cmd.Stdin = bytes.NewReader(b[i:])
	// xz complains about the bytes after the stream (and exits non-zero),
	// but writes all of it: the ELF check below is what counts.
	raw, _ := cmd.Output()
	if len(raw) < 4 || string(raw[:4]) != "\x7fELF" {
		return fmt.Errorf("kvm: vmlinux: the payload of %s is not an ELF kernel (is xz installed?)", bzImage)
	}
	if err := os.WriteFile(out, raw, 0o644); err != nil {
		return fmt.Errorf("kvm: vmlinux: %w", err)
	}
	return nil
}

// InitrdVersion identifies what WriteInitrd puts into every initramfs
// besides its inputs (the /init script, the module list, the layout), as
// a short hex digest. A caller that keeps a built initramfs across runs
// keys it by this and by its inputs (the module tree, busybox), so that a
// berth whose initramfs changed builds a new one.
func InitrdVersion() string { return initrdVersion() }

var initrdVersion = sync.OnceValue(func() string {
	h := sha256.New()
	fmt.Fprintf(h, "berth-initrd-3\x00%s\x00%s\x00%s", initScript, strings.Join(InitrdModules, ","), strings.Join(WorkspaceModules, ","))
	return fmt.Sprintf("%x", h.Sum(nil))[:16]
})
