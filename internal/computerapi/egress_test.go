package computerapi

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/berth-dev/berth/apitype/computertype"

	"github.com/berth-dev/berth/internal/auth"
	"github.com/berth-dev/berth/internal/computer"
	"github.com/berth-dev/berth/internal/egress"
	"github.com/berth-dev/berth/internal/grant"
	"github.com/berth-dev/berth/internal/store"
)

// newEnvWith is newEnv with the API's options edited by opts.
func newEnvWith(t testing.TB, opts ...func(*Options)) *testEnv {
	t.Helper()
	dir := t.TempDir()
	st, err := store.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	key, err := grant.LoadKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	c := &clock{}
	gi, err := grant.New(context.Background(), grant.Config{Key: key, Store: st, Now: c.now})
	if err != nil {
		t.Fatal(err)
	}
	mgr := newManager(t, dir, st)
	o := Options{
		Manager: mgr,
		Grants:  gi,
		Gate:    auth.New(auth.Config{User: opUser, Password: opPass, Brake: auth.NewBrake(auth.BrakeConfig{Threshold: 1 << 20})}),
		Now:     c.now,
	}
	for _, f := range opts {
		f(&o)
	}
	srv := httptest.NewServer(New(o))
	t.Cleanup(srv.Close)
	return &testEnv{t: t, srv: srv, mgr: mgr, grants: gi, clock: c}
}

// names is a resolver that maps the test's names to loopback.
type names map[string]string

func (n names) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	a, ok := n[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return []netip.Addr{netip.MustParseAddr(a)}, nil
}

