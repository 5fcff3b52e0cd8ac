//go:build linux

package agent_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/agent"
)

// leaseCheck is the agents' lease check interval in these tests.
const leaseCheck = "--lease-check=20ms"

// writeLease writes a lease file the way a driver does.
func writeLease(t *testing.T, path string, until time.Time) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, agent.FormatLease(until), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// running starts cmd and returns a channel closed when it has exited.
func running(t *testing.T, cmd *exec.Cmd) <-chan struct{} {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
	})
	return done
}

// awaitExit waits (bounded, as a hang guard) for the agent to exit.
func awaitExit(t *testing.T, done <-chan struct{}, stderr interface{ String() string }) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("the agent did not exit (stderr %s)", stderr)
	}
}

// waitReady blocks until the app has written to the fifo.
func waitReady(t *testing.T, fifo string) {
	t.Helper()
	if b, err := os.ReadFile(fifo); err != nil || string(b) != "ready\n" {
		t.Fatalf("fifo: %q, %v", b, err)
	}
}

func TestMainLeaseExpires(t *testing.T) {
	tests := []struct {
		name     string
		script   string // gets the fifo path as $1
		grace    string
		code     int
		logLine  string
		expireAt string // "start": the lease has passed before the agent starts
	}{
		{name: "app exits on SIGTERM", script: `trap 'echo trapped; exit 0' TERM; echo ready > "$1"; while :; do sleep 0.05; done`,
			code: 0, logLine: "trapped"},
		{name: "app ignores SIGTERM", script: `trap '' TERM; echo ready > "$1"; while :; do sleep 0.05; done`,
			grace: "--lease-grace=50ms", code: 128 + int(syscall.SIGKILL)},
		{name: "passed before the start", script: `exec sleep 1000`, expireAt: "start", code: -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := shortDir(t)
			log, exit, lease := filepath.Join(dir, "out.log"), filepath.Join(dir, "exit.json"), filepath.Join(dir, "lease")
			fifo := filepath.Join(dir, "ready")
			if err := syscall.Mkfifo(fifo, 0o600); err != nil {
				t.Fatal(err)
			}
			if tt.expireAt == "start" {
				writeLease(t, lease, time.Now().Add(-time.Minute))
			} else {
				writeLease(t, lease, time.Now().Add(time.Hour))
			}
			args := []string{"--listen", "unix:" + filepath.Join(dir, "a.sock"), "--log", log, "--exit-file", exit,
				"--lease-file", lease, leaseCheck}
			if tt.grace != "" {
				args = append(args, tt.grace)
			}
			args = append(args, "--", "sh", "-c", tt.script, "sh", fifo)
			cmd, stderr := agentCmd(t, args...)
			done := running(t, cmd)
			if tt.expireAt != "start" {
				waitReady(t, fifo)
				writeLease(t, lease, time.Now().Add(-time.Second))
			}
			awaitExit(t, done, stderr)
			ef := readExitFile(t, exit)
			if ef.Reason != "lease expired" {
				t.Errorf("exit file reason %q, want %q", ef.Reason, "lease expired")
			}
			if tt.code >= 0 && (*ef.ExitCode != tt.code || cmd.ProcessState.ExitCode() != tt.code) {
				t.Errorf("exit code %d (file %d), want %d", cmd.ProcessState.ExitCode(), *ef.ExitCode, tt.code)
			}
			if lines := readLog(t, log); tt.logLine != "" && !hasLine(lines, "stdout", tt.logLine) {
				t.Errorf("log lacks the app's %q: %+v", tt.logLine, lines)
			}
		})
	}
}

