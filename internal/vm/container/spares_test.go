package container

import (
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/hostnet"
	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/proc"
)

// readySpares is how many spares of kind are ready.
func readySpares(d *Driver, kind spareKind) int {
	return len(d.pool.Ready(kind))
}

// spareDirs lists the spare directories under d's Dir.
func spareDirs(t *testing.T, d *Driver) []string {
	t.Helper()
	ents, err := os.ReadDir(d.dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), sparePrefix) {
			out = append(out, e.Name())
		}
	}
	return out
}

// TestSpare starts a replica from a spare container and checks that it is
// the replica in every way a cold one is (address, veth, host name,
// environment, working directory, lease, the app answering), that Stop
// leaves nothing of it, and that Close removes the spare made after it.
func TestSpare(t *testing.T) {
	d := newDriver(t)
	ctx := t.Context()
	first := spec("warm", app)
	start(t, d, first)
	kind := kindOf(first)
	eventually(t, "a spare to be ready", func() bool { return readySpares(d, kind) == 1 })
	spareName := d.pool.Ready(kind)[0].st.ID

	s := spec("warm", "hostname > /.berth/run/hostname.tmp && mv /.berth/run/hostname.tmp /.berth/run/hostname; echo \"$GREETING $(pwd)\" > /.berth/run/env; "+app)
	s.Env = map[string]string{"GREETING": "hello"}
	s.WorkDir = "/srv/warm"
	s.TTL = time.Hour
	inst := start(t, d, s)
	st, err := d.rd.Load(s.Name)
	if err != nil {
		t.Fatal(err)
	}
	if st.RuntimeID != strings.TrimPrefix(spareName, ".") {
		t.Fatalf("the replica's runtime id is %q, want the spare's (%s): it did not start from the spare", st.RuntimeID, spareName)
	}
	if _, err := os.Stat(d.path(spareName)); !os.IsNotExist(err) {
		t.Errorf("the spare's directory is still there: %v", err)
	}
	if exec.Command("ip", "link", "show", "dev", hostnet.VethName(s.Name)).Run() != nil {
		t.Errorf("no veth named after the replica")
	}
	var body string
	eventually(t, "the app to answer", func() bool {
		resp, err := http.Get("http://" + inst.Addr + "/")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		return resp.StatusCode == http.StatusOK
	})
	if strings.TrimSpace(body) != "ok" {
		t.Errorf("the app answered %q", body)
	}
	read := func(name string) string {
		b, _ := os.ReadFile(d.path(s.Name, runDir, name))
		return strings.TrimSpace(string(b))
	}
	eventually(t, "the host name file", func() bool { return read("hostname") != "" })
	if got := read("hostname"); got != vm.Hostname(s.Name) {
		t.Errorf("host name %q, want %q", got, vm.Hostname(s.Name))
	}
	if got := read("env"); got != "hello /srv/warm" {
		t.Errorf("GREETING and working directory: %q", got)
	}
	if read(leaseFile) == "" {
		t.Error("no lease file")
	}
	if got, err := d.Inspect(ctx, s.Name); err != nil || got.State != "running" {
		t.Errorf("Inspect: %+v, %v", got, err)
	}
	if err := d.Stop(ctx, s.Name, time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(d.rt.root, st.RuntimeID)); !os.IsNotExist(err) {
		t.Errorf("the runtime still knows the replica's container: %v", err)
	}
	if exec.Command("ip", "link", "show", "dev", hostnet.VethName(s.Name)).Run() == nil {
		t.Error("the veth outlived the replica")
	}
	if mounted(d.path(s.Name)) {
		t.Error("a mount outlived the replica")
	}

	// Another spare follows the second start; Close removes it.
	eventually(t, "the next spare", func() bool { return readySpares(d, kind) == 1 })
	if len(spareDirs(t, d)) == 0 {
		t.Fatal("no spare directory while a spare is ready")
	}
	d.Close()
	if left := spareDirs(t, d); len(left) > 0 {
		t.Errorf("Close left spares %v", left)
	}
	if mi, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(mi), d.dir+"/"+sparePrefix) {
		t.Error("Close left a spare's mount")
	}
	ents, _ := os.ReadDir(d.rt.root)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "spare-") {
			t.Errorf("the runtime still knows spare %s", e.Name())
		}
	}
}

// TestStaleSpares checks that a Driver removes the spares a previous
// berth left (their agents end when that berth's link closes) and leaves
// a live Driver's alone.
func TestStaleSpares(t *testing.T) {
	e := setup(t)
	old := newDriver(t)
	start(t, old, spec("stale", app))
	kind := spareKind{"busybox", "small"}
	eventually(t, "a spare to be ready", func() bool { return readySpares(old, kind) == 1 })
	// A live Driver's spare survives another Driver's New.
	newDriverAt(t, e, old.dir)
	if len(spareDirs(t, old)) != 1 {
		t.Fatalf("a new Driver removed a live Driver's spare")
	}
	// As when berth dies: the link closes and the spare's agent ends.
	sp, _ := old.pool.Take(t.Context(), kind, 0, func(*spare) bool { return true })
	sp.link.Close()
	eventually(t, "the spare's agent to end", func() bool { return !proc.Alive(sp.st.PID, sp.st.StartTicks) })
	newDriverAt(t, e, old.dir)
	if left := spareDirs(t, old); len(left) > 0 {
		t.Errorf("a new Driver left a dead spare: %v", left)
	}
	if _, err := os.Stat(filepath.Join(old.rt.root, sp.st.RuntimeID)); !os.IsNotExist(err) {
		t.Errorf("the runtime still knows the dead spare: %v", err)
	}
}

// TestPrewarm: Prewarm makes a spare for the spec's image without any
// Start, so that the first Start of the image takes it; a spec that cannot
// use spares (an unknown image) makes none.
func TestPrewarm(t *testing.T) {
	d := newDriver(t)
	d.Prewarm(vm.Spec{Deployment: "nope", Image: "no-such-image", Command: app})
	s := spec("prewarm", app)
	kind := kindOf(s)
	d.Prewarm(vm.Spec{Deployment: s.Deployment, Image: s.Image, Command: s.Command})
	eventually(t, "a prewarmed spare", func() bool { return readySpares(d, kind) == 1 })
	spareName := d.pool.Ready(kind)[0].st.ID
	start(t, d, s)
	st, err := d.rd.Load(s.Name)
	if err != nil {
		t.Fatal(err)
	}
	if st.RuntimeID != strings.TrimPrefix(spareName, ".") {
		t.Errorf("the first Start's runtime id is %q, want the prewarmed spare's (%s)", st.RuntimeID, spareName)
	}
	if n := len(d.pool.Ready(spareKind{"no-such-image", "small"})); n != 0 {
		t.Errorf("%d spares of an unknown image", n)
	}
}
