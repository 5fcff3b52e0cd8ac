package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/google/go-cmp/cmp"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/client"
)

func TestExec(t *testing.T) {
	s := newServer(t, reply{status: 200, body: `{"sandbox_id":"sb-1","exit_code":3,"stdout":"out\n","stderr":"err\n","output":"out\nerr\n"}`})
	c := newClient(t, s, client.WithToken("applb_tok"))
	timeout := 5
	got, err := c.Exec(context.Background(), "web app", apitype.ExecRequest{
		Command: "ls -l", Cwd: "/srv", Env: map[string]string{"A": "1"},
		TimeoutSecs: &timeout, Wake: new(false), SandboxID: "sb-1",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := &apitype.ExecOutput{SandboxID: "sb-1", ExitCode: 3, Stdout: "out\n", Stderr: "err\n", Output: "out\nerr\n"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("reply (-want +got):\n%s", diff)
	}
	wantReq := []seen{{
		Method: "POST", URI: "/deployments/web%20app/exec", ContentType: "application/json",
		Accept: "application/json", Auth: "Bearer applb_tok",
		Body: `{"command":"ls -l","cwd":"/srv","env":{"A":"1"},"timeout_secs":5,"wake":false,"sandbox_id":"sb-1"}`,
	}}
	if diff := cmp.Diff(wantReq, s.requests()); diff != "" {
		t.Errorf("request (-want +got):\n%s", diff)
	}
}

func TestExecErrors(t *testing.T) {
	s := newServer(t, reply{status: 409, body: `{"error":"deployment \"web\" has no running VM (pass wake=true to start one)"}`})
	c := newClient(t, s)
	ctx := context.Background()
	_, err := c.Exec(ctx, "web", apitype.ExecRequest{Command: "true", Wake: new(false)})
	if !client.IsConflict(err) || !strings.Contains(err.Error(), "no running VM") {
		t.Errorf("409: got %v, want a conflict with the server's message", err)
	}
	for _, tt := range []struct {
		id  string
		req apitype.ExecRequest
	}{
		{"", apitype.ExecRequest{Command: "true"}},
		{"web", apitype.ExecRequest{Command: " \t"}},
	} {
		if _, err := c.Exec(ctx, tt.id, tt.req); err == nil || client.StatusCode(err) != 0 {
			t.Errorf("Exec(%q, %+v): got %v, want a client-side error", tt.id, tt.req, err)
		}
	}
	if n := len(s.requests()); n != 1 {
		t.Errorf("server saw %d requests, want 1 (invalid calls must not be sent)", n)
	}
}

// TestExecOutlivesClientTimeout checks that Exec is not cut off by the
// HTTP client's timeout, which is sized for quick admin calls while a
// command may run for an hour. A 1 ns timeout fails any ordinary request.
func TestExecOutlivesClientTimeout(t *testing.T) {
	s := newServer(t, reply{status: 200, body: `{"sandbox_id":"sb-1","exit_code":0,"stdout":"","stderr":"","output":""}`})
	c := newClient(t, s, client.WithHTTPClient(&http.Client{Timeout: time.Nanosecond}))
	if err := c.Health(context.Background()); err == nil {
		t.Fatal("Health with a 1 ns timeout succeeded; the test proves nothing")
	}
	if _, err := c.Exec(context.Background(), "web", apitype.ExecRequest{Command: "true"}); err != nil {
		t.Errorf("Exec: %v", err)
	}
}

func TestEvictVM(t *testing.T) {
	tests := []struct {
		name    string
		reply   reply
		force   bool
		want    *apitype.EvictOutcome
		wantURI string
	}{
		{"killed", reply{status: 200, body: `{"sandbox_id":"sb/1","outcome":"killed"}`}, true,
			&apitype.EvictOutcome{SandboxID: "sb/1", Outcome: "killed"}, "/deployments/web/vms/sb%2F1?force=true"},
		{"draining", reply{status: 202, body: `{"sandbox_id":"sb/1","outcome":"draining"}`}, false,
			&apitype.EvictOutcome{SandboxID: "sb/1", Outcome: "draining"}, "/deployments/web/vms/sb%2F1?force=false"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newServer(t, tt.reply)
			got, err := newClient(t, s).EvictVM(context.Background(), "web", "sb/1", tt.force)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("outcome (-want +got):\n%s", diff)
			}
			reqs := s.requests()
			if len(reqs) != 1 || reqs[0].Method != "DELETE" || reqs[0].URI != tt.wantURI {
				t.Errorf("requests %+v, want one DELETE %s", reqs, tt.wantURI)
			}
		})
	}
	t.Run("unknown VM", func(t *testing.T) {
		s := newServer(t, reply{status: 404, body: `{"error":"no VM \"sb-9\" in deployment \"web\""}`})
		_, err := newClient(t, s).EvictVM(context.Background(), "web", "sb-9", false)
		if !client.IsNotFound(err) {
			t.Errorf("got %v, want a 404", err)
		}
	})
	t.Run("empty sandbox", func(t *testing.T) {
		s := newServer(t, reply{status: 200})
		if _, err := newClient(t, s).EvictVM(context.Background(), "web", "", false); err == nil {
			t.Error("EvictVM with an empty sandbox id succeeded")
		}
		if len(s.requests()) != 0 {
			t.Error("an empty sandbox id was sent to the server")
		}
	})
}

