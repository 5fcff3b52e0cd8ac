package kvm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berth-dev/berth/internal/vm"
)

func TestKernelRelease(t *testing.T) {
	for _, tc := range []struct{ path, want string }{
		{"/boot/vmlinuz-6.1.0-57-amd64", "6.1.0-57-amd64"},
		{"/srv/vmlinux-6.1", "6.1"},
		{"/srv/vmlinux", ""},
		{"/boot/bzImage", ""},
		{"/boot/vmlinuz-", ""},
		{"/boot/vmlinuz-..", ""},
	} {
		if got := KernelRelease(tc.path); got != tc.want {
			t.Errorf("KernelRelease(%q) = %q, want %q", tc.path, got, tc.want)
		}
	}
}

// TestFindKernel finds the newest kernel of a made-up /boot, and none
// when the module tree it needs is missing.
func TestFindKernel(t *testing.T) {
	old := bootDir
	bootDir = t.TempDir()
	t.Cleanup(func() { bootDir = old })
	for _, k := range []string{"vmlinuz-6.1.0-1-amd64", "vmlinuz-6.1.0-2-amd64", "config-6.1.0-2-amd64"} {
		os.WriteFile(filepath.Join(bootDir, k), []byte("x"), 0o644)
	}
	tree := t.TempDir()
	if k, m := FindKernel(tree); k != "" {
		t.Errorf("FindKernel with a tree without modules.dep = %q, %q; want none", k, m)
	}
	os.WriteFile(filepath.Join(tree, "modules.dep"), nil, 0o644)
	k, m := FindKernel(tree)
	if want := filepath.Join(bootDir, "vmlinuz-6.1.0-2-amd64"); k != want || m != tree {
		t.Errorf("FindKernel = %q, %q; want %q, %q", k, m, want, tree)
	}
	bootDir = t.TempDir()
	if k, _ := FindKernel(tree); k != "" {
		t.Errorf("FindKernel in an empty /boot = %q", k)
	}
}

// TestGuestInitArgs checks that init's extra arguments (a dynamic berth's
// interpreter flags) come between the init and the agent's arguments,
// with and without an initramfs, and that bad ones are refused.
func TestGuestInitArgs(t *testing.T) {
	pre := []string{"--inhibit-cache", "--library-path", "/berth-lib", "/berth-agent"}
	st := state{ID: vm.Name("app", 7), GuestIP: "10.0.0.2", PrefixLen: 30, HostIP: "10.0.0.1"}
	for _, tc := range []struct {
		name, want string
		noInitrd   bool
	}{
		{"initramfs", " -- /berth-lib/ld.so --inhibit-cache --library-path /berth-lib /berth-agent agent --vm-init --config /dev/vdb", false},
		{"no initramfs", " -- --inhibit-cache --library-path /berth-lib /berth-agent agent --vm-init --config /dev/vdb", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := validOptions(t)
			o.GuestInit, o.GuestInitArgs = "/berth-lib/ld.so", pre
			if tc.noInitrd {
				o.NoInitrd, o.Initrd = true, ""
			}
			d, err := New(o)
			if err != nil {
				t.Fatal(err)
			}
			got := d.bootArgs(st)
			if !strings.HasSuffix(got, tc.want) {
				t.Errorf("bootArgs = %q, want it to end with %q", got, tc.want)
			}
			if tc.noInitrd && !strings.Contains(got, " init=/berth-lib/ld.so ") {
				t.Errorf("bootArgs = %q, want init=/berth-lib/ld.so", got)
			}
		})
	}
	for _, bad := range [][]string{{""}, {"--library-path /x"}, {"a\tb"}} {
		o := validOptions(t)
		o.GuestInitArgs = bad
		if _, err := New(o); err == nil || !strings.Contains(err.Error(), "GuestInitArgs") {
			t.Errorf("New with GuestInitArgs %q: %v, want an error naming GuestInitArgs", bad, err)
		}
	}
}
