package container

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/agent"
	"github.com/berth-dev/berth/internal/agentbin"
	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/vmtest"
)

// TestDynamicAgent runs replicas, cold and from a spare, with a
// dynamically linked agent (built with cgo, as `go build` builds berth on
// a host with a C compiler) in the busybox image, which has no libc at
// all: the agent runs through the interpreter and libraries bundled from
// the host, serves the app and runs execs.
func TestDynamicAgent(t *testing.T) {
	e := setup(t)
	if !vmtest.HaveCC() {
		t.Skip("no C compiler: cgo cannot build a dynamically linked agent")
	}
	bin := filepath.Join(shortTempDir(t), "agent")
	if err := vmtest.BuildAgent(bin, true); err != nil {
		t.Fatal(err)
	}
	if static, err := agentbin.IsStatic(bin); err != nil || static {
		t.Fatalf("the agent built with cgo has no ELF interpreter (%v); the test proves nothing", err)
	}
	one := 1
	d, err := New(Options{
		Dir: shortTempDir(t), Images: e.images, Net: e.net, Agent: bin,
		AgentArgs: []string{"--lease-check=" + leaseCheck.String()}, CgroupParent: testCgroupParent,
		Runtime: os.Getenv("BERTH_TEST_OCI_RUNTIME"), Spares: &one,
	})
	if err != nil {
		t.Fatalf("New with a dynamic agent: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	if d.agent.Static() {
		t.Fatal("the driver takes the dynamic agent for a static one")
	}
	if _, err := os.Stat(filepath.Join(d.dir, agentLibDir, d.agent.Interp)); err != nil {
		t.Fatalf("the agent's interpreter is not bundled: %v", err)
	}

	// check makes sure a replica runs its agent through the bundled
	// interpreter, serves the app and runs an exec.
	check := func(t *testing.T, id, addr string) {
		t.Helper()
		st, err := d.rd.Load(id)
		if err != nil {
			t.Fatal(err)
		}
		// The runtime may return before its child has exec'd the init,
		// whose command line reads empty, or the runtime's own (the
		// child forked from it), until then.
		var cmdline []byte
		eventually(t, "the init to be exec'd", func() bool {
			cmdline, err = os.ReadFile("/proc/" + strconv.Itoa(st.PID) + "/cmdline")
			first, _, _ := strings.Cut(string(cmdline), "\x00")
			return err != nil || (first != "" && !strings.HasSuffix(first, "/crun") && !strings.HasSuffix(first, "/runc"))
		})
		if err != nil {
			t.Fatal(err)
		}
		args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
		if want := libInside + "/" + d.agent.Interp; len(args) < 6 || args[0] != want || args[4] != agentInside || args[5] != "agent" {
			t.Errorf("the init's command line is %q, want %s running %s agent", args, want, agentInside)
		}
		var body string
		eventually(t, "the app to answer", func() bool {
			resp, err := http.Get("http://" + addr + "/")
			if err != nil {
				return false
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			body = string(b)
			return resp.StatusCode == http.StatusOK
		})
		if body != "ok\n" {
			t.Errorf("the app answered %q, want ok", body)
		}
		c := agent.NewClient(func(ctx context.Context) (net.Conn, error) { return d.DialAgent(ctx, id) })
		defer c.Close()
		res, err := c.Exec(t.Context(), agent.ExecRequest{Command: "echo hello from $(hostname); ls /.berth/lib"})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("exec: %+v, %v", res, err)
		}
		if !strings.HasPrefix(res.Stdout, "hello from "+vm.Hostname(id)+"\n") || !strings.Contains(res.Stdout, d.agent.Interp) {
			t.Errorf("exec printed %q, want the replica's host name and the bundle", res.Stdout)
		}
	}

	cold := spec("dyn", app)
	inst := start(t, d, cold)
	t.Run("cold", func(t *testing.T) { check(t, cold.Name, inst.Addr) })

	kind := kindOf(cold)
	eventually(t, "a spare to be ready", func() bool { return readySpares(d, kind) == 1 })
	spareID := d.pool.Ready(kind)[0].st.RuntimeID
	warm := spec("dyn", app)
	inst = start(t, d, warm)
	st, err := d.rd.Load(warm.Name)
	if err != nil {
		t.Fatal(err)
	}
	if st.RuntimeID != spareID {
		t.Fatalf("the second replica's runtime id is %q, want the spare's %q", st.RuntimeID, spareID)
	}
	t.Run("spare", func(t *testing.T) { check(t, warm.Name, inst.Addr) })

	for _, s := range []string{cold.Name, warm.Name} {
		if err := d.Stop(context.Background(), s, time.Second); err != nil {
			t.Errorf("Stop %s: %v", s, err)
		}
	}
}
