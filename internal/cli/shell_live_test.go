package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/server"
	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/process"
)

// With BERTH_CLI_TEST_ROLE=app this test binary is the app of the vm
// deployments the live server runs: an HTTP server on $PORT.
func init() {
	if os.Getenv(agentRole) != "app" {
		return
	}
	ln, err := net.Listen("tcp", "127.0.0.1:"+os.Getenv("PORT"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(func() int {
		http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "app") }))
		return 1
	}())
}

// vmLiveServer is a real, gated berth on loopback whose vm deployments
// run this test binary as agent and app with the process driver. The
// replicas, which outlive berth by design, are stopped at cleanup.
func vmLiveServer(t *testing.T) string {
	t.Helper()
	t.Setenv("SHELL", "/bin/sh")         // the shell's protocol is under test, not bash's start-up
	dir, err := os.MkdirTemp("", "bcli") // short: agent socket paths are limited
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		d, err := process.New(process.Options{Dir: filepath.Join(dir, "replicas")})
		if err == nil {
			insts, _ := d.List(context.Background())
			for _, in := range insts {
				if err := d.Stop(context.Background(), in.ID, time.Second); err != nil && !errors.Is(err, vm.ErrNotFound) {
					t.Errorf("cleanup: stopping %s: %v", in.ID, err)
				}
			}
		}
		os.RemoveAll(dir)
	})
	return runServer(t, server.Options{
		DataDir: dir, AgentCommand: []string{os.Args[0]}, AgentEnv: []string{agentRole + "=agent"},
	}, nil)
}

// TestShellExitCodeLive: `berth shell` against a real server, with piped
// input ending in `exit 3`, prints the shell's output and exits 3, every
// time (issue 10: it always exited 1, "connection ended without an exit
// status").
func TestShellExitCodeLive(t *testing.T) {
	srv := vmLiveServer(t)
	op := func(args ...string) []string {
		return append([]string{"--server", srv, "--user", "admin", "--password", "opw"}, args...)
	}
	app := fmt.Sprintf("exec env %s=app %q -test.run=^$", agentRole, os.Args[0])
	spec := fmt.Sprintf(`{"id":"web","routes":[{"host":"web.test"}],"vm":{"driver":"process","port":8080,"start_command":%q},"scaling":{"min_replicas":1,"max_replicas":1}}`, app)
	file := filepath.Join(t.TempDir(), "web.json")
	if err := os.WriteFile(file, []byte(spec), 0o600); err != nil {
		t.Fatal(err)
	}
	mustRun(t, "", op("apply", "-f", file)...)
	for i := range 10 {
		code, out, errs := berth(t, fmt.Sprintf("echo cli-$((%d*7))\nexit 3\n", i), op("shell", "web")...)
		if want := fmt.Sprintf("cli-%d", i*7); code != 3 || !strings.Contains(out, want) {
			t.Errorf("shell %d: exit %d, stdout %q, stderr %q; want 3 and output with %q", i, code, out, errs, want)
		}
	}
}