func TestLogs(t *testing.T) {
	const body = "2024-11-29T17:06:40Z sb-1 stdout hello\n2024-11-29T17:06:41Z sb-1 stderr oops\n"
	tests := []struct {
		name    string
		limit   int
		wantURI string
	}{
		{"limit", 5, "/deployments/web/logs?follow=false&limit=5"},
		{"zero", 0, "/deployments/web/logs?follow=false&limit=0"},
		{"server default", -1, "/deployments/web/logs?follow=false"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newServer(t, reply{status: 200, header: map[string]string{"Content-Type": "text/plain"}, body: body})
			var out bytes.Buffer
			if err := newClient(t, s, client.WithToken("applb_t")).Logs(context.Background(), "web", tt.limit, false, &out); err != nil {
				t.Fatal(err)
			}
			if out.String() != body {
				t.Errorf("wrote %q, want %q", out.String(), body)
			}
			reqs := s.requests()
			if len(reqs) != 1 || reqs[0].URI != tt.wantURI || reqs[0].Auth != "Bearer applb_t" || reqs[0].Accept != "text/plain" {
				t.Errorf("requests %+v, want one GET %s with the token", reqs, tt.wantURI)
			}
		})
	}
	t.Run("error", func(t *testing.T) {
		s := newServer(t, reply{status: 400, body: `{"error":"deployment \"legacy\" is a static deployment; logs needs a vm deployment"}`})
		var out bytes.Buffer
		err := newClient(t, s).Logs(context.Background(), "legacy", 10, false, &out)
		if client.StatusCode(err) != 400 || !strings.Contains(err.Error(), "needs a vm deployment") || out.Len() != 0 {
			t.Errorf("got %v and output %q, want the 400 and nothing written", err, out.String())
		}
	})
	t.Run("limit too large", func(t *testing.T) {
		s := newServer(t, reply{status: 200})
		if err := newClient(t, s).Logs(context.Background(), "web", 10001, false, io.Discard); err == nil {
			t.Error("limit 10001 accepted")
		}
	})
}

// lineWriter reports each write on a channel, so a test can act once the
// streamed line has arrived.
type lineWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	wrote chan struct{}
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	select {
	case w.wrote <- struct{}{}:
	default:
	}
	return len(p), nil
}

