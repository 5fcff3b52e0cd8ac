package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"

	"github.com/coder/websocket"
	"github.com/google/go-cmp/cmp"

	"github.com/berth-dev/berth/apitype"
)

// vmServer is a real HTTP server on loopback that answers the VM routes of
// the admin API (exec, shell, logs, evict, and the VM lists of /metrics and
// GET /deployments/:id) and records what it was sent.
type vmServer struct {
	*httptest.Server
	recorder

	stdin    []byte // every stdin byte the shell received
	exec     apitype.ExecOutput
	gated    bool // /metrics answers 403, as for a token without view scope
	shellErr string
}

// sandboxStatus is GET /deployments/sandbox: a vm deployment that /metrics
// does not list, so get vms falls back to it.
const sandboxStatus = `{"spec":{"id":"sandbox","routes":[]},"kind":"vm","desired_replicas":1,"ready":1,"pending":0,"total_in_flight":3,
	"vms":[{"sandbox_id":"sandbox-1f2e","addr":"172.16.0.2:8080","in_flight":3,"healthy":true,"draining":false,"x-future":true}]}`

func newVMServer(t *testing.T) *vmServer {
	t.Helper()
	metrics := readFixture(t, "vms_metrics.json")
	s := &vmServer{exec: apitype.ExecOutput{SandboxID: "web-7f3a", ExitCode: 3, Stdout: "out\n", Stderr: "err\n", Output: "out\nerr\n"}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		gated := s.gated
		s.mu.Unlock()
		switch {
		case gated:
			writeJSON(w, 403, errJSON("token scope does not include view"))
		case r.URL.Query().Get("deployment") == "web":
			writeJSON(w, 200, string(metrics))
		default:
			writeJSON(w, 200, `{"deployments":[],"matched":0}`)
		}
	})
	mux.HandleFunc("GET /deployments/{id}", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("id") != "sandbox" {
			writeJSON(w, 404, errJSON(fmt.Sprintf("no deployment %q", r.PathValue("id"))))
			return
		}
		writeJSON(w, 200, sandboxStatus)
	})
	mux.HandleFunc("POST /deployments/{id}/exec", func(w http.ResponseWriter, r *http.Request) {
		var req apitype.ExecRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			writeJSON(w, 400, errJSON("malformed JSON"))
			return
		}
		if req.Wake != nil && !*req.Wake {
			writeJSON(w, 409, errJSON(`deployment "web" has no running VM (pass wake=true to start one)`))
			return
		}
		s.mu.Lock()
		out := s.exec
		s.mu.Unlock()
		b, _ := json.Marshal(out)
		writeJSON(w, 200, string(b))
	})
	mux.HandleFunc("GET /deployments/{id}/logs", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, "2024-11-29T17:06:40.5Z web-7f3a stdout listening on :8080\n")
		io.WriteString(w, "2024-11-29T17:06:41Z web-91bc stderr warn: slow\n")
		if r.URL.Query().Get("follow") == "true" {
			http.NewResponseController(w).Flush()
			io.WriteString(w, `web-7f3a {"stream":"stdout","text":"GET /"}`+"\n")
		}
	})
	mux.HandleFunc("DELETE /deployments/{id}/vms/{sb}", func(w http.ResponseWriter, r *http.Request) {
		sb := r.PathValue("sb")
		if sb != "web-7f3a" {
			writeJSON(w, 404, errJSON(fmt.Sprintf("no VM %q in deployment %q", sb, r.PathValue("id"))))
			return
		}
		if r.URL.Query().Get("force") == "true" {
			writeJSON(w, 200, `{"sandbox_id":"web-7f3a","outcome":"killed"}`)
			return
		}
		writeJSON(w, 202, `{"sandbox_id":"web-7f3a","outcome":"draining"}`)
	})
	mux.HandleFunc("GET /deployments/{id}/shell", s.shell)
	s.Server = httptest.NewServer(s.record(mux))
	t.Cleanup(s.Close)
	return s
}

