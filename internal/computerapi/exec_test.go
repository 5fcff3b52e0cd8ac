package computerapi

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"github.com/berth-dev/berth/apitype/computertype"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/berth-dev/berth/internal/computer"
	"github.com/berth-dev/berth/internal/grant"
)

func TestExecAndBash(t *testing.T) {
	e := newEnv(t)
	e.create("x1")
	_, g := e.grant("x1", grant.Exec, grant.Bash, grant.FilesWrite)
	base := "/computers/x1"

	e.must(g, 200, "POST", base+"/files/write", computertype.WriteRequest{Path: "sub/in.txt", Content: "data", Parents: true})
	res := decode[computertype.ExecResult](t, e.must(g, 200, "POST", base+"/exec", computertype.ExecRequest{
		Argv: []string{"sh", "-c", `cat in.txt; echo " $FOO"; echo err >&2; read x; echo "$x"; exit 3`},
		Cwd:  "sub", Env: map[string]string{"FOO": "bar"}, Stdin: "typed\n",
	}))
	if res.ExitCode != 3 || res.Stdout != "data bar\ntyped\n" || res.Stderr != "err\n" || !strings.HasPrefix(res.RequestID, "req_") {
		t.Errorf("exec = %+v", res)
	}
	// Binary-exact with base64.
	res = decode[computertype.ExecResult](t, e.must(g, 200, "POST", base+"/exec", computertype.ExecRequest{
		Argv: []string{"cat"}, Encoding: "base64", Stdin: base64.StdEncoding.EncodeToString([]byte{0xff, 0, 1}),
	}))
	if out, _ := base64.StdEncoding.DecodeString(res.Stdout); string(out) != "\xff\x00\x01" || res.Encoding != "base64" {
		t.Errorf("base64 exec stdout = %q (%q)", out, res.Stdout)
	}
	res = decode[computertype.ExecResult](t, e.must(g, 200, "POST", base+"/bash", computertype.ExecRequest{Script: "x=$((6*7)); echo $x; [[ -n $x ]]"}))
	if res.ExitCode != 0 || res.Stdout != "42\n" {
		t.Errorf("bash = %+v", res)
	}
	res = decode[computertype.ExecResult](t, e.must(g, 200, "POST", base+"/exec", computertype.ExecRequest{Argv: []string{"sleep", "10"}, TimeoutMs: 100}))
	if !res.TimedOut || res.ExitCode != 124 {
		t.Errorf("timed-out exec = %+v", res)
	}
	for _, tc := range []struct {
		name string
		path string
		body computertype.ExecRequest
		want int
	}{
		{"no argv", "/exec", computertype.ExecRequest{}, 400},
		{"script on exec", "/exec", computertype.ExecRequest{Argv: []string{"true"}, Script: "x"}, 400},
		{"no script", "/bash", computertype.ExecRequest{}, 400},
		{"bad encoding", "/exec", computertype.ExecRequest{Argv: []string{"true"}, Encoding: "hex"}, 400},
		{"bad timeout", "/exec", computertype.ExecRequest{Argv: []string{"true"}, TimeoutMs: -1}, 400},
		{"huge timeout", "/exec", computertype.ExecRequest{Argv: []string{"true"}, TimeoutMs: MaxTimeoutMs + 1}, 400},
		{"no such program", "/exec", computertype.ExecRequest{Argv: []string{"/nonexistent/prog"}}, 422},
		{"bad env", "/exec", computertype.ExecRequest{Argv: []string{"true"}, Env: map[string]string{"A=B": "x"}}, 400},
	} {
		if code, b := e.do(g, "POST", base+tc.path, tc.body); code != tc.want {
			t.Errorf("%s = %d %s, want %d", tc.name, code, b, tc.want)
		}
	}

	// Each run that ran is one process.exited fact with the grant's
	// provenance and its exit code (the one that could not start is not).
	exits := e.factsOfKind("x1", computer.FactProcessExited)
	var codes []int
	for _, f := range exits {
		if f.Provenance.Actor != "agent-x1" || f.ExitCode == nil || f.RequestID == "" {
			t.Errorf("process.exited fact %+v", f)
			continue
		}
		codes = append(codes, *f.ExitCode)
	}
	if want := []int{3, 0, 0, 124}; !equalInts(codes, want) {
		t.Errorf("exit codes in facts = %v, want %v", codes, want)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestExecStream(t *testing.T) {
	e := newEnv(t)
	e.create("s1")
	_, g := e.grant("s1", grant.Exec)
	resp := e.send(g, "POST", "/computers/s1/exec", computertype.ExecRequest{Argv: []string{"sh", "-c", "echo out; echo err >&2; exit 7"}, Stream: true}, nil)
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "application/x-ndjson" {
		t.Fatalf("stream answer %d %s", resp.StatusCode, ct)
	}
	var stdout, stderr string
	var last computertype.ExecEvent
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var ev computertype.ExecEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("event %q: %v", sc.Text(), err)
		}
		switch ev.Type {
		case "stdout":
			stdout += ev.Data
		case "stderr":
			stderr += ev.Data
		}
		last = ev
	}
	if stdout != "out\n" || stderr != "err\n" || last.Type != "exit" || last.ExitCode == nil || *last.ExitCode != 7 {
		t.Errorf("stream: stdout %q stderr %q last %+v", stdout, stderr, last)
	}
	exits := e.factsOfKind("s1", computer.FactProcessExited)
	if len(exits) != 1 || exits[0].RequestID != last.RequestID || *exits[0].ExitCode != 7 {
		t.Errorf("facts of the streamed run = %+v", exits)
	}
}

