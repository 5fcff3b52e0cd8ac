//go:build linux

package agent_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/agent"
)

// startSpare starts the test binary as a spare agent listening on
// dir/a/a.sock, with the other end of its --spare-fd returned, and waits
// until it reports ready.
func startSpare(t *testing.T, dir string, extra ...string) (*exec.Cmd, *bytes.Buffer, *os.File) {
	t.Helper()
	if err := os.Mkdir(filepath.Join(dir, "a"), 0o700); err != nil {
		t.Fatal(err)
	}
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	mine, theirs := os.NewFile(uintptr(fds[0]), "mine"), os.NewFile(uintptr(fds[1]), "theirs")
	args := append([]string{"--listen", "unix:" + filepath.Join(dir, "a", "a.sock"), "--spare", "--spare-fd", "3",
		"--spare-room=" + strings.Repeat(" ", 1024)}, extra...)
	cmd, stderr := agentCmd(t, args...)
	cmd.ExtraFiles = []*os.File{theirs}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	theirs.Close()
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		mine.Close()
	})
	line, err := bufio.NewReader(mine).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("the spare said %q, %v (stderr %s)", line, err, stderr)
	}
	return cmd, stderr, mine
}

// waitExit waits for cmd to end and returns its exit code.
func waitExit(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second): // hang guard
		t.Fatal("the agent does not exit")
	}
	return cmd.ProcessState.ExitCode()
}