// shell speaks the protocol of app-lb.md §2.6 like a PTY in cooked mode:
// it echoes input back as output, and ends with exit code 7 at Ctrl-D.
func (s *vmServer) shell(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Get("wake") == "false" {
		writeJSON(w, 409, errJSON(`deployment "web" has no running VM (pass wake=true to start one)`))
		return
	}
	ws, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer ws.CloseNow()
	ctx := r.Context()
	ws.Write(ctx, websocket.MessageText, []byte(`{"type":"ready","sandbox_id":"web-7f3a"}`))
	for {
		typ, msg, err := ws.Read(ctx)
		if err != nil {
			return
		}
		if typ != websocket.MessageBinary || len(msg) == 0 || msg[0] != 0x01 {
			continue
		}
		in := msg[1:]
		s.mu.Lock()
		s.stdin = append(s.stdin, in...)
		failWith := s.shellErr
		s.mu.Unlock()
		text, _, eof := bytes.Cut(in, []byte{0x04})
		if len(text) > 0 {
			ws.Write(ctx, websocket.MessageBinary, append([]byte{0x02}, text...))
		}
		if eof {
			end := `{"type":"exit","code":7}`
			if failWith != "" {
				end = fmt.Sprintf(`{"type":"error","message":%q}`, failWith)
			}
			ws.Write(ctx, websocket.MessageText, []byte(end))
			ws.Close(websocket.StatusNormalClosure, "")
			return
		}
	}
}

// runVM runs the CLI against srv with stdin.
func runVM(t *testing.T, srv *vmServer, stdin io.Reader, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	e := &env{stdin: stdin, stdout: &out, stderr: &errb, server: srv.URL}
	code := e.run(context.Background(), args)
	return result{out.String(), errb.String(), code}
}

func TestExecExitCode(t *testing.T) {
	srv := newVMServer(t)
	tests := []struct {
		remote, want int
	}{
		{0, 0}, {3, 3}, {255, 255},
		{256, 1}, // os.Exit would make it 0
		{-1, 1},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.remote), func(t *testing.T) {
			srv.mu.Lock()
			srv.exec.ExitCode = tt.remote
			srv.mu.Unlock()
			r := runVM(t, srv, nil, "exec", "web", "--", "ls", "-l")
			if r.code != tt.want || r.stdout != "out\n" || r.stderr != "err\n" {
				t.Errorf("remote exit %d: got exit %d, stdout %q, stderr %q; want exit %d, out\\n, err\\n",
					tt.remote, r.code, r.stdout, r.stderr, tt.want)
			}
		})
	}
}

func TestExecRequest(t *testing.T) {
	srv := newVMServer(t)
	r := runVM(t, srv, nil, "exec", "deployment/web", "--vm", "web-91bc", "--cwd", "/srv",
		"-e", "A=1", "-e", "B=x=y", "--timeout", "5", "--", "echo", "a b", "it's", "$HOME", "NAME=v", "", "if", "-n")
	if r.code != 3 {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	reqs := srv.requests()
	if len(reqs) != 1 || reqs[0].Method != "POST" || reqs[0].URI != "/deployments/web/exec" {
		t.Fatalf("requests %+v, want one POST /deployments/web/exec", reqs)
	}
	want := map[string]any{
		"command":      `echo 'a b' 'it'\''s' '$HOME' 'NAME=v' '' 'if' -n`,
		"cwd":          "/srv",
		"env":          map[string]any{"A": "1", "B": "x=y"},
		"timeout_secs": 5.0,
		"sandbox_id":   "web-91bc",
	}
	if diff := cmp.Diff(want, decodeJSON(t, reqs[0].Body)); diff != "" {
		t.Errorf("body (-want +got):\n%s", diff)
	}
}

// TestShellJoinRoundTrip runs the joined line with the real /bin/sh and
// checks that each argument arrives unchanged.
func TestShellJoinRoundTrip(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh:", err)
	}
	args := []string{"plain", "two words", "it's", `"dq"`, `back\slash`, "$HOME", "`id`", "$(id)",
		"*", "~", "a;b", "a|b", "a&b", "NAME=v", "", "!", "{", "new\nline", "tab\there", "-n", "%s", "ünï"}
	line, err := shellJoin(append([]string{"printf", `%s\0`}, args...))
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(sh, "-c", line).Output()
	if err != nil {
		t.Fatalf("sh -c %q: %v", line, err)
	}
	got := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
	if diff := cmp.Diff(args, got); diff != "" {
		t.Errorf("arguments through sh (-want +got):\n%s\nline: %s", diff, line)
	}
	// A reserved word as the command is a command name, not syntax.
	if line, _ := shellJoin([]string{"if"}); line != "'if'" {
		t.Errorf("shellJoin(if) = %q, want 'if'", line)
	}
	if _, err := shellJoin([]string{"a\x00b"}); err == nil {
		t.Error("a NUL byte was accepted")
	}
}

