package kvm

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// bootDir is where FindKernel looks; tests point it elsewhere.
var bootDir = "/boot"

// FindKernel returns the newest /boot/vmlinuz-<release> whose module tree
// (/lib/modules/<release>, or modules when set) has a modules.dep, and that
// tree; "" when there is none. It is the guest kernel berth serve uses by
// default (a Debian host's own, installed by linux-image-amd64), and what
// `berth host check` looks for: the initramfs is built from that tree.
func FindKernel(modules string) (kernel, tree string) {
	ks, _ := filepath.Glob(filepath.Join(bootDir, "vmlinuz-*"))
	sort.Sort(sort.Reverse(sort.StringSlice(ks)))
	for _, k := range ks {
		tree := modules
		if tree == "" {
			r := KernelRelease(k)
			if r == "" {
				continue
			}
			tree = filepath.Join("/lib/modules", r)
		}
		if _, err := os.Stat(filepath.Join(tree, "modules.dep")); err == nil {
			return k, tree
		}
	}
	return "", ""
}

// KernelRelease is the release in a kernel's file name, vmlinuz-<release>
// or vmlinux-<release>, which names its module tree; "" for other names.
func KernelRelease(kernel string) string {
	base := filepath.Base(kernel)
	for _, p := range []string{"vmlinuz-", "vmlinux-"} {
		if r, ok := strings.CutPrefix(base, p); ok && r != "" && !strings.Contains(r, "..") {
			return r
		}
	}
	return ""
}