// TestSpareAssign renames a spare's directory, as the process driver does,
// assigns it a replica and checks that it is then that replica's agent:
// flags, environment, command line, files, exec, exit.
func TestSpareAssign(t *testing.T) {
	dir := shortDir(t)
	cmd, stderr, _ := startSpare(t, dir)
	c := agent.NewClient(agent.UnixDialer(filepath.Join(dir, "a", "a.sock")))
	defer c.Close()
	if _, err := c.Exec(t.Context(), agent.ExecRequest{Command: "true"}); !isStatus(err, http.StatusServiceUnavailable) {
		t.Errorf("exec before the assignment: %v, want 503", err)
	}
	c.Close()
	if err := os.Rename(filepath.Join(dir, "a"), filepath.Join(dir, "b")); err != nil {
		t.Fatal(err)
	}
	b := filepath.Join(dir, "b")
	sock, exit, log := filepath.Join(b, "a.sock"), filepath.Join(b, "exit.json"), filepath.Join(b, "out.log")
	c = agent.NewClient(agent.UnixDialer(sock))
	defer c.Close()
	g := agent.GuestConfig{
		Args: []string{"--listen", "unix:" + sock, "--exit-file", exit, "--log", log, "--workdir", b,
			"--setup", "echo hooked > hook.txt", "--", "/bin/sh", "-c", "echo $GREETING; exec sleep 60"},
		Env:   []string{"PATH=" + os.Getenv("PATH"), "GREETING=hi there", "BERTH_AGENT_TEST_MODE=main"},
		Files: map[string]string{filepath.Join(b, "given.txt"): "given"},
	}
	if err := c.Assign(t.Context(), g); err != nil {
		t.Fatalf("Assign: %v (stderr %s)", err, stderr)
	}
	if err := c.Assign(t.Context(), g); !isStatus(err, http.StatusConflict) {
		t.Errorf("a second Assign: %v, want 409", err)
	}
	res, err := c.Exec(t.Context(), agent.ExecRequest{Command: "printenv GREETING"})
	if err != nil || res.Stdout != "hi there\n" {
		t.Errorf("exec after the assignment: %+v, %v; want the assigned environment", res, err)
	}
	// The agent serves while its --setup hooks run (the hook writes
	// hook.txt): wait for it, within a bound that only turns a hook that
	// never ran into a failure.
	var res2 agent.ExecResult
	for deadline := time.Now().Add(30 * time.Second); ; {
		r, err := c.Exec(t.Context(), agent.ExecRequest{Command: "cat hook.txt given.txt"})
		if err == nil && r.Stdout == "hooked\ngiven" || time.Now().After(deadline) {
			res2 = r
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if res2.Stdout != "hooked\ngiven" {
		t.Errorf("the hook's and the assignment's files in the workdir: %+v", res2)
	}
	cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/cmdline")
	args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
	want := append([]string{os.Args[0]}, g.Args...)
	if strings.Join(args, "\x00") != strings.Join(want, "\x00") {
		t.Errorf("command line %q, want %q", args, want)
	}
	// The log has the command's output.
	deadline := time.Now().Add(30 * time.Second)
	for !hasLine(readLog(t, log), "stdout", "hi there") {
		if time.Now().After(deadline) {
			t.Fatalf("the log lacks the command's output: %+v", readLog(t, log))
		}
		time.Sleep(10 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if code := waitExit(t, cmd); code != 143 {
		t.Errorf("exit code %d, want 143 (stderr %s)", code, stderr)
	}
	if ef := readExitFile(t, exit); *ef.ExitCode != 143 {
		t.Errorf("exit file %+v, want 143", ef)
	}
}

func isStatus(err error, status int) bool {
	var ae *agent.Error
	return errors.As(err, &ae) && ae.Status == status
}

// TestSpareBadAssignment checks that a spare refuses assignments it cannot
// take, and exits: it is single-use.
func TestSpareBadAssignment(t *testing.T) {
	tests := []struct {
		name string
		g    agent.GuestConfig
		want string
	}{
		{"unknown flag", agent.GuestConfig{Args: []string{"--bogus"}}, "bogus"},
		{"start-only flag", agent.GuestConfig{Args: []string{"--config", "/x"}}, "--config cannot be assigned"},
		{"spare again", agent.GuestConfig{Args: []string{"-spare-fd=4"}}, "--spare-fd cannot be assigned"},
		{"bad env", agent.GuestConfig{Args: []string{"--", "true"}, Env: []string{"=x"}}, "bad environment entry"},
		{"relative file", agent.GuestConfig{Args: []string{"--", "true"}, Files: map[string]string{"x": ""}}, "not absolute"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := shortDir(t)
			cmd, _, _ := startSpare(t, dir)
			c := agent.NewClient(agent.UnixDialer(filepath.Join(dir, "a", "a.sock")))
			defer c.Close()
			err := c.Assign(t.Context(), tt.g)
			if !isStatus(err, http.StatusBadRequest) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Assign: %v, want 400 with %q", err, tt.want)
			}
			if code := waitExit(t, cmd); code != 2 {
				t.Errorf("exit code %d, want 2", code)
			}
		})
	}
}

// TestSpareEnds checks the ways an unassigned spare ends: its driver goes
// away (its end of --spare-fd closes), or SIGTERM.
func TestSpareEnds(t *testing.T) {
	t.Run("driver gone", func(t *testing.T) {
		dir := shortDir(t)
		cmd, _, link := startSpare(t, dir)
		link.Close()
		if code := waitExit(t, cmd); code != 0 {
			t.Errorf("exit code %d, want 0", code)
		}
	})
	t.Run("SIGTERM", func(t *testing.T) {
		dir := shortDir(t)
		cmd, _, _ := startSpare(t, dir)
		cmd.Process.Signal(syscall.SIGTERM)
		if code := waitExit(t, cmd); code != 0 {
			t.Errorf("exit code %d, want 0", code)
		}
	})
	t.Run("usage", func(t *testing.T) {
		dir := shortDir(t)
		cmd, stderr := agentCmd(t, "--listen", "unix:"+filepath.Join(dir, "a.sock"), "--spare", "--", "true")
		if code := exitCode(t, cmd, stderr); code != 2 || !strings.Contains(stderr.String(), "--spare takes no") {
			t.Errorf("--spare with COMMAND: exit %d, stderr %q; want 2", code, stderr)
		}
	})
}

// TestAssignNoRetry: a spare's staging server takes no more connections
// once it has answered the assignment (and says so), so Assign is one
// round trip, and the next connection reaches the replica's own agent,
// never the staging server's 503. (Over many rounds, as the race it
// closes was a matter of scheduling.)
func TestAssignNoRetry(t *testing.T) {
	for i := range 10 {
		dir := shortDir(t)
		cmd, _, _ := startSpare(t, dir)
		// Before startSpare's kill: the agent ends its COMMAND on TERM.
		t.Cleanup(func() { cmd.Process.Signal(syscall.SIGTERM); waitExit(t, cmd) })
		sock := filepath.Join(dir, "a", "a.sock")
		var dials atomic.Int32
		dial := agent.UnixDialer(sock)
		c := agent.NewClient(func(ctx context.Context) (net.Conn, error) {
			dials.Add(1)
			return dial(ctx)
		})
		g := agent.GuestConfig{
			Args: []string{"--listen", "unix:" + sock, "--workdir", dir, "--", "/bin/sh", "-c", "exec sleep 60"},
			Env:  []string{"PATH=" + os.Getenv("PATH"), "BERTH_AGENT_TEST_MODE=main"},
		}
		if err := c.Assign(t.Context(), g); err != nil {
			t.Fatalf("Assign: %v", err)
		}
		if n := dials.Load(); n != 1 {
			t.Fatalf("round %d: Assign made %d connections, want 1 (the assignment)", i, n)
		}
		// The next connection reaches the replica's agent, at once.
		if _, err := c.Info(t.Context()); err != nil {
			t.Fatalf("round %d: Info right after Assign: %v", i, err)
		}
		c.Close()
		if n := dials.Load(); n != 2 {
			t.Fatalf("round %d: %d connections for Assign and one Info, want 2", i, n)
		}
	}
}