func TestExecJSON(t *testing.T) {
	srv := newVMServer(t)
	for _, args := range [][]string{
		{"exec", "web", "-o", "json", "--", "false"},
		{"-o", "json", "exec", "web", "--", "false"},
	} {
		r := runVM(t, srv, nil, args...)
		if r.code != 3 || r.stderr != "" {
			t.Errorf("%v: exit %d, stderr %q; want 3 and nothing on stderr", args, r.code, r.stderr)
		}
		want := map[string]any{"sandbox_id": "web-7f3a", "exit_code": 3.0, "stdout": "out\n", "stderr": "err\n", "output": "out\nerr\n"}
		if diff := cmp.Diff(want, decodeJSON(t, r.stdout)); diff != "" {
			t.Errorf("%v: -o json (-want +got):\n%s", args, diff)
		}
	}
}

func TestExecFailures(t *testing.T) {
	srv := newVMServer(t)
	tests := []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"no command", []string{"exec", "web"}, 2, "missing command"},
		{"no id", []string{"exec"}, 2, "missing deployment ID"},
		{"bad env", []string{"exec", "web", "-e", "novalue", "--", "true"}, 2, "want K=V"},
		{"bad timeout", []string{"exec", "web", "--timeout", "4000", "--", "true"}, 2, "--timeout"},
		{"no wake", []string{"exec", "web", "--no-wake", "--", "true"}, 1, "error: deployment \"web\" has no running VM"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runVM(t, srv, nil, tt.args...)
			if r.code != tt.code || !strings.Contains(r.stderr, tt.stderr) {
				t.Errorf("exit %d, stderr %q; want %d and %q", r.code, r.stderr, tt.code, tt.stderr)
			}
		})
	}
	for _, r := range srv.requests() {
		if !strings.Contains(r.Body, `"wake":false`) {
			t.Errorf("a usage error reached the server: %+v", r)
		}
	}
}

func TestShellNonInteractive(t *testing.T) {
	tests := []struct {
		name, input, wantStdin string
	}{
		{"lines", "echo hi\nls\n", "echo hi\nls\n\x04"},
		// After a partial line the first Ctrl-D only submits it.
		{"partial line", "echo hi", "echo hi\x04\x04"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newVMServer(t)
			r := runVM(t, srv, bytes.NewBufferString(tt.input), "shell", "web", "--vm", "web-7f3a", "--cwd", "/srv")
			if r.code != 7 || r.stderr != "" {
				t.Errorf("exit %d, stderr %q; want 7 and nothing", r.code, r.stderr)
			}
			if r.stdout != tt.input {
				t.Errorf("stdout %q, want the echo %q", r.stdout, tt.input)
			}
			srv.mu.Lock()
			stdin := string(srv.stdin)
			srv.mu.Unlock()
			if stdin != tt.wantStdin {
				t.Errorf("server read %q, want %q", stdin, tt.wantStdin)
			}
			reqs := srv.requests()
			if want := "/deployments/web/shell?cwd=%2Fsrv&sandbox_id=web-7f3a"; len(reqs) != 1 || reqs[0].URI != want {
				t.Errorf("requests %+v, want one GET %s (no size: stdin is not a terminal)", reqs, want)
			}
		})
	}
}

