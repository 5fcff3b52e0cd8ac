//go:build linux

package agent_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/agent"
)

// agentCmd returns the test binary set up to run as `berth agent args`.
func agentCmd(t *testing.T, args ...string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "BERTH_AGENT_TEST_MODE=main")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	return cmd, &stderr
}

// exitCode runs cmd to its end and returns its exit code.
func exitCode(t *testing.T, cmd *exec.Cmd, stderr *bytes.Buffer) int {
	t.Helper()
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("running the agent: %v (stderr %s)", err, stderr)
	}
	return cmd.ProcessState.ExitCode()
}

type exitFile struct {
	ExitCode *int   `json:"exit_code"`
	Reason   string `json:"reason"`
	At       time.Time
}

func readExitFile(t *testing.T, path string) exitFile {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("exit file: %v", err)
	}
	var ef exitFile
	if err := json.Unmarshal(b, &ef); err != nil || ef.ExitCode == nil || ef.At.IsZero() {
		t.Fatalf("exit file %s: %v", b, err)
	}
	return ef
}

type logLine struct {
	T time.Time `json:"t"`
	S string    `json:"s"`
	M string    `json:"m"`
}

func readLog(t *testing.T, path string) []logLine {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []logLine
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var l logLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil || l.T.IsZero() || l.S == "" {
			t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		lines = append(lines, l)
	}
	return lines
}

// hasLine reports whether the log holds line m from stream s.
func hasLine(lines []logLine, s, m string) bool {
	for _, l := range lines {
		if l.S == s && l.M == m {
			return true
		}
	}
	return false
}

func TestMainCommand(t *testing.T) {
	dir := shortDir(t)
	log, exit := filepath.Join(dir, "out.log"), filepath.Join(dir, "exit.json")
	work := t.TempDir()
	cmd, stderr := agentCmd(t, "--listen", "unix:"+filepath.Join(dir, "a.sock"), "--log", log, "--exit-file", exit,
		"--workdir", work, "--setup", "echo setup > made-by-setup",
		"--", "sh", "-c", `echo "one $PORT"; echo two >&2; printf 'no newline'; cat made-by-setup; exit 3`)
	cmd.Env = append(cmd.Env, "PORT=8080")
	if code := exitCode(t, cmd, stderr); code != 3 {
		t.Errorf("agent exit code %d, want 3 (stderr %s)", code, stderr)
	}
	ef := readExitFile(t, exit)
	if *ef.ExitCode != 3 || ef.Reason != "exited with code 3" {
		t.Errorf("exit file %+v, want code 3, exited with code 3", ef)
	}
	lines := readLog(t, log)
	for _, want := range []logLine{{S: "stdout", M: "one 8080"}, {S: "stderr", M: "two"}, {S: "stdout", M: "no newlinesetup"}} {
		if !hasLine(lines, want.S, want.M) {
			t.Errorf("log lacks %s line %q: %+v", want.S, want.M, lines)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "a.sock")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket left behind: %v", err)
	}
}

// TestMainMakesWorkdir: a working directory that does not exist (an image
// without the guest's default /root) is made, and COMMAND runs in it.
func TestMainMakesWorkdir(t *testing.T) {
	dir := shortDir(t)
	exit := filepath.Join(dir, "exit.json")
	work := filepath.Join(t.TempDir(), "not", "yet")
	cmd, stderr := agentCmd(t, "--listen", "unix:"+filepath.Join(dir, "a.sock"), "--exit-file", exit,
		"--workdir", work, "--", "sh", "-c", "pwd > here")
	if code := exitCode(t, cmd, stderr); code != 0 {
		t.Fatalf("agent exit code %d, want 0 (stderr %s)", code, stderr)
	}
	b, err := os.ReadFile(filepath.Join(work, "here"))
	if err != nil || strings.TrimSpace(string(b)) != work {
		t.Errorf("COMMAND ran in %q (%v), want %s", b, err, work)
	}
}

func TestMainSetupFails(t *testing.T) {
	dir := shortDir(t)
	exit := filepath.Join(dir, "exit.json")
	marker := filepath.Join(dir, "command-ran")
	cmd, stderr := agentCmd(t, "--listen", "unix:"+filepath.Join(dir, "a.sock"), "--exit-file", exit,
		"--setup", "true", "--setup", "echo failing; exit 4", "--", "touch", marker)
	if code := exitCode(t, cmd, stderr); code != 4 {
		t.Errorf("agent exit code %d, want 4", code)
	}
	ef := readExitFile(t, exit)
	if *ef.ExitCode != 4 || !strings.Contains(ef.Reason, "setup hook 2") || !strings.Contains(ef.Reason, "echo failing; exit 4") {
		t.Errorf("exit file %+v, want code 4 and a reason naming hook 2", ef)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("COMMAND ran after a failed hook")
	}
}