func (w *lineWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// TestLogsFollow checks that a followed stream reaches the writer as it is
// written, and that cancelling the context ends Logs without an error.
func TestLogsFollow(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("follow") != "true" {
			http.Error(w, `{"error":"want follow=true"}`, 400)
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, "old line\n")
		http.NewResponseController(w).Flush()
		io.WriteString(w, "sb-1 {\"text\":\"new\"}\n")
		http.NewResponseController(w).Flush()
		<-r.Context().Done() // keep streaming until the client goes
	}))
	defer srv.Close()
	c, err := client.New(srv.URL, client.WithHTTPClient(&http.Client{Timeout: time.Nanosecond}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &lineWriter{wrote: make(chan struct{}, 1)}
	done := make(chan error, 1)
	go func() { done <- c.Logs(ctx, "web", 1, true, w) }()
	for !strings.Contains(w.String(), "new") {
		select {
		case <-w.wrote:
		case err := <-done:
			t.Fatalf("Logs returned before the stream ended: %v", err)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Logs after cancel: %v, want nil", err)
	}
	if want := "old line\nsb-1 {\"text\":\"new\"}\n"; w.String() != want {
		t.Errorf("wrote %q, want %q", w.String(), want)
	}
}

// shellServer speaks the shell protocol of app-lb.md §2.6: it sends ready,
// echoes stdin back as output, reports resizes as output, and ends the
// session with exit code 7 when it reads "exit\n".
type shellServer struct {
	*httptest.Server
	mu     sync.Mutex
	query  string
	auth   string
	frames []int // the length of each stdin frame received
}

func newShellServer(t *testing.T) *shellServer {
	t.Helper()
	s := &shellServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/deployments/web/shell" {
			w.WriteHeader(404)
			io.WriteString(w, `{"error":"no deployment"}`)
			return
		}
		if r.URL.Query().Get("wake") == "false" {
			w.WriteHeader(409)
			io.WriteString(w, `{"error":"deployment \"web\" has no running VM (pass wake=true to start one)"}`)
			return
		}
		s.mu.Lock()
		s.query, s.auth = r.URL.RawQuery, r.Header.Get("Authorization")
		s.mu.Unlock()
		ws, err := websocket.Accept(w, r, nil)
		if err != nil {
			t.Errorf("accept: %v", err)
			return
		}
		defer ws.CloseNow()
		ctx := r.Context()
		ws.Write(ctx, websocket.MessageText, []byte(`{"type":"ready","sandbox_id":"sb-1"}`))
		var line []byte
		for {
			typ, msg, err := ws.Read(ctx)
			if err != nil {
				return
			}
			if typ == websocket.MessageText {
				var m struct {
					Type       string
					Cols, Rows int
				}
				json.Unmarshal(msg, &m)
				out := fmt.Sprintf("%s %dx%d\r\n", m.Type, m.Cols, m.Rows)
				ws.Write(ctx, websocket.MessageBinary, append([]byte{0x02}, out...))
				continue
			}
			if len(msg) == 0 || msg[0] != 0x01 {
				t.Errorf("stdin frame %q does not start with 0x01", msg)
				return
			}
			s.mu.Lock()
			s.frames = append(s.frames, len(msg))
			s.mu.Unlock()
			ws.Write(ctx, websocket.MessageBinary, append([]byte{0x02}, msg[1:]...))
			line = append(line, msg[1:]...)
			if bytes.HasSuffix(line, []byte("exit\n")) {
				ws.Write(ctx, websocket.MessageText, []byte(`{"type":"exit","code":7}`))
				ws.Close(websocket.StatusNormalClosure, "")
				return
			}
			if bytes.HasSuffix(line, []byte("fail\n")) {
				ws.Write(ctx, websocket.MessageText, []byte(`{"type":"error","message":"agent went away"}`))
				ws.Close(websocket.StatusNormalClosure, "")
				return
			}
			if bytes.HasSuffix(line, []byte("drop\n")) {
				return // no exit message
			}
		}
	}))
	t.Cleanup(s.Close)
	return s
}

func TestShell(t *testing.T) {
	s := newShellServer(t)
	c, err := client.New(s.URL, client.WithBasicAuth("admin", "pw"))
	if err != nil {
		t.Fatal(err)
	}
	sess, err := c.Shell(context.Background(), "web", client.ShellOptions{Cols: 120, Rows: 40, Cwd: "/srv", SandboxID: "sb-1"})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	if sess.SandboxID() != "sb-1" {
		t.Errorf("SandboxID %q, want sb-1", sess.SandboxID())
	}
	s.mu.Lock()
	query, auth := s.query, s.auth
	s.mu.Unlock()
	if want := "cols=120&cwd=%2Fsrv&rows=40&sandbox_id=sb-1"; query != want {
		t.Errorf("query %q, want %q", query, want)
	}
	if want := "Basic YWRtaW46cHc="; auth != want {
		t.Errorf("Authorization %q, want %q (the websocket dial must authenticate)", auth, want)
	}
	if err := sess.Resize(100, 30); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(sess, "echo hi\nexit\n"); err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(sess)
	if err != nil {
		t.Fatalf("reading output: %v", err)
	}
	if want := "resize 100x30\r\necho hi\nexit\n"; string(out) != want {
		t.Errorf("output %q, want %q", out, want)
	}
	code, err := sess.Wait()
	if code != 7 || err != nil {
		t.Errorf("Wait: %d, %v; want 7, nil", code, err)
	}
	if _, err := sess.Write([]byte("more\n")); err == nil {
		t.Error("Write after the shell exited succeeded")
	}
}

