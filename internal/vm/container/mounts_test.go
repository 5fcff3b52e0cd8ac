package container

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/vm"
)

// TestMounts starts a replica with a read-only and a writable mount while
// a spare is ready: the replica starts cold (a running spare cannot get
// mounts), reads the host tree at the read-only target and cannot write
// there (not even as root), writes through the writable one; the mount
// points are made in the replica's overlay upper layer, never in the
// shared image tree; and Stop leaves the host trees as the replica left
// them, with nothing mounted.
func TestMounts(t *testing.T) {
	e := setup(t)
	d := newDriver(t)
	ctx := t.Context()
	first := spec("mnt", app)
	start(t, d, first)
	kind := kindOf(first)
	eventually(t, "a spare to be ready", func() bool { return readySpares(d, kind) == 1 })
	spareName := d.pool.Ready(kind)[0].st.ID

	ro, rw := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(ro, "model.bin"), []byte("weights\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := spec("mnt", `{ cat /opt/berth-test/model/model.bin; if echo x > /opt/berth-test/model/new 2>/dev/null; then echo ro-write-worked; fi; echo from the replica > /data-mnt/out; } > /.berth/run/report 2>&1; `+app)
	s.Mounts = []vm.Mount{
		{Source: ro, Target: "/opt/berth-test/model", ReadOnly: true},
		{Source: rw, Target: "/data-mnt"},
	}
	inst := start(t, d, s)
	st, err := d.rd.Load(s.Name)
	if err != nil {
		t.Fatal(err)
	}
	if st.RuntimeID == strings.TrimPrefix(spareName, ".") {
		t.Fatalf("the replica with mounts started from spare %s", spareName)
	}
	if readySpares(d, kind) != 1 {
		t.Errorf("%d spares ready after the start with mounts, want the one still there", readySpares(d, kind))
	}
	eventually(t, "the app to answer", func() bool {
		resp, err := http.Get("http://" + inst.Addr + "/")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		io.Copy(io.Discard, resp.Body)
		return resp.StatusCode == http.StatusOK
	})
	report, _ := os.ReadFile(d.path(s.Name, runDir, "report"))
	if got := string(report); !strings.HasPrefix(got, "weights\n") || strings.Contains(got, "ro-write-worked") {
		t.Errorf("the replica reported %q; want the host file's contents and no write to the read-only mount", got)
	}
	if _, err := os.Stat(filepath.Join(ro, "new")); !os.IsNotExist(err) {
		t.Errorf("the read-only mount's host tree got a file: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(rw, "out")); err != nil || string(b) != "from the replica\n" {
		t.Errorf("the writable mount's host tree has out = %q, %v", b, err)
	}
	// The mount points are the replica's own.
	lower, err := e.images.Rootfs("busybox")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"opt/berth-test", "data-mnt"} {
		if _, err := os.Lstat(filepath.Join(lower, p)); !os.IsNotExist(err) {
			t.Errorf("the image tree has /%s: %v", p, err)
		}
		if fi, err := os.Lstat(filepath.Join(d.path(s.Name, upperDir), p)); err != nil || !fi.IsDir() {
			t.Errorf("the replica's upper layer lacks the mount point /%s: %v", p, err)
		}
	}
	if err := d.Stop(ctx, s.Name, time.Second); err != nil {
		t.Fatal(err)
	}
	if mi, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(mi), ro) || strings.Contains(string(mi), rw) {
		t.Error("a mount of the host trees outlived the replica")
	}
	if b, err := os.ReadFile(filepath.Join(ro, "model.bin")); err != nil || string(b) != "weights\n" {
		t.Errorf("after Stop the read-only tree's file holds %q, %v", b, err)
	}
}

// TestMountConfig: a read-only mount is an rbind with ro in its options
// (which has the runtime remount it read-only), a writable one rw.
func TestMountConfig(t *testing.T) {
	d := newDriver(t)
	s := spec("mntcfg", app)
	s.Mounts = []vm.Mount{{Source: "/host/ro", Target: "/ro", ReadOnly: true}, {Source: "/host/rw", Target: "/rw"}}
	cfg := d.config(s, state{}, "/", vm.Sizes[vm.DefaultSize])
	want := map[string]string{"/ro": "/host/ro rbind,ro,nosuid,nodev", "/rw": "/host/rw rbind,rw,nosuid,nodev"}
	for _, m := range cfg.Mounts {
		if w, ok := want[m.Destination]; ok {
			if got := m.Source + " " + strings.Join(m.Options, ","); m.Type != "bind" || got != w {
				t.Errorf("mount at %s: %s %s, want bind %s", m.Destination, m.Type, got, w)
			}
			delete(want, m.Destination)
		}
	}
	for dst := range want {
		t.Errorf("no mount at %s", dst)
	}
}
