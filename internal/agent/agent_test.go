//go:build linux

package agent_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/berth-dev/berth/internal/agent"
)

// TestMain doubles as two helper processes, chosen by environment: the
// agent itself (the berth binary's `agent` mode) and a child command that
// needs exact control over its writes.
func TestMain(m *testing.M) {
	switch os.Getenv("BERTH_AGENT_TEST_MODE") {
	case "main":
		os.Exit(agent.Main(context.Background(), os.Args[1:], os.Stderr))
	case "interleave":
		interleaveChild()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// interleaveChild alternates writes to stdout and stderr, each after the
// agent has drained the previous one from its pipe, so that write order is
// also the order the agent reads in.
func interleaveChild() {
	for i, s := range []string{"1 out\n", "2 err\n", "3 out\n", "4 err\n", "5 out\n"} {
		fd := 1 + i%2
		syscall.Write(fd, []byte(s))
		for range 100000 { // bounded; the agent drains within microseconds
			var n int32
			_, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.TIOCINQ, uintptr(unsafe.Pointer(&n)))
			if e != 0 || n == 0 {
				break
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
}

// shortDir returns a temporary directory short enough for socket paths
// (t.TempDir() can exceed the 108-byte limit).
func shortDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ag")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// serve starts a Server on a unix socket and returns a Client for it and
// the socket path.
func serve(t testing.TB, o agent.Options) (*agent.Client, string) {
	t.Helper()
	sock := filepath.Join(shortDir(t), "a.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := agent.NewServer(o)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	})
	c := agent.NewClient(agent.UnixDialer(sock))
	t.Cleanup(c.Close)
	return c, sock
}

func TestExec(t *testing.T) {
	c, _ := serve(t, agent.Options{})
	dir := t.TempDir()
	tests := []struct {
		name string
		req  agent.ExecRequest
		want agent.ExecResult
	}{
		{"exit code", agent.ExecRequest{Argv: []string{"sh", "-c", "exit 3"}}, agent.ExecResult{ExitCode: 3}},
		{"success", agent.ExecRequest{Command: "true"}, agent.ExecResult{}},
		// Output's order for racing writes is TestExecInterleaved's business.
		{"streams", agent.ExecRequest{Command: "echo out; echo err >&2"},
			agent.ExecResult{Stdout: "out\n", Stderr: "err\n"}},
		{"stdin bytes", agent.ExecRequest{Argv: []string{"cat"}, Stdin: "a\x00\xff\n"},
			agent.ExecResult{Stdout: "a\x00\xff\n", Output: "a\x00\xff\n"}},
		{"env", agent.ExecRequest{Command: `printf %s "$FOO"`, Env: map[string]string{"FOO": "bar baz"}},
			agent.ExecResult{Stdout: "bar baz", Output: "bar baz"}},
		{"cwd", agent.ExecRequest{Argv: []string{"pwd"}, Cwd: dir},
			agent.ExecResult{Stdout: dir + "\n", Output: dir + "\n"}},
		{"signal", agent.ExecRequest{Command: "kill -9 $$"}, agent.ExecResult{ExitCode: 137, Signal: "SIGKILL"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := c.Exec(t.Context(), tt.req)
			if err != nil {
				t.Fatal(err)
			}
			got.DurationMS = 0
			if tt.name == "streams" {
				if got.Output != "out\nerr\n" && got.Output != "err\nout\n" {
					t.Errorf("output %q, want both lines", got.Output)
				}
				got.Output = ""
			}
			if got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestExecInterleaved(t *testing.T) {
	c, _ := serve(t, agent.Options{})
	res, err := c.Exec(t.Context(), agent.ExecRequest{
		Argv: []string{os.Args[0]},
		Env:  map[string]string{"BERTH_AGENT_TEST_MODE": "interleave"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := "1 out\n2 err\n3 out\n4 err\n5 out\n"; res.Output != want {
		t.Errorf("output %q, want %q", res.Output, want)
	}
	if want := "1 out\n3 out\n5 out\n"; res.Stdout != want {
		t.Errorf("stdout %q, want %q", res.Stdout, want)
	}
	if want := "2 err\n4 err\n"; res.Stderr != want {
		t.Errorf("stderr %q, want %q", res.Stderr, want)
	}
}

// gone waits until pid no longer runs (it does not exist, or is a zombie
// that its new parent has not reaped yet).
func gone(t *testing.T, pid int) {
	t.Helper()
	for range 1000 {
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return
		}
		if i := bytes.LastIndexByte(stat, ')'); i >= 0 && bytes.HasPrefix(stat[i+1:], []byte(" Z")) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Errorf("process %d still runs", pid)
	syscall.Kill(pid, syscall.SIGKILL)
}

func TestExecTimeoutKillsProcessGroup(t *testing.T) {
	c, _ := serve(t, agent.Options{})
	// The shell waits for its grandchild; only killing the group ends both.
	res, err := c.Exec(t.Context(), agent.ExecRequest{
		Command:   "sleep 100 & echo $!; wait",
		TimeoutMS: 500,
	})
	if err != nil {
		t.Fatal(err)
	}
	if !res.TimedOut || res.ExitCode != agent.TimeoutExitCode {
		t.Errorf("timed_out %v exit %d, want true %d", res.TimedOut, res.ExitCode, agent.TimeoutExitCode)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(res.Stdout))
	if err != nil {
		t.Fatalf("grandchild pid not printed: %q", res.Stdout)
	}
	gone(t, pid)
}

func TestExecOutputCap(t *testing.T) {
	c, _ := serve(t, agent.Options{})
	res, err := c.Exec(t.Context(), agent.ExecRequest{
		// Far more than a pipe holds: the command must be drained, not blocked.
		Command:   "head -c 1000000 /dev/zero; echo done >&2",
		MaxOutput: 1000,
	})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Truncated || len(res.Stdout) != 1000 || res.Stderr != "" || len(res.Output) != 1000 || res.ExitCode != 0 {
		t.Errorf("truncated %v, %d stdout bytes, stderr %q, %d output bytes, exit %d; want true, 1000, empty, 1000, 0",
			res.Truncated, len(res.Stdout), res.Stderr, len(res.Output), res.ExitCode)
	}
}

func TestExecErrors(t *testing.T) {
	c, _ := serve(t, agent.Options{})
	tests := []struct {
		name   string
		req    agent.ExecRequest
		status int
	}{
		{"nothing to run", agent.ExecRequest{}, 400},
		{"both", agent.ExecRequest{Argv: []string{"true"}, Command: "true"}, 400},
		{"negative timeout", agent.ExecRequest{Command: "true", TimeoutMS: -1}, 400},
		{"bad env", agent.ExecRequest{Command: "true", Env: map[string]string{"A=B": "c"}}, 400},
		{"NUL", agent.ExecRequest{Argv: []string{"echo", "a\x00b"}}, 400},
		{"not found", agent.ExecRequest{Argv: []string{"/nonexistent/prog"}}, 422},
		{"bad cwd", agent.ExecRequest{Command: "true", Cwd: "/nonexistent/dir"}, 422},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.Exec(t.Context(), tt.req)
			var ae *agent.Error
			if !errors.As(err, &ae) || ae.Status != tt.status || ae.Message == "" {
				t.Errorf("got %v, want an *agent.Error with status %d", err, tt.status)
			}
		})
	}
}

// notifyWriter collects output and closes seen once it contains want.
type notifyWriter struct {
	buf  bytes.Buffer
	want string
	seen chan struct{}
}

func (w *notifyWriter) Write(p []byte) (int, error) {
	w.buf.Write(p)
	if w.seen != nil && strings.Contains(w.buf.String(), w.want) {
		close(w.seen)
		w.seen = nil
	}
	return len(p), nil
}

func TestExecStream(t *testing.T) {
	c, _ := serve(t, agent.Options{})
	seen := make(chan struct{})
	stdout := &notifyWriter{want: "ready\n", seen: seen}
	var stderr bytes.Buffer
	stdinR, stdinW := io.Pipe()
	go func() {
		// The command waits for this line, so "ready" must have arrived
		// while it was still running.
		<-seen
		stdinW.Write([]byte("hello\n"))
		stdinW.Close()
	}()
	code, err := c.ExecStream(t.Context(), agent.ExecRequest{
		Command: `echo ready; read line; echo "got $line" >&2; cat; exit 5`,
	}, stdinR, stdout, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if code != 5 || stdout.buf.String() != "ready\n" || stderr.String() != "got hello\n" {
		t.Errorf("exit %d, stdout %q, stderr %q; want 5, %q, %q", code, stdout.buf.String(), stderr.String(), "ready\n", "got hello\n")
	}

	// Inline stdin, and a command that cannot start.
	var out bytes.Buffer
	code, err = c.ExecStream(t.Context(), agent.ExecRequest{Argv: []string{"cat"}, Stdin: "inline\n"}, nil, &out, nil)
	if err != nil || code != 0 || out.String() != "inline\n" {
		t.Errorf("inline stdin: exit %d, err %v, stdout %q; want 0, nil, %q", code, err, out.String(), "inline\n")
	}
	_, err = c.ExecStream(t.Context(), agent.ExecRequest{Argv: []string{"/nonexistent/prog"}}, nil, nil, nil)
	if ae := (*agent.Error)(nil); !errors.As(err, &ae) || ae.Status != 422 {
		t.Errorf("not found: got %v, want *agent.Error 422", err)
	}
	_, err = c.ExecStream(t.Context(), agent.ExecRequest{}, nil, nil, nil)
	if ae := (*agent.Error)(nil); !errors.As(err, &ae) || ae.Status != 400 {
		t.Errorf("nothing to run: got %v, want *agent.Error 400", err)
	}
}

func TestExecStreamTimeout(t *testing.T) {
	c, _ := serve(t, agent.Options{})
	code, err := c.ExecStream(t.Context(), agent.ExecRequest{Command: "exec sleep 100", TimeoutMS: 200}, nil, nil, nil)
	if err != nil || code != agent.TimeoutExitCode {
		t.Errorf("got %d, %v; want %d, nil", code, err, agent.TimeoutExitCode)
	}
}

func TestExecStreamDisconnectKills(t *testing.T) {
	c, _ := serve(t, agent.Options{})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	seen := make(chan struct{})
	stdout := &notifyWriter{want: "\n", seen: seen}
	go func() {
		<-seen
		cancel()
	}()
	_, err := c.ExecStream(ctx, agent.ExecRequest{Command: "echo $$; exec sleep 100"}, nil, stdout, nil)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("ExecStream: %v, want context.Canceled", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(stdout.buf.String()))
	if err != nil {
		t.Fatalf("pid not printed: %q", stdout.buf.String())
	}
	gone(t, pid)
}

// readUntil reads r until the output so far contains want.
func readUntil(t *testing.T, r *bufio.Reader, want string) string {
	t.Helper()
	var got strings.Builder
	for !strings.Contains(got.String(), want) {
		b, err := r.ReadByte()
		if err != nil {
			t.Fatalf("reading terminal: %v; output so far %q, want %q", err, got.String(), want)
		}
		got.WriteByte(b)
	}
	return got.String()
}

func TestPTY(t *testing.T) {
	c, _ := serve(t, agent.Options{})
	s, err := c.PTY(t.Context(), agent.PTYRequest{
		Command: `tty; stty size; read x; stty size; echo "TERM=$TERM"; exit 7`,
		Cols:    100, Rows: 30,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r := bufio.NewReader(s)
	first := readUntil(t, r, "30 100")
	if !strings.Contains(first, "/dev/pts/") {
		t.Errorf("tty printed %q, want a /dev/pts path", first)
	}
	if err := s.Resize(120, 40); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write([]byte("\n")); err != nil {
		t.Fatal(err)
	}
	rest, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(rest), "40 120") || !strings.Contains(string(rest), "TERM=xterm-256color") {
		t.Errorf("after resize the terminal printed %q, want 40 120 and TERM=xterm-256color", rest)
	}
	if code, err := s.Wait(); code != 7 || err != nil {
		t.Errorf("Wait = %d, %v; want 7, nil", code, err)
	}
}

func TestPTYCloseKills(t *testing.T) {
	c, _ := serve(t, agent.Options{})
	s, err := c.PTY(t.Context(), agent.PTYRequest{Command: "echo pid=$$; exec sleep 100"})
	if err != nil {
		t.Fatal(err)
	}
	out := readUntil(t, bufio.NewReader(s), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(out), "pid=")))
	if err != nil {
		t.Fatalf("pid not printed: %q", out)
	}
	s.Close()
	gone(t, pid)
}

func TestFiles(t *testing.T) {
	c, _ := serve(t, agent.Options{})
	ctx := t.Context()
	dir := t.TempDir()
	p := filepath.Join(dir, "f.txt")

	fi, err := c.WriteFile(ctx, p, strings.NewReader("hello world"), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size != 11 || fi.Perm() != 0o600 || fi.Type != "file" || fi.Name != "f.txt" {
		t.Errorf("WriteFile info %+v, want an 11-byte 0600 file f.txt", fi)
	}
	// Replacing renames a new file over the old one: a reader holding the
	// old one open keeps reading it whole, and the mode carries over.
	old, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if _, err := c.WriteFile(ctx, p, strings.NewReader("new content"), 0); err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(old); string(b) != "hello world" {
		t.Errorf("old reader sees %q, want the old content", b)
	}
	if got, err := c.ReadFile(ctx, p); err != nil || string(got) != "new content" {
		t.Errorf("ReadFile = %q, %v", got, err)
	}
	if got, err := c.ReadFileRange(ctx, p, 4, 3); err != nil || string(got) != "con" {
		t.Errorf("ReadFileRange(4, 3) = %q, %v; want con", got, err)
	}
	if got, err := c.ReadFileRange(ctx, p, 100, -1); err != nil || len(got) != 0 {
		t.Errorf("ReadFileRange past EOF = %q, %v; want empty", got, err)
	}
	if st, err := c.Stat(ctx, p); err != nil || st.Perm() != 0o600 || st.Size != 11 {
		t.Errorf("Stat = %+v, %v; want mode 0600 kept, size 11", st, err)
	}

	if _, err := c.Mkdir(ctx, filepath.Join(dir, "a/b"), 0, false); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Mkdir without parents: %v, want not exist", err)
	}
	if fi, err := c.Mkdir(ctx, filepath.Join(dir, "a/b"), 0o700, true); err != nil || fi.Type != "dir" || fi.Perm() != 0o700 {
		t.Errorf("Mkdir parents = %+v, %v", fi, err)
	}
	if _, err := c.Mkdir(ctx, filepath.Join(dir, "a/b"), 0, false); !errors.Is(err, fs.ErrExist) {
		t.Errorf("Mkdir existing: %v, want exist", err)
	}
	if err := os.Symlink("f.txt", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	ents, err := c.List(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name+":"+e.Type+":"+e.LinkTarget)
	}
	if got, want := strings.Join(names, " "), "a:dir: f.txt:file: link:symlink:f.txt"; got != want {
		t.Errorf("List = %s, want %s", got, want)
	}
	if leftovers, _ := filepath.Glob(filepath.Join(dir, ".*tmp*")); len(leftovers) > 0 {
		t.Errorf("temp files left: %v", leftovers)
	}

	if err := c.Remove(ctx, filepath.Join(dir, "a"), false); !errors.Is(err, fs.ErrExist) {
		t.Errorf("Remove non-empty dir: %v, want a conflict", err)
	}
	if err := c.Remove(ctx, filepath.Join(dir, "a"), true); err != nil {
		t.Errorf("Remove recursive: %v", err)
	}
	if err := c.Remove(ctx, p, false); err != nil {
		t.Errorf("Remove file: %v", err)
	}
	if _, err := c.ReadFile(ctx, p); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadFile removed: %v, want not exist", err)
	}
	if _, err := c.Stat(ctx, "relative/path"); err == nil || !strings.Contains(err.Error(), "not absolute") {
		t.Errorf("Stat relative: %v, want not absolute", err)
	}
	if _, err := c.ReadFile(ctx, dir); err == nil || !strings.Contains(err.Error(), "is a directory") {
		t.Errorf("ReadFile dir: %v, want is a directory", err)
	}
}

func TestFilesRoot(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "root")
	os.Mkdir(root, 0o755)
	os.WriteFile(filepath.Join(base, "secret"), []byte("s3cret"), 0o644)
	os.WriteFile(filepath.Join(root, "ok"), []byte("fine"), 0o644)
	os.Symlink("../secret", filepath.Join(root, "esc"))
	os.Symlink(filepath.Join(base, "secret"), filepath.Join(root, "abs"))
	os.Symlink(base, filepath.Join(root, "escdir"))
	c, _ := serve(t, agent.Options{Root: root})
	ctx := t.Context()

	if b, err := c.ReadFile(ctx, "/ok"); err != nil || string(b) != "fine" {
		t.Errorf("ReadFile /ok = %q, %v", b, err)
	}
	if _, err := c.WriteFile(ctx, "/sub/../new", strings.NewReader("x"), 0); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("WriteFile through a missing dir: %v, want not exist", err)
	}
	if _, err := c.WriteFile(ctx, "/new", strings.NewReader("x"), 0); err != nil {
		t.Errorf("WriteFile /new: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(root, "new")); err != nil || string(b) != "x" {
		t.Errorf("/new landed as %q, %v; want it inside the root", b, err)
	}
	refused := []struct {
		name string
		do   func() error
	}{
		{"read ..", func() error { _, err := c.ReadFile(ctx, "/../secret"); return err }},
		{"read a/../..", func() error { _, err := c.ReadFile(ctx, "/ok/../../secret"); return err }},
		{"read symlink", func() error { _, err := c.ReadFile(ctx, "/esc"); return err }},
		{"read absolute symlink", func() error { _, err := c.ReadFile(ctx, "/abs"); return err }},
		{"write through symlinked dir", func() error {
			_, err := c.WriteFile(ctx, "/escdir/planted", strings.NewReader("x"), 0)
			return err
		}},
		{"list symlinked dir", func() error { _, err := c.List(ctx, "/escdir"); return err }},
		{"mkdir ..", func() error { _, err := c.Mkdir(ctx, "/../made", 0, false); return err }},
		{"remove ..", func() error { return c.Remove(ctx, "/../secret", false) }},
	}
	for _, tt := range refused {
		if err := tt.do(); !errors.Is(err, fs.ErrPermission) {
			t.Errorf("%s: %v, want refused with 403", tt.name, err)
		}
	}
	if _, err := os.Stat(filepath.Join(base, "planted")); err == nil {
		t.Error("a write escaped the root")
	}
	if _, err := os.Stat(filepath.Join(base, "secret")); err != nil {
		t.Errorf("the file outside the root: %v", err)
	}
	// The link itself is inside the root and can be described.
	if fi, err := c.Stat(ctx, "/esc"); err != nil || fi.Type != "symlink" {
		t.Errorf("Stat /esc = %+v, %v; want the symlink", fi, err)
	}
	if err := c.Remove(ctx, "/", true); err == nil {
		t.Error("Remove / succeeded")
	}
}

// rawClient is an HTTP client on the socket, for requests the Client
// would never send.
func rawClient(sock string) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return agent.UnixDialer(sock)(ctx)
		},
	}}
}

func TestProtocol(t *testing.T) {
	c, sock := serve(t, agent.Options{Version: "v9.9.9"})
	info, err := c.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if info.Protocol != 1 || info.Version != "v9.9.9" || info.PID != os.Getpid() || info.StartedAt.IsZero() || info.Hostname == "" {
		t.Errorf("Info = %+v", info)
	}
	hc := rawClient(sock)
	tests := []struct {
		method, path, body string
		status             int
	}{
		{"GET", "/v1/nope", "", 404},
		{"GET", "/v2/info", "", 404},
		{"POST", "/v1/exec", "{bad", 400},
		{"POST", "/v1/exec", "", 400},
		{"POST", "/v1/exec", `{"command":"true"} {}`, 400},
		{"POST", "/v1/exec", `{"argv":"notalist"}`, 400},
		{"POST", "/v1/exec", `{"command":"true","encoding":"rot13"}`, 400},
		{"POST", "/v1/exec", `{"command":"cat","stdin":"!!","encoding":"base64"}`, 400},
		{"GET", "/v1/exec", "", 405},
		{"POST", "/v1/files/mkdir", `[1]`, 400},
		{"GET", "/v1/files?path=/tmp&offset=-1", "", 400},
		{"GET", "/v1/files?path=", "", 400},
		{"DELETE", "/v1/files?path=/tmp/x&recursive=maybe", "", 400},
		{"PUT", "/v1/files?path=/tmp/x&mode=999", "", 400},
		{"GET", "/v1/exec/stream", "", 426},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path+" "+tt.body, func(t *testing.T) {
			req, _ := http.NewRequestWithContext(t.Context(), tt.method, "http://agent"+tt.path, strings.NewReader(tt.body))
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != tt.status {
				t.Errorf("status %d, want %d", resp.StatusCode, tt.status)
			}
			if tt.status == 426 {
				return // the websocket library answers this one
			}
			var body struct{ Error string }
			if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || body.Error == "" {
				t.Errorf("body is not a JSON error: %v %+v", err, body)
			}
		})
	}
}

func TestShutdownKillsSessions(t *testing.T) {
	sock := filepath.Join(shortDir(t), "a.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := agent.NewServer(agent.Options{})
	go srv.Serve(ln)
	c := agent.NewClient(agent.UnixDialer(sock))
	defer c.Close()
	seen := make(chan struct{})
	stdout := &notifyWriter{want: "\n", seen: seen}
	type result struct {
		code int
		err  error
	}
	res := make(chan result, 1)
	go func() {
		code, err := c.ExecStream(t.Context(), agent.ExecRequest{Command: "echo $$; exec sleep 100"}, nil, stdout, nil)
		res <- result{code, err}
	}()
	<-seen
	ctx, cancel := context.WithCancel(t.Context())
	cancel() // no grace: Shutdown must kill at once
	if err := srv.Shutdown(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Shutdown = %v, want context.Canceled", err)
	}
	// The session either ends early or reports the SIGKILL.
	if r := <-res; r.err == nil && r.code != 137 {
		t.Errorf("ExecStream after Shutdown = %d, nil; want an error or 137", r.code)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(stdout.buf.String()))
	gone(t, pid)
}

func BenchmarkExecTrue(b *testing.B) {
	c, _ := serve(b, agent.Options{})
	ctx := context.Background()
	req := agent.ExecRequest{Argv: []string{"true"}}
	if _, err := c.Exec(ctx, req); err != nil { // warm the connection
		b.Fatal(err)
	}
	for b.Loop() {
		res, err := c.Exec(ctx, req)
		if err != nil || res.ExitCode != 0 {
			b.Fatal(res, err)
		}
	}
}

// BenchmarkRunTrueDirect is BenchmarkExecTrue's baseline: the same command
// run by os/exec in the benchmark's own process, without the agent.
func BenchmarkRunTrueDirect(b *testing.B) {
	for b.Loop() {
		if err := exec.Command("true").Run(); err != nil {
			b.Fatal(err)
		}
	}
}