func TestShellFailures(t *testing.T) {
	srv := newVMServer(t)
	r := runVM(t, srv, bytes.NewBufferString(""), "shell", "web", "--no-wake")
	if r.code != 1 || !strings.Contains(r.stderr, "error: deployment \"web\" has no running VM") {
		t.Errorf("--no-wake: exit %d, stderr %q; want 1 and the server's message", r.code, r.stderr)
	}
	srv.mu.Lock()
	srv.shellErr = "agent went away"
	srv.mu.Unlock()
	r = runVM(t, srv, bytes.NewBufferString("x\n"), "shell", "web")
	if r.code != 1 || !strings.Contains(r.stderr, "agent went away") {
		t.Errorf("error frame: exit %d, stderr %q; want 1 and the message", r.code, r.stderr)
	}
	for _, args := range [][]string{{"shell"}, {"shell", "a", "b"}, {"shell", "web", "-o", "json"}} {
		if r := runVM(t, srv, nil, args...); r.code != 2 {
			t.Errorf("%v: exit %d, want 2", args, r.code)
		}
	}
}

func TestLogs(t *testing.T) {
	srv := newVMServer(t)
	const backlog = "2024-11-29T17:06:40.5Z web-7f3a stdout listening on :8080\n2024-11-29T17:06:41Z web-91bc stderr warn: slow\n"
	tests := []struct {
		args       []string
		uri, wantd string
	}{
		{[]string{"logs", "web"}, "/deployments/web/logs?follow=false&limit=100", backlog},
		{[]string{"logs", "web", "--limit", "5"}, "/deployments/web/logs?follow=false&limit=5", backlog},
		{[]string{"logs", "-f", "deployment/web"}, "/deployments/web/logs?follow=true&limit=100",
			backlog + `web-7f3a {"stream":"stdout","text":"GET /"}` + "\n"},
	}
	for _, tt := range tests {
		n := len(srv.requests())
		r := runVM(t, srv, nil, tt.args...)
		if r.code != 0 || r.stdout != tt.wantd {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 0 and %q", tt.args, r.code, r.stdout, r.stderr, tt.wantd)
		}
		if reqs := srv.requests(); len(reqs) != n+1 || reqs[n].URI != tt.uri {
			t.Errorf("%v: requests %+v, want GET %s", tt.args, reqs[n:], tt.uri)
		}
	}
	for _, args := range [][]string{{"logs"}, {"logs", "web", "--limit", "-1"}, {"logs", "web", "-o", "yaml"}} {
		if r := runVM(t, srv, nil, args...); r.code != 2 {
			t.Errorf("%v: exit %d, want 2", args, r.code)
		}
	}
}

