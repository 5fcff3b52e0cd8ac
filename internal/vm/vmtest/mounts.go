package vmtest

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/berth-dev/berth/internal/vm"
)

// Mount targets of the Mounts test: below a directory no image has, so
// that the driver must create the mount points.
const (
	mountRO = "/berth-vmtest/ro"
	mountRW = "/berth-vmtest/rw"
)

// testMounts checks Spec.Mounts. A driver that declares vm.CanMount must
// show a replica the host tree at its target, make writes to a read-only
// mount fail (and leave the host tree as it was), let the replica write
// through a writable mount when its WritableMounts says so (and refuse
// one when not), and refuse malformed mounts, naming them, before it
// starts anything. Any other driver must refuse a spec with mounts.
func (s *suite) testMounts(t *testing.T) {
	d := s.newDriver(t)
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "hello.txt"), []byte("hello from the mount\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(declared(t, d), vm.CanMount) {
		spec := s.spec("vmtest-nomount", s.o.App)
		spec.Mounts = []vm.Mount{{Source: src, Target: mountRO, ReadOnly: true}}
		s.refused(t, d, spec, "a spec with mounts on a driver that is no vm.Mounter")
		return
	}
	mounter := ability[vm.Mounter](t, d, vm.CanMount)

	// Malformed mounts, each refused naming it, before any replica exists.
	file := filepath.Join(src, "hello.txt")
	for _, tt := range []struct {
		what   string
		mounts []vm.Mount
		name   string // in the error
	}{
		{"a missing source", []vm.Mount{{Source: filepath.Join(src, "nosuch"), Target: mountRO, ReadOnly: true}}, mountRO},
		{"a source that is a file", []vm.Mount{{Source: file, Target: mountRO, ReadOnly: true}}, mountRO},
		{"a relative target", []vm.Mount{{Source: src, Target: "data", ReadOnly: true}}, "data"},
		{"an unclean target", []vm.Mount{{Source: src, Target: "/data/../etc", ReadOnly: true}}, "/data/../etc"},
		{"a target of /", []vm.Mount{{Source: src, Target: "/", ReadOnly: true}}, src},
		{"nested targets", []vm.Mount{{Source: src, Target: "/data", ReadOnly: true}, {Source: src, Target: "/data/x", ReadOnly: true}}, "/data/x"},
		{"equal targets", []vm.Mount{{Source: src, Target: "/data", ReadOnly: true}, {Source: src, Target: "/data", ReadOnly: true}}, "/data"},
	} {
		spec := s.spec("vmtest-badmount", s.o.App)
		spec.Mounts = tt.mounts
		if err := s.refused(t, d, spec, tt.what); err != nil && !strings.Contains(err.Error(), tt.name) {
			t.Errorf("Start with %s: the error %q does not name the mount (%s)", tt.what, err, tt.name)
		}
	}
	ws := t.TempDir()
	spec := s.spec("vmtest-badmount", s.o.App)
	spec.Workspace = ws
	spec.Mounts = []vm.Mount{{Source: src, Target: "/workspace", ReadOnly: true}}
	s.refused(t, d, spec, "a mount at /workspace with a workspace")

	rw := t.TempDir()
	if !mounter.WritableMounts() {
		spec := s.spec("vmtest-rwmount", s.o.App)
		spec.Mounts = []vm.Mount{{Source: rw, Target: mountRW}}
		s.refused(t, d, spec, "a writable mount on a driver whose WritableMounts is false")
	}

	// The replica serves only if it reads the host's file at the target
	// and cannot write there (nor, if writable, cannot write the other).
	check := `[ "$(cat ` + mountRO + `/hello.txt)" = "hello from the mount" ] || { echo 'vmtest: the mount is not at its target'; exit 3; }
if (echo x > ` + mountRO + `/written) 2>/dev/null; then echo 'vmtest: a read-only mount took a write'; exit 3; fi
if (mkdir ` + mountRO + `/dir) 2>/dev/null; then echo 'vmtest: a read-only mount took a mkdir'; exit 3; fi
`
	spec = s.spec("vmtest-mount", "")
	spec.Mounts = []vm.Mount{{Source: src, Target: mountRO, ReadOnly: true}}
	if mounter.WritableMounts() {
		spec.Mounts = append(spec.Mounts, vm.Mount{Source: rw, Target: mountRW})
		check += `echo from the replica > ` + mountRW + `/written || { echo 'vmtest: a writable mount took no write'; exit 3; }
`
	}
	spec.Command = check + s.o.App
	s.start(t, d, spec)
	waitServing(t, d, spec.Name)
	for _, name := range []string{"written", "dir"} {
		if _, err := os.Lstat(filepath.Join(src, name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the read-only mount's host tree has %s after the replica ran: %v", name, err)
		}
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "hello from the mount\n" {
		t.Errorf("the read-only mount's host file holds %q, %v", b, err)
	}
	if mounter.WritableMounts() {
		if b, err := os.ReadFile(filepath.Join(rw, "written")); err != nil || string(b) != "from the replica\n" {
			t.Errorf("the writable mount's host tree has written = %q, %v; want what the replica wrote", b, err)
		}
	}
}

// refused checks that Start refuses spec (what describes it) and leaves no
// replica, and returns Start's error.
func (s *suite) refused(t *testing.T, d vm.Driver, spec vm.Spec, what string) error {
	t.Helper()
	_, err := d.Start(t.Context(), spec)
	if err == nil {
		d.Stop(t.Context(), spec.Name, s.o.Grace)
		t.Errorf("Start accepted %s", what)
		return nil
	}
	if _, ierr := d.Inspect(t.Context(), spec.Name); !errors.Is(ierr, vm.ErrNotFound) {
		t.Errorf("after Start refused %s (%v), Inspect: %v, want ErrNotFound", what, err, ierr)
	}
	return err
}