// TestShellChunksLargeInput checks that a large write is split into
// messages the server's 32 KiB read limit accepts, in order.
func TestShellChunksLargeInput(t *testing.T) {
	s := newShellServer(t)
	c, err := client.New(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	sess, err := c.Shell(context.Background(), "web", client.ShellOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	in := append(bytes.Repeat([]byte("0123456789abcdef"), 5000), "\nexit\n"...)
	go func() {
		if _, err := sess.Write(in); err != nil {
			t.Errorf("Write: %v", err)
		}
	}()
	out, err := io.ReadAll(sess)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out, in) {
		t.Errorf("echoed %d bytes, want the %d written, in order", len(out), len(in))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.frames) < 2 {
		t.Errorf("%d frames, want the input split", len(s.frames))
	}
	for _, n := range s.frames {
		if n > 32<<10 {
			t.Errorf("a frame of %d bytes exceeds the server's limit", n)
		}
	}
	if s.query != "" {
		t.Errorf("query %q, want none for the zero options", s.query)
	}
}

func TestShellFailures(t *testing.T) {
	s := newShellServer(t)
	c, err := client.New(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	t.Run("refused before the upgrade", func(t *testing.T) {
		_, err := c.Shell(ctx, "web", client.ShellOptions{NoWake: true})
		if !client.IsConflict(err) || !strings.Contains(err.Error(), "no running VM") {
			t.Errorf("got %v, want the server's 409", err)
		}
		_, err = c.Shell(ctx, "nope", client.ShellOptions{})
		if !client.IsNotFound(err) {
			t.Errorf("got %v, want a 404", err)
		}
	})
	t.Run("bad size", func(t *testing.T) {
		if _, err := c.Shell(ctx, "web", client.ShellOptions{Cols: 1001}); err == nil {
			t.Error("cols 1001 accepted")
		}
	})
	for _, tt := range []struct{ input, want string }{
		{"fail\n", "agent went away"},
		{"drop\n", "without an exit status"},
	} {
		t.Run(strings.TrimSpace(tt.input), func(t *testing.T) {
			sess, err := c.Shell(ctx, "web", client.ShellOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer sess.Close()
			io.WriteString(sess, tt.input)
			_, rerr := io.ReadAll(sess)
			code, err := sess.Wait()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Wait: %d, %v; want an error containing %q", code, err, tt.want)
			}
			if rerr == nil {
				t.Error("Read ended with EOF although the session failed")
			}
		})
	}
	t.Run("Close", func(t *testing.T) {
		sess, err := c.Shell(ctx, "web", client.ShellOptions{})
		if err != nil {
			t.Fatal(err)
		}
		sess.Close()
		if _, err := sess.Wait(); err == nil {
			t.Error("Wait after Close returned no error")
		}
		if _, err := sess.Read(make([]byte, 1)); err == nil || errors.Is(err, io.EOF) {
			t.Errorf("Read after Close: %v, want an error other than EOF", err)
		}
		sess.Close() // a second Close is harmless
	})
}

// TestShellNotReady checks that a server whose first message is not
// "ready" fails Shell rather than handing back a session.
func TestShellNotReady(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer ws.CloseNow()
		ws.Write(r.Context(), websocket.MessageText, []byte(`{"type":"error","message":"no agent in this VM"}`))
		ws.Close(websocket.StatusNormalClosure, "")
	}))
	defer srv.Close()
	c, err := client.New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Shell(context.Background(), "web", client.ShellOptions{})
	if err == nil || !strings.Contains(err.Error(), "no agent in this VM") {
		t.Errorf("got %v, want the server's error", err)
	}
}