func TestGetVMs(t *testing.T) {
	srv := newVMServer(t)
	tests := []struct {
		golden string
		args   []string
	}{
		{"get_vms", []string{"get", "vms", "-d", "web"}},
		{"get_vms_wide", []string{"get", "-d", "deployment/web", "vm", "-o", "wide"}},
		// /metrics does not list it: the deployment's status, without uptime and usage.
		{"get_vms_fallback", []string{"get", "vms", "--deployment=sandbox"}},
	}
	for _, tt := range tests {
		t.Run(tt.golden, func(t *testing.T) {
			r := runVM(t, srv, nil, tt.args...)
			if r.code != 0 || r.stderr != "" {
				t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
			}
			checkGolden(t, tt.golden, r.stdout)
		})
	}
	if reqs := srv.requests(); reqs[0].URI != "/metrics?deployment=web" {
		t.Errorf("first request %s, want /metrics?deployment=web", reqs[0].URI)
	}

	t.Run("json", func(t *testing.T) {
		r := runVM(t, srv, nil, "get", "vms", "-d", "web", "-o", "json")
		if r.code != 0 {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
		got := decodeJSON(t, r.stdout).(map[string]any)
		vms := got["vms"].([]any)
		if got["deployment"] != "web" || len(vms) != 3 || len(got["pending_vms"].([]any)) != 1 {
			t.Errorf("-o json: %s", r.stdout)
		}
		if vms[0].(map[string]any)["x-future"] != 1.0 {
			t.Errorf("-o json dropped a field the server sent: %v", vms[0])
		}
	})
	t.Run("metrics forbidden", func(t *testing.T) {
		gated := newVMServer(t)
		gated.gated = true
		r := runVM(t, gated, nil, "get", "vms", "-d", "sandbox")
		if r.code != 0 || !strings.Contains(r.stdout, "sandbox-1f2e") {
			t.Errorf("exit %d, stdout %q, stderr %q; want the VMs from the deployment's status", r.code, r.stdout, r.stderr)
		}
	})
	t.Run("unknown deployment", func(t *testing.T) {
		r := runVM(t, srv, nil, "get", "vms", "-d", "nope")
		if r.code != 1 || r.stderr != "error: no deployment \"nope\"\n" {
			t.Errorf("exit %d, stderr %q; want 1 and the 404", r.code, r.stderr)
		}
	})
	t.Run("usage", func(t *testing.T) {
		for _, args := range [][]string{{"get", "vms"}, {"get", "vms", "x", "-d", "web"}, {"get", "vms", "-d", "web", "--bogus"}} {
			if r := runVM(t, srv, nil, args...); r.code != 2 {
				t.Errorf("%v: exit %d, want 2", args, r.code)
			}
		}
	})
}

func TestDeleteVM(t *testing.T) {
	srv := newVMServer(t)
	tests := []struct {
		args   []string
		code   int
		stdout string
		uri    string
	}{
		{[]string{"delete", "vm", "web-7f3a", "-d", "web"}, 0, "vm/web-7f3a draining\n", "/deployments/web/vms/web-7f3a?force=false"},
		{[]string{"delete", "vm/web-7f3a", "-d", "web", "--force"}, 0, "vm/web-7f3a killed\n", "/deployments/web/vms/web-7f3a?force=true"},
		{[]string{"delete", "-d", "web", "vm", "gone"}, 1, "", "/deployments/web/vms/gone?force=false"},
	}
	for _, tt := range tests {
		n := len(srv.requests())
		r := runVM(t, srv, nil, tt.args...)
		if r.code != tt.code || r.stdout != tt.stdout {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want %d and %q", tt.args, r.code, r.stdout, r.stderr, tt.code, tt.stdout)
		}
		if reqs := srv.requests(); len(reqs) != n+1 || reqs[n].Method != "DELETE" || reqs[n].URI != tt.uri {
			t.Errorf("%v: requests %+v, want DELETE %s", tt.args, reqs[n:], tt.uri)
		}
	}
	n := len(srv.requests())
	for _, args := range [][]string{{"delete", "vm", "web-7f3a"}, {"delete", "vm", "-d", "web"}, {"delete", "vm", "a", "b", "-d", "web"}} {
		if r := runVM(t, srv, nil, args...); r.code != 2 {
			t.Errorf("%v: exit %d, want 2", args, r.code)
		}
	}
	if len(srv.requests()) != n {
		t.Error("a usage error reached the server")
	}
}

func TestAge(t *testing.T) {
	for secs, want := range map[int]string{0: "0s", 45: "45s", 192: "3m12s", 3725: "1h2m", 93000: "1d1h", -5: "0s"} {
		if got := age(secs); got != want {
			t.Errorf("age(%d) = %q, want %q", secs, got, want)
		}
	}
}
