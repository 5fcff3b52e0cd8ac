//go:build linux

package agent_test

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/agent"
)

// waitProcess polls until process id has ended and returns its state.
func waitProcess(t *testing.T, c *agent.Client, id string) agent.ProcessInfo {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		p, err := c.Process(context.Background(), id)
		if err != nil {
			t.Fatalf("Process(%s): %v", id, err)
		}
		if !p.Running {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %s still running: %+v", id, p)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestProcessLifecycle(t *testing.T) {
	state := t.TempDir()
	c, _ := serve(t, agent.Options{StateDir: state, Dir: t.TempDir()})
	ctx := context.Background()
	st, err := c.StartProcess(ctx, agent.ProcessRequest{
		Command: `echo "hello $WHO"; echo oops >&2; i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; exit 3`,
		Env:     map[string]string{"WHO": "world"},
		Tag:     "by-test",
	})
	if err != nil {
		t.Fatal(err)
	}
	if st.ID == "" || st.PID <= 0 {
		t.Fatalf("StartProcess = %+v", st)
	}
	p := waitProcess(t, c, st.ID)
	if p.ExitCode == nil || *p.ExitCode != 3 || p.Signal != "" {
		t.Errorf("exit = %v %q, want 3", p.ExitCode, p.Signal)
	}
	if p.EndedAt == nil || p.EndedAt.Before(p.StartedAt) {
		t.Errorf("ended_at %v, started_at %v", p.EndedAt, p.StartedAt)
	}
	if p.CPUTimeMS == nil || *p.CPUTimeMS < 0 {
		t.Errorf("cpu_time_ms = %v, want measured", p.CPUTimeMS)
	}
	if p.Tag != "by-test" || !strings.Contains(p.Command, "hello") || p.PID != st.PID {
		t.Errorf("info = %+v", p)
	}
	out, size, err := c.ProcessOutput(ctx, st.ID, 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != "hello world\noops\n" || size != int64(len(out)) {
		t.Errorf("output = %q (size %d)", out, size)
	}
	out, _, err = c.ProcessOutput(ctx, st.ID, 6, 5)
	if err != nil || string(out) != "world" {
		t.Errorf("output window = %q, %v; want \"world\"", out, err)
	}
	out, _, err = c.ProcessOutput(ctx, st.ID, 1000, -1)
	if err != nil || len(out) != 0 {
		t.Errorf("output past the end = %q, %v", out, err)
	}
	// The output lives in the state directory.
	if _, err := os.Stat(filepath.Join(state, st.ID+".out")); err != nil {
		t.Errorf("output file: %v", err)
	}
	list, err := c.Processes(ctx)
	if err != nil || len(list) != 1 || list[0].ID != st.ID {
		t.Errorf("Processes = %+v, %v", list, err)
	}
	// Killing an ended process is a no-op that reports it.
	k, err := c.KillProcess(ctx, st.ID, "KILL")
	if err != nil || k.Running || *k.ExitCode != 3 {
		t.Errorf("KillProcess(ended) = %+v, %v", k, err)
	}
}

// TestProcessSurvivesDisconnect starts a process with a request whose
// context and connection end right away; the process keeps running and
// finishes its work.
func TestProcessSurvivesDisconnect(t *testing.T) {
	dir := t.TempDir()
	_, sock := serve(t, agent.Options{StateDir: t.TempDir(), Dir: dir})
	c1 := agent.NewClient(agent.UnixDialer(sock))
	ctx, cancel := context.WithCancel(context.Background())
	st, err := c1.StartProcess(ctx, agent.ProcessRequest{
		Command: `while [ ! -e go ]; do sleep 0.01; done; echo finished > done.txt; echo bye`,
	})
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	c1.Close()

	c2 := agent.NewClient(agent.UnixDialer(sock))
	defer c2.Close()
	p, err := c2.Process(context.Background(), st.ID)
	if err != nil || !p.Running || p.ExitCode != nil || p.CPUTimeMS != nil {
		t.Fatalf("after the client left: %+v, %v", p, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	p = waitProcess(t, c2, st.ID)
	if p.ExitCode == nil || *p.ExitCode != 0 {
		t.Errorf("exit = %v", p.ExitCode)
	}
	b, err := os.ReadFile(filepath.Join(dir, "done.txt"))
	if err != nil || string(b) != "finished\n" {
		t.Errorf("done.txt = %q, %v", b, err)
	}
	out, _, err := c2.ProcessOutput(context.Background(), st.ID, 0, -1)
	if err != nil || string(out) != "bye\n" {
		t.Errorf("output = %q, %v", out, err)
	}
}

func TestProcessKill(t *testing.T) {
	c, _ := serve(t, agent.Options{StateDir: t.TempDir()})
	ctx := context.Background()
	// A child in the same group proves the whole group is signalled.
	st, err := c.StartProcess(ctx, agent.ProcessRequest{Argv: []string{"sh", "-c", "sleep 100 & wait"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.KillProcess(ctx, st.ID, "KILL"); err != nil {
		t.Fatal(err)
	}
	p := waitProcess(t, c, st.ID)
	if p.ExitCode == nil || *p.ExitCode != 128+9 || p.Signal != "SIGKILL" {
		t.Errorf("killed: exit %v signal %q", p.ExitCode, p.Signal)
	}

	st, err = c.StartProcess(ctx, agent.ProcessRequest{Argv: []string{"sleep", "100"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.KillProcess(ctx, st.ID, ""); err != nil {
		t.Fatal(err)
	}
	if p := waitProcess(t, c, st.ID); p.Signal != "SIGTERM" {
		t.Errorf("default signal: %+v", p)
	}
}

func TestProcessErrors(t *testing.T) {
	c, sock := serve(t, agent.Options{StateDir: t.TempDir()})
	ctx := context.Background()
	status := func(err error) int {
		var ae *agent.Error
		if errors.As(err, &ae) {
			return ae.Status
		}
		return 0
	}
	tests := []struct {
		name string
		req  agent.ProcessRequest
		want int
	}{
		{"both", agent.ProcessRequest{Argv: []string{"true"}, Command: "true"}, http.StatusBadRequest},
		{"neither", agent.ProcessRequest{}, http.StatusBadRequest},
		{"NUL", agent.ProcessRequest{Command: "a\x00b"}, http.StatusBadRequest},
		{"bad env", agent.ProcessRequest{Command: "true", Env: map[string]string{"A=B": "c"}}, http.StatusBadRequest},
		{"no such program", agent.ProcessRequest{Argv: []string{"/nonexistent/prog"}}, http.StatusUnprocessableEntity},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.StartProcess(ctx, tt.req)
			if status(err) != tt.want {
				t.Errorf("StartProcess = %v, want status %d", err, tt.want)
			}
		})
	}
	if _, err := c.Process(ctx, "nope"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Process(unknown) = %v", err)
	}
	if _, _, err := c.ProcessOutput(ctx, "nope", 0, -1); status(err) != http.StatusNotFound {
		t.Errorf("ProcessOutput(unknown) = %v", err)
	}
	if _, err := c.KillProcess(ctx, "nope", ""); status(err) != http.StatusNotFound {
		t.Errorf("KillProcess(unknown) = %v", err)
	}
	st, err := c.StartProcess(ctx, agent.ProcessRequest{Command: "true"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.KillProcess(ctx, st.ID, "BOGUS"); status(err) != http.StatusBadRequest {
		t.Errorf("KillProcess(bad signal) = %v", err)
	}
	if _, _, err := c.ProcessOutput(ctx, st.ID, -1, -1); status(err) != http.StatusBadRequest {
		t.Errorf("ProcessOutput(offset -1) = %v", err)
	}
	// Raw requests for paths the client never builds.
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	defer hc.CloseIdleConnections()
	for _, tc := range []struct {
		method, path string
		want         int
	}{
		{"GET", "/v1/processes/" + st.ID + "/bogus", http.StatusNotFound},
		{"DELETE", "/v1/processes/" + st.ID + "/output", http.StatusMethodNotAllowed},
		{"PUT", "/v1/processes", http.StatusMethodNotAllowed},
		{"POST", "/v1/processes/", http.StatusMethodNotAllowed},
	} {
		req, _ := http.NewRequest(tc.method, "http://agent"+tc.path, nil)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s %s = %d, want %d", tc.method, tc.path, resp.StatusCode, tc.want)
		}
	}
}

// TestProcessShutdown: Shutdown stops background processes politely.
func TestProcessShutdown(t *testing.T) {
	sock := filepath.Join(shortDir(t), "a.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := agent.NewServer(agent.Options{StateDir: t.TempDir()})
	go srv.Serve(ln)
	c := agent.NewClient(agent.UnixDialer(sock))
	defer c.Close()
	st, err := c.StartProcess(context.Background(), agent.ProcessRequest{Argv: []string{"sleep", "100"}})
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	// The group is gone: signal 0 to it fails.
	if err := syscall.Kill(-st.PID, 0); err == nil {
		t.Errorf("process group %d survived Shutdown", st.PID)
	}
}