// TestMainLeaseUnreadable checks that a missing or malformed lease file keeps
// the app running, is logged once per problem, and that a lease written
// later is still enforced.
func TestMainLeaseUnreadable(t *testing.T) {
	dir := shortDir(t)
	log, exit, lease := filepath.Join(dir, "out.log"), filepath.Join(dir, "exit.json"), filepath.Join(dir, "lease")
	fifo := filepath.Join(dir, "ready")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd, stderr := agentCmd(t, "--listen", "unix:"+filepath.Join(dir, "a.sock"), "--log", log, "--exit-file", exit,
		"--lease-file", lease, leaseCheck, "--", "sh", "-c", `echo ready > "$1"; exec sleep 1000`, "sh", fifo)
	done := running(t, cmd)
	waitReady(t, fifo)

	notices := func() int {
		n := 0
		for _, l := range readLog(t, log) {
			if l.S == "agent" && strings.HasPrefix(l.M, "lease file: ") {
				n++
			}
		}
		return n
	}
	waitNotices := func(want int) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for notices() < want {
			if time.Now().After(deadline) {
				t.Fatalf("%d lease notices in the log, want %d: %+v", notices(), want, readLog(t, log))
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	alive := func(when string) {
		t.Helper()
		// Many check intervals: long enough for a wrong expiry to happen.
		time.Sleep(20 * 20 * time.Millisecond)
		select {
		case <-done:
			t.Fatalf("the agent exited %s (stderr %s)", when, stderr)
		default:
		}
	}
	waitNotices(1)
	alive("without a lease file")
	if err := os.WriteFile(lease, []byte("tomorrow\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	waitNotices(2)
	alive("with a malformed lease file")
	if n := notices(); n != 2 {
		t.Errorf("%d lease notices, want 2 (one per problem, not one per check)", n)
	}
	writeLease(t, lease, time.Now().Add(-time.Second))
	awaitExit(t, done, stderr)
	if ef := readExitFile(t, exit); ef.Reason != "lease expired" {
		t.Errorf("exit file reason %q, want lease expired", ef.Reason)
	}
}

func TestLeaseFormat(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lease")
	for _, tt := range []struct {
		until time.Time
		want  int64
	}{
		{time.Unix(1700000000, 0), 1700000000},
		{time.Unix(1700000000, 1), 1700000001}, // rounded up: never shorter than asked
		{time.Unix(1700000000, 999999999), 1700000001},
	} {
		os.WriteFile(path, agent.FormatLease(tt.until), 0o600)
		got, err := agent.ReadLease(path)
		if err != nil || got.Unix() != tt.want {
			t.Errorf("lease for %v read back as %v, %v; want unix %d", tt.until, got, err, tt.want)
		}
	}
	for _, bad := range []string{"", "soon", "-5", "1.5", "12 13"} {
		os.WriteFile(path, []byte(bad), 0o600)
		if _, err := agent.ReadLease(path); err == nil {
			t.Errorf("ReadLease(%q) succeeded, want an error", bad)
		}
	}
	if _, err := agent.ReadLease(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("ReadLease of a missing file succeeded")
	}
}

func TestMainLeaseUsage(t *testing.T) {
	dir := shortDir(t)
	for _, args := range [][]string{{"--lease-check=0s"}, {"--lease-grace=-1s"}, {"--lease-check=soon"}} {
		cmd, stderr := agentCmd(t, append([]string{"--listen", "unix:" + filepath.Join(dir, "a.sock")}, args...)...)
		if code := exitCode(t, cmd, stderr); code != 2 || !strings.Contains(stderr.String(), "lease-") {
			t.Errorf("agent %q: exit %d, stderr %q; want 2 and a message naming the flag", args, code, stderr)
		}
	}
}

// TestSetLease: PUT /v1/lease rewrites the agent's lease file, outside
// the Root its files endpoints are confined to, making its directory; an
// agent without a lease file answers 404, and a body that is no deadline
// is refused.
func TestSetLease(t *testing.T) {
	dir := t.TempDir()
	lease := filepath.Join(dir, "run", "berth", "lease")
	root := filepath.Join(dir, "workspace")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	c, sock := serve(t, agent.Options{Root: root, LeaseFile: lease})
	until := time.Unix(1900000000, 0)
	if err := c.SetLease(context.Background(), until); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(lease); err != nil || string(b) != "1900000000\n" {
		t.Errorf("lease file %q (%v), want 1900000000", b, err)
	}
	if ents, _ := os.ReadDir(root); len(ents) != 0 {
		t.Errorf("the root holds %v, want nothing", ents)
	}
	req, _ := http.NewRequest("PUT", "http://agent/v1/lease", strings.NewReader("soon"))
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	if resp, err := hc.Do(req); err != nil || resp.StatusCode != http.StatusBadRequest {
		t.Errorf("PUT /v1/lease \"soon\": %v %v, want 400", resp, err)
	} else {
		resp.Body.Close()
	}
	c2, _ := serve(t, agent.Options{})
	var ae *agent.Error
	if err := c2.SetLease(context.Background(), until); !errors.As(err, &ae) || ae.Status != http.StatusNotFound {
		t.Errorf("SetLease without a lease file: %v, want a 404", err)
	}
}