// withEgress runs an egress proxy on loopback (127.0.0.1 exempt from the
// platform deny set), wired as berth serve wires it: grants from the
// issuer, facts into the manager.
func withEgress(t *testing.T, res names) func(*Options) {
	return func(o *Options) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		key := make([]byte, 32)
		rand.Read(key)
		issuer := o.Grants.(*grant.Issuer)
		mgr := o.Manager
		p, err := egress.New(egress.Options{
			Key: key, Addr: ln.Addr().String(), Resolver: res, AllowLoopback: true,
			Grant: func(computerID, id string) (egress.Grant, error) {
				g, err := issuer.Lookup(computerID, id)
				return egress.Grant{Egress: g.Egress, Provenance: egress.Provenance{Actor: g.Provenance.Actor, Via: g.Provenance.Via}}, err
			},
			Record: func(ctx context.Context, e egress.Event) {
				f := computer.Fact{Kind: computer.FactEgress, ComputerID: e.ComputerID, Host: e.Host, Method: e.Method, Status: e.Status,
					Provenance: computer.Provenance{Actor: e.Provenance.Actor, Via: e.Provenance.Via}}
				if err := mgr.Emit(ctx, f); err != nil {
					t.Errorf("recording %+v: %v", f, err)
				}
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		go p.Serve(ln)
		t.Cleanup(func() { p.Close() })
		o.Egress = p
	}
}

// TestEgressFromAComputer runs curl in a process-backed Computer: its
// requests go through the proxy (the variables the API sets), are allowed
// or refused by the grant's policy, and become egress facts with the
// grant's provenance.
func TestEgressFromAComputer(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl is not installed")
	}
	var hits atomic.Int64
	dest := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(dest.Close)
	tlsDest := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
	}))
	t.Cleanup(tlsDest.Close)
	port := dest.Listener.Addr().(*net.TCPAddr).Port
	tlsPort := tlsDest.Listener.Addr().(*net.TCPAddr).Port
	e := newEnvWith(t, withEgress(t, names{"allowed.test": "127.0.0.1", "denied.test": "127.0.0.1", "private.test": "10.1.2.3"}))
	e.create("net1")
	secs := int64(3600)
	var g computertype.Grant
	mustUnmarshal(t, e.must(operator, http.StatusCreated, "POST", "/computers/net1/grants", computertype.NewGrant{
		Actions: actionNames([]grant.Action{grant.Exec, grant.Bash}), ExpiresInSecs: &secs,
		Egress:     json.RawMessage(`{"allow":["allowed.test","private.test"]}`),
		Provenance: &grant.Provenance{Actor: "agent-x", Via: "egress-test"},
	}), &g)
	tok := cred(g.Token)

	curl := func(c cred, url string) string {
		t.Helper()
		var res computertype.ExecResult
		mustUnmarshal(t, e.must(c, http.StatusOK, "POST", "/computers/net1/exec", computertype.ExecRequest{
			Argv: []string{"curl", "-sS", "-k", "-o", "/dev/null", "-w", "%{http_code}", url},
		}), &res)
		return res.Stdout
	}
	cases := []struct {
		url, code string
		fact      computer.Fact
	}{
		{fmt.Sprintf("http://allowed.test:%d/x?token=secret", port), "202", computer.Fact{Host: "allowed.test", Method: "GET", Status: 202}},
		{fmt.Sprintf("https://allowed.test:%d/", tlsPort), "200", computer.Fact{Host: "allowed.test", Method: "CONNECT", Status: 200}},
		{fmt.Sprintf("http://denied.test:%d/", port), "403", computer.Fact{Host: "denied.test", Method: "GET", Status: 403}},
		{fmt.Sprintf("http://private.test:%d/", port), "403", computer.Fact{Host: "private.test", Method: "GET", Status: 403}},
	}
	for _, c := range cases {
		if got := curl(tok, c.url); got != c.code {
			t.Errorf("curl %s under the grant: %q, want %s", c.url, got, c.code)
		}
	}
	if hits.Load() != 2 {
		t.Errorf("the destinations got %d requests, want 2 (the allowed ones)", hits.Load())
	}
	// Work the operator starts has no grant, so no egress.
	if got := curl(operator, fmt.Sprintf("http://allowed.test:%d/", port)); got != "403" {
		t.Errorf("curl as the operator: %q, want 403", got)
	}
	var want []computer.Fact
	for _, c := range cases {
		f := c.fact
		f.Kind, f.ComputerID, f.Provenance = computer.FactEgress, "net1", computer.Provenance{Actor: "agent-x", Via: "egress-test"}
		want = append(want, f)
	}
	want = append(want, computer.Fact{Kind: computer.FactEgress, ComputerID: "net1", Provenance: computer.Provenance{Actor: "operator"}, Host: "allowed.test", Method: "GET", Status: 403})
	got := e.factsOfKind("net1", computer.FactEgress)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("egress facts:\n got %+v\nwant %+v", got, want)
	}
	for _, f := range got {
		if strings.Contains(f.Host, "secret") || strings.Contains(f.Host, "/") {
			t.Errorf("fact host %q carries more than the host", f.Host)
		}
	}

	// Revoking the grant cuts the egress of work started under it: a
	// process that holds the grant's proxy credential is refused from then
	// on.
	var res computertype.ExecResult
	mustUnmarshal(t, e.must(tok, http.StatusOK, "POST", "/computers/net1/bash", computertype.ExecRequest{Script: `printf %s "$http_proxy"`}), &res)
	held := res.Stdout
	if !strings.HasPrefix(held, "http://net1:") {
		t.Fatalf("the proxy variable under the grant is %q", held)
	}
	e.must(operator, http.StatusNoContent, "DELETE", "/computers/net1/grants/"+g.ID, nil)
	mustUnmarshal(t, e.must(operator, http.StatusOK, "POST", "/computers/net1/exec", computertype.ExecRequest{
		Argv: []string{"curl", "-sS", "-x", held, "-o", "/dev/null", "-w", "%{http_code}", fmt.Sprintf("http://allowed.test:%d/", port)},
	}), &res)
	if res.Stdout != "403" {
		t.Errorf("after revocation: %q, want 403", res.Stdout)
	}
	got = e.factsOfKind("net1", computer.FactEgress)
	last := got[len(got)-1]
	if last.Status != 403 || last.Provenance.Actor != "agent-x" {
		t.Errorf("the refusal after revocation: %+v, want a 403 in the grant's name", last)
	}
	if hits.Load() != 2 {
		t.Errorf("the destinations got %d requests, want 2", hits.Load())
	}
}

