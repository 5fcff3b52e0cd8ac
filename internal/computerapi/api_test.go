package computerapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berth-dev/berth/apitype/computertype"

	"github.com/berth-dev/berth/internal/agent"
	"github.com/berth-dev/berth/internal/computer"
	"github.com/berth-dev/berth/internal/grant"
	"github.com/berth-dev/berth/internal/store"
	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/process"
)

// clock is the real time plus an offset a test moves (to expire grants),
// safe to read from handlers meanwhile.
type clock struct{ offset atomic.Int64 }

func (c *clock) now() time.Time      { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *clock) add(d time.Duration) { c.offset.Add(int64(d)) }

// testEnv is a Computer API on a real HTTP server on loopback, with a real
// manager, a real grant issuer over a real store, and an operator
// password, so callers without a credential are refused.
type testEnv struct {
	t      testing.TB
	srv    *httptest.Server
	mgr    Manager
	grants *grant.Issuer
	clock  *clock
}

const (
	opUser = "admin"
	opPass = "operator-password"
)

func newEnv(t testing.TB) *testEnv {
	t.Helper()
	return newEnvWith(t)
}

// TestMain lets the test binary be the in-sandbox agent: with
// BERTH_TEST_ROLE=agent it runs `berth agent`.
func TestMain(m *testing.M) {
	if os.Getenv("BERTH_TEST_ROLE") == "agent" {
		os.Exit(agent.Main(context.Background(), os.Args[1:], os.Stderr))
	}
	os.Exit(m.Run())
}

// newManager returns the Computer manager under test, running its loops,
// with a process driver whose agent is this test binary.
func newManager(t testing.TB, dir string, st *store.Store) Manager {
	t.Helper()
	// A short directory: agent socket paths are limited to 107 bytes.
	ddir, err := os.MkdirTemp("", "cmpapi")
	if err != nil {
		t.Fatal(err)
	}
	d, err := process.New(process.Options{Dir: ddir, AgentCommand: []string{os.Args[0]}, AgentEnv: []string{"BERTH_TEST_ROLE=agent"}, CgroupParent: "none"})
	if err != nil {
		t.Fatal(err)
	}
	m, err := computer.New(context.Background(), computer.Options{
		Store: st, Drivers: map[string]vm.Driver{"process": d}, DataDir: dir,
		BaseDomain: "computers.test", Tick: 50 * time.Millisecond, StopGrace: time.Second,
		FleetLimit: 1000, // the grant matrix runs a Computer per route
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		insts, _ := d.List(context.Background())
		for _, in := range insts {
			if err := d.Stop(context.Background(), in.ID, time.Second); err != nil {
				t.Errorf("stopping sandbox %s: %v", in.ID, err)
			}
		}
		os.RemoveAll(ddir)
	})
	return m
}

// cred is how a request authenticates: "" none, "op" the operator,
// anything else a bearer token.
type cred string

const operator cred = "op"

// do sends a request and returns the status and body.
func (e *testEnv) do(c cred, method, path string, body any) (int, []byte) {
	e.t.Helper()
	resp := e.send(c, method, path, body, nil)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func (e *testEnv) send(c cred, method, path string, body any, header http.Header) *http.Response {
	e.t.Helper()
	var rd io.Reader
	ctype := ""
	switch v := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(v)
		ctype = "application/octet-stream"
	case string:
		rd = strings.NewReader(v)
		ctype = "application/json"
	default:
		b, err := json.Marshal(v)
		if err != nil {
			e.t.Fatal(err)
		}
		rd = bytes.NewReader(b)
		ctype = "application/json"
	}
	req, err := http.NewRequest(method, e.srv.URL+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	switch c {
	case "":
	case operator:
		req.SetBasicAuth(opUser, opPass)
	default:
		req.Header.Set("Authorization", "Bearer "+string(c))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp
}

// must sends a request and fails the test unless it answers want.
func (e *testEnv) must(c cred, want int, method, path string, body any) []byte {
	e.t.Helper()
	code, b := e.do(c, method, path, body)
	if code != want {
		e.t.Fatalf("%s %s = %d %s, want %d", method, path, code, b, want)
	}
	return b
}

// create makes a Computer as the operator.
func (e *testEnv) create(id string) computertype.Computer {
	e.t.Helper()
	var v computertype.Computer
	json.Unmarshal(e.must(operator, http.StatusCreated, "POST", "/computers", computertype.NewComputer{ID: id, Backings: []computer.Backing{{Kind: "process"}}}), &v)
	return v
}

func actionNames(as []grant.Action) []string {
	out := make([]string, len(as))
	for i, a := range as {
		out[i] = string(a)
	}
	return out
}

// grant issues a grant for id with actions, as the operator.
func (e *testEnv) grant(id string, actions ...grant.Action) (computertype.Grant, cred) {
	e.t.Helper()
	secs := int64(3600)
	var g computertype.Grant
	json.Unmarshal(e.must(operator, http.StatusCreated, "POST", "/computers/"+id+"/grants", computertype.NewGrant{
		Actions: actionNames(actions), ExpiresInSecs: &secs, Provenance: &grant.Provenance{Actor: "agent-" + id, Via: "test"},
	}), &g)
	if !strings.HasPrefix(g.Token, grant.Prefix) {
		e.t.Fatalf("issued token %q", g.Token)
	}
	return g, cred(g.Token)
}

// facts returns the facts of id after a cursor, as the operator.
func (e *testEnv) facts(id string, after int64) computertype.FactsPage {
	e.t.Helper()
	var p computertype.FactsPage
	b := e.must(operator, http.StatusOK, "GET", "/computers/"+id+"/facts?after="+itoa(after), nil)
	if err := json.Unmarshal(b, &p); err != nil {
		e.t.Fatalf("facts page %s: %v", b, err)
	}
	return p
}

// factsOfKind returns the facts of one kind.
func (e *testEnv) factsOfKind(id, kind string) []computer.Fact {
	var out []computer.Fact
	for _, f := range e.facts(id, 0).Facts {
		if f.Fact.Kind == kind {
			out = append(out, f.Fact)
		}
	}
	return out
}

func itoa(n int64) string { return strings.TrimSpace(string(mustJSON(n))) }

// readSSE reads server-sent events from r until n have arrived.
func readSSE(t *testing.T, r io.Reader, n int) []sseEvent {
	t.Helper()
	var out []sseEvent
	var cur sseEvent
	sc := bufio.NewScanner(r)
	for len(out) < n && sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.id != "" {
				out = append(out, cur)
			}
			cur = sseEvent{}
		case strings.HasPrefix(line, "id: "):
			cur.id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "event: "):
			cur.event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			cur.data = strings.TrimPrefix(line, "data: ")
		}
	}
	if len(out) < n {
		t.Fatalf("stream ended after %d events (%v), want %d", len(out), sc.Err(), n)
	}
	return out
}

type sseEvent struct{ id, event, data string }

func ioCopy(w io.Writer, resp *http.Response) (int64, error) { return io.Copy(w, resp.Body) }