func TestMainSignalForwarded(t *testing.T) {
	dir := shortDir(t)
	log, exit, sock := filepath.Join(dir, "out.log"), filepath.Join(dir, "exit.json"), filepath.Join(dir, "a.sock")
	fifo := filepath.Join(dir, "ready")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// A stale socket file from an earlier agent is replaced.
	stale, err := (&net.ListenConfig{}).Listen(t.Context(), "unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	stale.Close()

	cmd, stderr := agentCmd(t, "--listen", "unix:"+sock, "--log", log, "--exit-file", exit, "--",
		"sh", "-c", `trap 'echo trapped; exit 0' TERM; echo ready > `+fifo+`; while :; do sleep 1; done`)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The command opens the fifo only once it runs with its trap set.
	if b, err := os.ReadFile(fifo); err != nil || string(b) != "ready\n" {
		cmd.Process.Kill()
		t.Fatalf("fifo: %q, %v", b, err)
	}
	c := agent.NewClient(agent.UnixDialer(sock))
	defer c.Close()
	if info, err := c.Info(t.Context()); err != nil || info.PID != cmd.Process.Pid {
		t.Errorf("Info over the agent's socket = %+v, %v; want pid %d", info, err, cmd.Process.Pid)
	}
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode: %v, %v; want 0600", fi.Mode(), err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("agent exit code %d (%v), want 0 from the trap (stderr %s)", code, err, stderr)
	}
	if lines := readLog(t, log); !hasLine(lines, "stdout", "trapped") {
		t.Errorf("log lacks the trap's line: %+v", lines)
	}
	if ef := readExitFile(t, exit); *ef.ExitCode != 0 {
		t.Errorf("exit file %+v, want code 0", ef)
	}
}

func TestMainKilledBySignal(t *testing.T) {
	dir := shortDir(t)
	exit := filepath.Join(dir, "exit.json")
	cmd, stderr := agentCmd(t, "--listen", "unix:"+filepath.Join(dir, "a.sock"), "--exit-file", exit, "--", "sh", "-c", "kill -9 $$")
	if code := exitCode(t, cmd, stderr); code != 137 {
		t.Errorf("agent exit code %d, want 137", code)
	}
	if ef := readExitFile(t, exit); *ef.ExitCode != 137 || ef.Reason != "killed by signal 9" {
		t.Errorf("exit file %+v, want 137, killed by signal 9", ef)
	}
}

func TestMainUsage(t *testing.T) {
	dir := shortDir(t)
	live := filepath.Join(dir, "live.sock")
	ln, err := net.Listen("unix", live)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	notSock := filepath.Join(dir, "file")
	os.WriteFile(notSock, []byte("keep"), 0o600)
	tests := []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "--listen is required"},
		{[]string{"--bogus"}, 2, "bogus"},
		{[]string{"--listen", "tcp:1.2.3.4:5"}, 1, "unknown scheme"},
		{[]string{"--listen", "vsock:x"}, 1, "decimal port"},
		{[]string{"--listen", "unix:" + live}, 1, "another process"},
		{[]string{"--listen", "unix:" + notSock}, 1, "not a socket"},
		{[]string{"--listen", "unix:" + filepath.Join(dir, "a.sock"), "/nonexistent/prog"}, 127, "could not start"},
	}
	for _, tt := range tests {
		cmd, stderr := agentCmd(t, tt.args...)
		if code := exitCode(t, cmd, stderr); code != tt.code || !strings.Contains(stderr.String(), tt.want) {
			t.Errorf("agent %q: exit %d, stderr %q; want %d and %q", tt.args, code, stderr, tt.code, tt.want)
		}
	}
	if b, _ := os.ReadFile(notSock); string(b) != "keep" {
		t.Error("a file that is not a socket was removed")
	}
}

// TestMainReapsOrphans runs the agent as PID 1 of a new PID namespace,
// where orphans are reparented to it: with a /proc of that namespace, and
// with the host's (as the process driver runs it), where /proc's pids are
// not the namespace's.
func TestMainReapsOrphans(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for a PID namespace")
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("needs unshare")
	}
	for _, proc := range []string{"--mount-proc", "--mount"} {
		t.Run(proc, func(t *testing.T) {
			dir := shortDir(t)
			exit := filepath.Join(dir, "exit.json")
			// The subshell leaves an orphan and prints its pid; the
			// command waits (bounded) for the orphan to vanish, which it
			// only does when reaped (kill -0 succeeds on a zombie).
			script := `pid=$( (sleep 0.01 >/dev/null & echo $!) ); i=0
while [ $i -lt 500 ]; do
  kill -0 $pid 2>/dev/null || exit 0
  i=$((i+1)); sleep 0.02
done
exit 1`
			cmd := exec.Command(unshare, "--pid", "--fork", proc, os.Args[0],
				"--listen", "unix:"+filepath.Join(dir, "a.sock"), "--exit-file", exit, "--", "sh", "-c", script)
			cmd.Env = append(os.Environ(), "BERTH_AGENT_TEST_MODE=main")
			out, err := cmd.CombinedOutput()
			if err != nil && strings.Contains(string(out), "unshare failed") {
				t.Skipf("no PID namespace here: %s", out)
			}
			if err != nil {
				t.Errorf("agent as PID 1: %v\n%s", err, out)
			}
			if ef := readExitFile(t, exit); *ef.ExitCode != 0 {
				t.Errorf("exit file %+v, want 0: the orphan was not reaped", ef)
			}
		})
	}
}