func mustUnmarshal(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("decoding %s: %v", b, err)
	}
}

// TestGrantBrake: grants that do not verify count as failed credentials
// of the client's address; past the threshold the address gets 429 with
// Retry-After, even with a valid grant, while valid grants used beyond
// their reach (403) never count. The operator's password still passes
// (package auth: the right admin credential always works).
func TestGrantBrake(t *testing.T) {
	brake := auth.NewBrake(auth.BrakeConfig{Threshold: 3, SlowAfter: 100})
	e := newEnvWith(t, func(o *Options) {
		o.Brake = brake
		o.Gate = auth.New(auth.Config{User: opUser, Password: opPass, Brake: brake})
	})
	e.create("b1")
	_, good := e.grant("b1", grant.FilesRead)
	// A valid grant used for an action it lacks: 403, many times, no brake.
	for range 5 {
		if code, b := e.do(good, "POST", "/computers/b1/exec", computertype.ExecRequest{Argv: []string{"true"}}); code != http.StatusForbidden {
			t.Fatalf("exec with a files.read grant: %d %s, want 403", code, b)
		}
	}
	forged := cred(string(good)[:len(good)-4] + "AAAA")
	bad := []cred{forged, "bcg_garbage", forged}
	for i, c := range bad {
		if code, b := e.do(c, "GET", "/computers/b1", nil); code != http.StatusUnauthorized {
			t.Fatalf("bad grant %d: %d %s, want 401", i, code, b)
		}
	}
	if code, b := e.do(operator, "GET", "/computers/b1", nil); code != http.StatusOK {
		t.Errorf("after %d bad grants, the operator: %d %s, want 200", len(bad), code, b)
	}
	for _, c := range []cred{forged, "bcg_garbage"} {
		resp := e.send(c, "GET", "/computers/b1", nil, nil)
		resp.Body.Close()
		ra, err := strconv.Atoi(resp.Header.Get("Retry-After"))
		if resp.StatusCode != http.StatusTooManyRequests || err != nil || ra < 1 {
			t.Errorf("after %d bad grants, %q: %d Retry-After %q, want 429 with Retry-After", len(bad), c[:min(len(c), 8)], resp.StatusCode, resp.Header.Get("Retry-After"))
		}
	}
	// The valid grant still works from the locked-out address: a correct
	// credential is never refused (issue 9).
	if code, b := e.do(good, "GET", "/computers/b1", nil); code != http.StatusOK {
		t.Errorf("after %d bad grants, the valid grant: %d %s, want 200", len(bad), code, b)
	}
	// A revoked grant is a failure too (checked on a fresh brake).
	brake2 := auth.NewBrake(auth.BrakeConfig{Threshold: 2, SlowAfter: 100})
	e2 := newEnvWith(t, func(o *Options) { o.Brake = brake2 })
	e2.create("b2")
	g, tok := e2.grant("b2", grant.FilesRead)
	e2.must(operator, http.StatusNoContent, "DELETE", "/computers/b2/grants/"+g.ID, nil)
	for range 2 {
		if code, b := e2.do(tok, "GET", "/computers/b2", nil); code != http.StatusUnauthorized {
			t.Fatalf("revoked grant: %d %s, want 401", code, b)
		}
	}
	if code, _ := e2.do(tok, "GET", "/computers/b2", nil); code != http.StatusTooManyRequests {
		t.Errorf("after 2 revoked-grant failures: %d, want 429", code)
	}
	// Admin routes refuse grants; a bad one there counts as well.
	brake3 := auth.NewBrake(auth.BrakeConfig{Threshold: 1, SlowAfter: 100})
	e3 := newEnvWith(t, func(o *Options) { o.Brake = brake3 })
	if code, b := e3.do("bcg_x.y", "GET", "/computers", nil); code != http.StatusUnauthorized {
		t.Fatalf("a bad grant on an admin route: %d %s, want 401", code, b)
	}
	if code, _ := e3.do("bcg_x.y", "GET", "/computers", nil); code != http.StatusTooManyRequests {
		t.Errorf("after a bad grant on an admin route: %d, want 429", code)
	}
}