func TestTerminal(t *testing.T) {
	// An interactive bash may take seconds to start on a busy machine;
	// the terminal's protocol is what is under test.
	t.Setenv("SHELL", "/bin/sh")
	e := newEnv(t)
	e.create("t1")
	_, g := e.grant("t1", grant.Terminal)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The grant in the query, as a browser sends it.
	u := "ws" + strings.TrimPrefix(e.srv.URL, "http") + "/computers/t1/terminal?cols=100&rows=30&grant=" + string(g)
	conn, _, err := websocket.Dial(ctx, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseNow()
	_, msg, err := conn.Read(ctx)
	if err != nil || !strings.Contains(string(msg), `"ready"`) {
		t.Fatalf("first message %s, %v", msg, err)
	}
	if err := conn.Write(ctx, websocket.MessageBinary, append([]byte{1}, "stty size; exit 5\n"...)); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for {
		typ, msg, err := conn.Read(ctx)
		if err != nil {
			t.Fatalf("reading the terminal: %v (output so far %q)", err, out.String())
		}
		if typ == websocket.MessageBinary && len(msg) > 0 && msg[0] == 2 {
			out.Write(msg[1:])
			continue
		}
		var m struct {
			Type string
			Code *int
		}
		json.Unmarshal(msg, &m)
		if m.Type != "exit" || m.Code == nil || *m.Code != 5 {
			t.Fatalf("last message %s, want exit 5", msg)
		}
		break
	}
	conn.Close(websocket.StatusNormalClosure, "")
	if !strings.Contains(out.String(), "30 100") {
		t.Errorf("terminal output %q does not show the size 30 100", out.String())
	}
	// A grant in the query is refused on every other route.
	if code, _ := e.do("", "GET", "/computers/t1?grant="+string(g), nil); code != http.StatusUnauthorized {
		t.Errorf("grant in the query of GET /computers/t1 = %d, want 401", code)
	}
}

func TestProcesses(t *testing.T) {
	e := newEnv(t)
	e.create("p1")
	_, g := e.grant("p1", grant.ProcessStart, grant.ProcessList, grant.ProcessKill)
	base := "/computers/p1"
	long := decode[computertype.Process](t, e.must(g, 201, "POST", base+"/processes", computertype.ProcessRequest{Script: "echo started; exec sleep 60"}))
	short := decode[computertype.Process](t, e.must(g, 201, "POST", base+"/processes", computertype.ProcessRequest{Argv: []string{"sh", "-c", "echo done; exit 4"}}))
	if long.Provenance == nil || long.Provenance.Actor != "agent-p1" {
		t.Errorf("process provenance = %+v", long.Provenance)
	}
	// The short one ends on its own; its output stays readable.
	waitFor(t, func() bool {
		for _, p := range decode[computertype.ProcessList](t, e.must(g, 200, "GET", base+"/processes", nil)).Processes {
			if p.ID == short.ID {
				return !p.Running
			}
		}
		return false
	})
	if out := readAll(t, e.send(g, "GET", base+"/processes/"+short.ID+"/output", nil, nil)); string(out) != "done\n" {
		t.Errorf("output = %q", out)
	}
	e.must(g, 200, "DELETE", base+"/processes/"+long.ID+"?signal=KILL", nil)
	waitFor(t, func() bool {
		for _, p := range decode[computertype.ProcessList](t, e.must(g, 200, "GET", base+"/processes", nil)).Processes {
			if p.ID == long.ID {
				return !p.Running
			}
		}
		return false
	})
	if code, _ := e.do(g, "DELETE", base+"/processes/nope", nil); code != http.StatusNotFound {
		t.Errorf("killing an unknown process = %d, want 404", code)
	}
	// The manager records each exit once, with the starter's provenance.
	var got map[string]int
	waitFor(t, func() bool {
		got = map[string]int{}
		for _, f := range e.factsOfKind("p1", computer.FactProcessExited) {
			got[f.RequestID]++
			if f.Provenance.Actor != "agent-p1" {
				t.Errorf("fact %+v: provenance, want agent-p1's", f)
			}
			if f.RequestID == short.ID && (f.ExitCode == nil || *f.ExitCode != 4) {
				t.Errorf("short process fact %+v, want exit code 4", f)
			}
		}
		return got[short.ID] > 0 && got[long.ID] > 0
	})
	if got[short.ID] != 1 || got[long.ID] != 1 {
		t.Errorf("process.exited facts per process = %v, want one each", got)
	}
}

// waitFor polls cond until it holds; the test's own deadline bounds it.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for !cond() {
		time.Sleep(10 * time.Millisecond)
	}
}
