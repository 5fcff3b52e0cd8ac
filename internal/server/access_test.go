package server

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/auth"
	"github.com/berth-dev/berth/internal/secrets"
)

// node is a running server for the access tests.
type node struct {
	t       *testing.T
	s       *Server
	o       Options
	admin   string
	cancel  context.CancelFunc
	done    chan error
	stopped bool
}

func startNode(t *testing.T, o Options) *node {
	t.Helper()
	n, err := tryStart(t, o)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func tryStart(t *testing.T, o Options) (*node, error) {
	t.Helper()
	if o.DataDir == "" {
		o.DataDir = t.TempDir()
	}
	o.ProxyAddr, o.AdminAddr = "127.0.0.1:0", "127.0.0.1:0"
	o.DrainTimeout = 5 * time.Second
	o.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	testStore(&o)
	s, err := New(context.Background(), o)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := &node{t: t, s: s, o: o, admin: "http://" + s.AdminAddr(), cancel: cancel, done: make(chan error, 1)}
	go func() { n.done <- s.Run(ctx) }()
	t.Cleanup(n.stop)
	return n, nil
}

func (n *node) stop() {
	if n.stopped {
		return
	}
	n.stopped = true
	n.cancel()
	if err := <-n.done; err != nil {
		n.t.Errorf("Run: %v", err)
	}
}

type reply struct {
	code   int
	header http.Header
	body   []byte
}

func (r reply) String() string { return fmt.Sprintf("%d %s", r.code, bytes.TrimSpace(r.body)) }

// call sends one admin request with the given Authorization value (none
// when empty) through hc (http.DefaultClient when nil).
func (n *node) call(hc *http.Client, method, path, authz, body string) reply {
	n.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, n.admin+path, rd)
	if err != nil {
		n.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if authz != "" {
		req.Header.Set("Authorization", authz)
	}
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		n.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, resp.Header, b}
}

// must sends a request that has to succeed with want and decodes the body
// into out (when not nil).
func (n *node) must(want int, method, path, authz, body string, out any) {
	n.t.Helper()
	r := n.call(nil, method, path, authz, body)
	if r.code != want {
		n.t.Fatalf("%s %s = %s, want %d", method, path, r, want)
	}
	if out != nil {
		if err := json.Unmarshal(r.body, out); err != nil {
			n.t.Fatalf("%s %s: decoding %s: %v", method, path, r.body, err)
		}
	}
}

func basic(user, pass string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
}

func bearer(tok string) string { return "Bearer " + tok }

// world is a gated server with deployments in three namespaces and a
// token of every kind the matrix needs.
type world struct {
	*node
	op      string            // the operator's Authorization value
	callers map[string]string // caller name → Authorization value
	minted  map[string]auth.MintedView
}

func staticSpec(id, ns string) string {
	return fmt.Sprintf(`{"id":%q,"namespace":%q,"routes":[{"host":"%s.test"}],"upstreams":["127.0.0.1:1"]}`, id, ns, id)
}

func newWorld(t *testing.T) *world {
	t.Helper()
	n := startNode(t, Options{AdminPassword: "s3cret",
		// The matrix presents bad credentials on purpose; keep the brake
		// out of its way (it has its own test).
		Brake: auth.BrakeConfig{Threshold: 1 << 30, SlowAfter: 1 << 30, TargetThreshold: 1 << 30}})
	w := &world{node: n, op: basic("admin", "s3cret"), callers: map[string]string{}, minted: map[string]auth.MintedView{}}
	for _, d := range [][2]string{{"a1", "team-a"}, {"b1", "team-b"}, {"d1", ""}} {
		n.must(201, "POST", "/deployments", w.op, staticSpec(d[0], d[1]), nil)
	}
	mint := func(name, body string) auth.MintedView {
		var m auth.MintedView
		n.must(201, "POST", "/tokens", w.op, body, &m)
		w.minted[name] = m
		return m
	}
	for name, body := range map[string]string{
		"fleet admin":  `{"name":"fleet","admin":"admin","deployments":["*"]}`,
		"view token":   `{"name":"viewer","admin":"view","deployments":["*"]}`,
		"scoped token": `{"name":"a1 only","admin":"admin","deployments":["a1"]}`,
		"ns admin":     `{"name":"team-a admin","admin":"admin","namespace":"team-a","deployments":[]}`,
		"ns viewer":    `{"name":"team-a viewer","admin":"view","namespace":"team-a","deployments":[]}`,
	} {
		w.callers[name] = bearer(mint(name, body).Token)
	}
	exp := mint("expired", `{"name":"soon","admin":"admin","deployments":["*"]}`)
	n.must(200, "PATCH", "/tokens/"+exp.ID, w.op, `{"expires_at":1}`, nil)
	w.callers["expired"] = bearer(exp.Token)
	rev := mint("revoked", `{"name":"gone","admin":"admin","deployments":["*"]}`)
	n.must(204, "DELETE", "/tokens/"+rev.ID, w.op, "", nil)
	w.callers["revoked"] = bearer(rev.Token)
	w.callers["operator"] = w.op
	w.callers["none"] = ""
	w.callers["malformed"] = "Bearer berth_nothex_x"
	return w
}

// TestWallMatrix asserts the exact status of every kind of caller on every
// group of admin routes (app-lb.md §2.1, §2.3).
func TestWallMatrix(t *testing.T) {
	w := newWorld(t)
	callers := []string{"none", "operator", "fleet admin", "view token", "scoped token", "ns admin", "ns viewer", "expired", "revoked", "malformed"}
	// Bodies are chosen to fail validation once past the wall (400), so a
	// pass is visible without changing anything.
	routes := []struct {
		method, path, body string
		// want per caller, in the order of callers.
		want [10]int
	}{
		//                                                                       none op  flt view scp nsA nsV exp rev mal
		{"GET", "/healthz", "", [10]int{200, 200, 200, 200, 200, 200, 200, 200, 200, 200}},
		{"GET", "/whoami", "", [10]int{401, 200, 200, 200, 200, 200, 200, 401, 401, 401}},
		{"GET", "/metrics", "", [10]int{401, 200, 200, 200, 200, 200, 200, 401, 401, 401}},
		{"GET", "/ingress", "", [10]int{401, 200, 200, 200, 200, 200, 200, 401, 401, 401}},
		{"GET", "/metrics/prometheus", "", [10]int{401, 200, 200, 200, 403, 403, 403, 401, 401, 401}},
		{"GET", "/deployments", "", [10]int{401, 200, 200, 403, 200, 200, 403, 401, 401, 401}},
		{"POST", "/deployments", `{"id":"a1","namespace":"team-a","routes":[{"host":"a1.test"}]}`, [10]int{401, 400, 400, 403, 400, 400, 403, 401, 401, 401}},
		{"GET", "/deployments/a1", "", [10]int{401, 200, 200, 403, 200, 200, 403, 401, 401, 401}},
		{"GET", "/deployments/b1", "", [10]int{401, 200, 200, 403, 403, 403, 403, 401, 401, 401}},
		{"GET", "/deployments/nope", "", [10]int{401, 404, 404, 403, 403, 403, 403, 401, 401, 401}},
		{"PUT", "/deployments/a1", `{"routes":[{"host":"a1.test"}]}`, [10]int{401, 400, 400, 403, 400, 400, 403, 401, 401, 401}},
		{"PATCH", "/deployments/a1/scaling", `{}`, [10]int{401, 400, 400, 403, 400, 400, 403, 401, 401, 401}},
		{"PUT", "/deployments/a1/upstreams/nope/drain", `{}`, [10]int{401, 404, 404, 403, 404, 404, 403, 401, 401, 401}},
		{"POST", "/deployments/a1/exec", `{"command":"true"}`, [10]int{401, 400, 400, 403, 400, 400, 403, 401, 401, 401}},
		{"POST", "/deployments/b1/exec", `{"command":"true"}`, [10]int{401, 400, 400, 403, 403, 403, 403, 401, 401, 401}},
		{"GET", "/deployments/b1/logs", "", [10]int{401, 400, 400, 403, 403, 403, 403, 401, 401, 401}},
		{"DELETE", "/deployments/b1/vms/sb-1", "", [10]int{401, 400, 400, 403, 403, 403, 403, 401, 401, 401}},
		{"GET", "/tokens", "", [10]int{401, 200, 200, 403, 200, 200, 403, 401, 401, 401}},
		{"POST", "/tokens", `{"name":""}`, [10]int{401, 400, 400, 403, 400, 400, 403, 401, 401, 401}},
		{"GET", "/secrets", "", [10]int{401, 200, 200, 403, 200, 200, 403, 401, 401, 401}},
		{"POST", "/secrets", `{"id":"s","namespace":"team-a","data":{}}`, [10]int{401, 400, 400, 403, 403, 400, 403, 401, 401, 401}},
		{"GET", "/secrets/s?namespace=team-b", "", [10]int{401, 404, 404, 403, 403, 403, 403, 401, 401, 401}},
		{"GET", "/namespaces", "", [10]int{401, 200, 200, 200, 200, 200, 200, 401, 401, 401}},
		{"POST", "/namespaces", `{"name":"Not Valid"}`, [10]int{401, 400, 400, 403, 403, 403, 403, 401, 401, 401}},
		{"DELETE", "/namespaces/none-such", "", [10]int{401, 404, 404, 403, 403, 403, 403, 401, 401, 401}},
		{"GET", "/auth-providers", "", [10]int{401, 200, 200, 200, 200, 200, 200, 401, 401, 401}},
		{"POST", "/auth-providers", `{"name":"p","namespace":"team-a"}`, [10]int{401, 400, 400, 403, 403, 400, 403, 401, 401, 401}},
		{"GET", "/auth-providers/team-a/none", "", [10]int{401, 404, 404, 403, 403, 404, 403, 401, 401, 401}},
		{"GET", "/feeds", "", [10]int{401, 200, 200, 200, 200, 200, 200, 401, 401, 401}},
		{"GET", "/feeds/team-a?format=json", "", [10]int{401, 200, 200, 200, 404, 200, 200, 401, 401, 401}},
		{"GET", "/feeds/team-b.xml", "", [10]int{401, 200, 200, 200, 404, 404, 404, 401, 401, 401}},
	}
	for _, rt := range routes {
		for i, c := range callers {
			t.Run(c+"/"+rt.method+" "+rt.path, func(t *testing.T) {
				r := w.call(nil, rt.method, rt.path, w.callers[c], rt.body)
				if r.code != rt.want[i] {
					t.Fatalf("got %s, want %d", r, rt.want[i])
				}
				if r.code == 401 {
					if string(r.body) != "authentication required\n" {
						t.Errorf("401 body = %q", r.body)
					}
					if got := r.header.Values("WWW-Authenticate"); len(got) != 2 || !strings.HasPrefix(got[0], "Basic realm=") || got[1] != "Bearer" {
						t.Errorf("401 challenges = %q, want Basic and Bearer", got)
					}
				}
			})
		}
	}
}

// TestNoExistenceOracle: a confined caller gets the same answer about a
// foreign deployment that exists and one that does not.
func TestNoExistenceOracle(t *testing.T) {
	w := newWorld(t)
	routes := []struct{ method, suffix, body string }{
		{"GET", "", ""}, {"PUT", "", `{"routes":[{"host":"x.test"}]}`}, {"DELETE", "", ""},
		{"PATCH", "/scaling", `{}`}, {"POST", "/exec", `{"command":"id"}`}, {"GET", "/shell", ""},
		{"GET", "/logs", ""}, {"DELETE", "/vms/sb", ""}, {"PUT", "/upstreams/127.0.0.1:1/drain", `{}`},
	}
	for _, c := range []string{"ns admin", "ns viewer", "scoped token"} {
		for _, rt := range routes {
			foreign := w.call(nil, rt.method, "/deployments/b1"+rt.suffix, w.callers[c], rt.body)
			missing := w.call(nil, rt.method, "/deployments/zz"+rt.suffix, w.callers[c], rt.body)
			if foreign.code != 403 || missing.code != 403 {
				t.Errorf("%s %s %s: foreign %s, missing %s; want 403 for both", c, rt.method, rt.suffix, foreign, missing)
				continue
			}
			if got, want := strings.ReplaceAll(string(foreign.body), "b1", "zz"), string(missing.body); got != want {
				t.Errorf("%s %s %s: bodies differ: %q vs %q", c, rt.method, rt.suffix, foreign.body, missing.body)
			}
		}
	}
	// Byte for byte: the same request before and after the deployment
	// stops existing.
	before := w.call(nil, "GET", "/deployments/b1", w.callers["ns admin"], "")
	w.must(204, "DELETE", "/deployments/b1", w.op, "", nil)
	after := w.call(nil, "GET", "/deployments/b1", w.callers["ns admin"], "")
	if before.code != 403 || after.code != 403 || !bytes.Equal(before.body, after.body) {
		t.Errorf("before %s, after %s: want the same 403", before, after)
	}
	if want := `{"error":"this token is not scoped to deployment \"b1\""}` + "\n"; string(after.body) != want {
		t.Errorf("body = %q, want %q", after.body, want)
	}
}

// TestNarrowing: list routes and /metrics show a confined caller only what
// it may see, and its writes stay behind its wall.
func TestNarrowing(t *testing.T) {
	w := newWorld(t)
	nsA, scoped := w.callers["ns admin"], w.callers["scoped token"]

	ids := func(authz string) []string {
		var list []apitype.DeploymentStatus
		w.must(200, "GET", "/deployments", authz, "", &list)
		var out []string
		for _, d := range list {
			out = append(out, d.Spec.ID)
		}
		return out
	}
	if got := ids(nsA); !slices.Equal(got, []string{"a1"}) {
		t.Errorf("ns admin sees %v", got)
	}
	if got := ids(w.op); !slices.Equal(got, []string{"a1", "b1", "d1"}) {
		t.Errorf("operator sees %v", got)
	}
	for _, c := range []string{"ns admin", "scoped token", "ns viewer"} {
		var m apitype.MetricsResponse
		w.must(200, "GET", "/metrics", w.callers[c], "", &m)
		if len(m.Deployments) != 1 || m.Deployments[0].ID != "a1" || m.Fleet.Deployments != 1 || m.TrackedDeployments != 1 || m.Host.CPUCount != 0 || m.Host.MemoryTotalBytes != 0 {
			t.Errorf("%s /metrics: deployments %d (fleet %d, tracked %d), host %+v", c, len(m.Deployments), m.Fleet.Deployments, m.TrackedDeployments, m.Host)
		}
	}
	var m apitype.MetricsResponse
	w.must(200, "GET", "/metrics", w.callers["view token"], "", &m)
	if len(m.Deployments) != 3 || m.Fleet.Deployments != 3 {
		t.Errorf("fleet viewer /metrics: %d deployments", len(m.Deployments))
	}
	var nss []apitype.NamespaceEntry
	w.must(200, "GET", "/namespaces", nsA, "", &nss)
	if len(nss) != 1 || nss[0].Namespace != "team-a" || nss[0].Deployments != 1 {
		t.Errorf("ns admin namespaces: %+v", nss)
	}
	w.must(200, "GET", "/namespaces", w.op, "", &nss)
	if len(nss) != 3 {
		t.Errorf("operator namespaces: %+v", nss)
	}

	// Writes: a namespace credential creates in its namespace by default,
	// and cannot take over or move a deployment behind another wall.
	var st apitype.DeploymentStatus
	// A namespace token routes only hosts under its namespace's domains.
	w.must(201, "POST", "/namespaces", w.op, `{"name":"team-a","domains":["a1.test","a2.test"]}`, nil)
	w.must(201, "POST", "/deployments", nsA, `{"id":"a2","routes":[{"host":"a2.test"}],"upstreams":["127.0.0.1:1"]}`, &st)
	if st.Spec.Namespace != "team-a" {
		t.Errorf("created in namespace %q, want team-a", st.Spec.Namespace)
	}
	w.must(403, "POST", "/deployments", nsA, staticSpec("b1", "team-a"), nil)
	w.must(403, "POST", "/deployments", nsA, staticSpec("a3", "team-b"), nil)
	w.must(403, "PUT", "/deployments/a1", nsA, staticSpec("a1", "team-b"), nil)
	w.must(403, "POST", "/deployments", scoped, staticSpec("new", ""), nil)
	w.must(201, "POST", "/deployments", scoped, staticSpec("a1", "team-a"), nil)

	// Secrets: namespace walls, and values never come back.
	var sum apitype.SecretSummary
	w.must(201, "POST", "/secrets", nsA, `{"id":"db","data":{"password":"hunter2"}}`, &sum)
	if sum.Namespace != "team-a" || !sum.EncryptedAtRest || !slices.Equal(sum.Keys, []string{"password"}) {
		t.Errorf("secret summary %+v", sum)
	}
	w.must(201, "POST", "/secrets", w.op, `{"id":"db","namespace":"team-b","data":{"password":"other"}}`, nil)
	w.must(403, "GET", "/secrets?namespace=team-b", nsA, "", nil)
	w.must(403, "DELETE", "/secrets/db?namespace=team-b", nsA, "", nil)
	var list []apitype.SecretSummary
	w.must(200, "GET", "/secrets", nsA, "", &list)
	if len(list) != 1 || list[0].Namespace != "team-a" {
		t.Errorf("ns admin secrets: %+v", list)
	}
	w.must(403, "POST", "/secrets", scoped, `{"id":"x","namespace":"team-a","data":{"k":"v"}}`, nil)
	r := w.call(nil, "GET", "/secrets/db", nsA, "")
	if r.code != 200 || bytes.Contains(r.body, []byte("hunter2")) {
		t.Errorf("GET secret: %s", r)
	}

	// Tokens: a namespace admin mints inside its namespace and lists only it.
	var mt auth.MintedView
	w.must(201, "POST", "/tokens", nsA, `{"name":"ci","admin":"view","namespace":"team-a"}`, &mt)
	var prov apitype.TokenProvenance
	w.must(200, "GET", "/tokens/"+mt.ID+"/provenance", nsA, "", &prov)
	if prov.MintedBy != "token:"+w.minted["ns admin"].ID || mt.ExpiresAt == nil {
		t.Errorf("minted %+v, %+v: want minted_by the ns admin token and an expiry", mt.TokenView, prov)
	}
	w.must(403, "POST", "/tokens", nsA, `{"name":"x","admin":"admin","deployments":["*"]}`, nil)
	var toks []auth.TokenView
	w.must(200, "GET", "/tokens", nsA, "", &toks)
	for _, tk := range toks {
		if tk.Namespace != "team-a" {
			t.Errorf("ns admin lists token %+v", tk.TokenSummary)
		}
	}
	w.must(404, "DELETE", "/tokens/"+w.minted["fleet admin"].ID, nsA, "", nil)

	// whoami.
	var who apitype.WhoAmI
	w.must(200, "GET", "/whoami", nsA, "", &who)
	if who.Caller != "app-token" || !who.Confined || who.Fleet || who.Namespace != "team-a" || !who.May.UseAdminRoutes || who.Token == nil || who.Token.Name != "team-a admin" {
		t.Errorf("whoami %+v", who)
	}
	w.must(200, "GET", "/whoami", w.op, "", &who)
	if who.Caller != "operator" || !who.Fleet || who.AdminScope != "admin" {
		t.Errorf("operator whoami %+v", who)
	}
}

func TestRevocationIsImmediate(t *testing.T) {
	w := newWorld(t)
	tok := w.callers["ns admin"]
	w.must(200, "GET", "/deployments", tok, "", nil)
	w.must(204, "DELETE", "/tokens/"+w.minted["ns admin"].ID, w.op, "", nil)
	w.must(401, "GET", "/deployments", tok, "", nil)
	w.must(401, "GET", "/whoami", tok, "", nil)
}

func TestSecretsInUse(t *testing.T) {
	w := newWorld(t)
	w.must(201, "POST", "/secrets", w.op, `{"id":"gate-key","namespace":"team-a","data":{"k":"v"}}`, nil)
	w.must(201, "POST", "/deployments", w.op, `{"id":"uses","namespace":"team-a","routes":[{"host":"g.test"}],
		"vm":{"driver":"process","port":8080,"start_command":"true","env_from":[{"secret":"gate-key","namespace":"team-b"}]}}`, nil)
	r := w.call(nil, "DELETE", "/secrets/gate-key?namespace=team-a", w.op, "")
	if r.code != 409 || !strings.Contains(string(r.body), "deployment uses") {
		t.Fatalf("delete in use: %s", r)
	}
	w.must(400, "DELETE", "/secrets/gate-key?namespace=team-a&force=1", w.op, "", nil)
	w.must(204, "DELETE", "/secrets/gate-key?namespace=team-a&force=true", w.op, "", nil)
	w.must(404, "GET", "/secrets/gate-key?namespace=team-a", w.op, "", nil)

	// Auth providers: validated and stamped; one a deployment inherits is
	// not deleted.
	var pv apitype.AuthProviderView
	w.must(201, "POST", "/auth-providers", w.callers["ns admin"], `{"name":"corp","provider":"jwt","jwt":{"jwks_url":"https://id.example/jwks","algorithms":["RS256"],"issuer":"https://id.example"}}`, &pv)
	if pv.Namespace != "team-a" || pv.CreatedAt == 0 {
		t.Errorf("provider %+v", pv)
	}
	w.must(400, "POST", "/auth-providers", w.op, `{"name":"bad","provider":"jwt"}`, nil)
	w.must(200, "POST", "/auth-providers", w.callers["ns admin"], `{"name":"corp","provider":"app-token"}`, nil)
	w.must(201, "POST", "/deployments", w.op, `{"id":"inherits","namespace":"team-a","routes":[{"host":"i.test"}],"upstreams":["127.0.0.1:1"],"auth":{"provider_ref":"corp"}}`, nil)
	w.must(409, "DELETE", "/auth-providers/team-a/corp", w.callers["ns admin"], "", nil)
	w.must(204, "DELETE", "/deployments/inherits", w.op, "", nil)
	w.must(204, "DELETE", "/auth-providers/team-a/corp", w.callers["ns admin"], "", nil)

	// Namespaces: declared, listed, refused while in use.
	var ne apitype.NamespaceEntry
	w.must(201, "POST", "/namespaces", w.op, `{"name":"team-c","description":"new team"}`, &ne)
	if !ne.Declared || ne.CreatedAt == nil {
		t.Errorf("declared %+v", ne)
	}
	w.must(200, "POST", "/namespaces", w.op, `{"name":"team-c"}`, nil)
	w.must(409, "DELETE", "/namespaces/team-a", w.op, "", nil)
	w.must(204, "DELETE", "/namespaces/team-c", w.op, "", nil)
}

// from returns a client whose connections come from ip (a 127.0.0.x
// address: the whole /8 is loopback).
func from(ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
}

// TestBrake: failures from one address lock it out — its wrong guesses are
// answered 429 — but the right password from it still passes (after 50
// wrong tries, every time); another address is unaffected.
func TestBrake(t *testing.T) {
	n := startNode(t, Options{AdminPassword: "pw", Brake: auth.BrakeConfig{Threshold: 3, SlowAfter: 100, Lockout: time.Hour, Pace: 20 * time.Millisecond}})
	one, two := from("127.0.0.1"), from("127.0.0.2")
	codes := map[int]int{}
	for i := range 50 {
		codes[n.call(one, "GET", "/whoami", basic("admin", "guess"+strconv.Itoa(i)), "").code]++
	}
	if codes[401] != 2 || codes[429] != 48 {
		t.Fatalf("50 wrong guesses answered %v; want 2 401s, then 429s", codes)
	}
	r := n.call(one, "GET", "/whoami", basic("admin", "guess"), "")
	if r.code != 429 {
		t.Fatalf("locked-out address, wrong password: %s, want 429", r)
	}
	if ra, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || ra <= 0 || ra > 3600 {
		t.Errorf("Retry-After = %q", r.header.Get("Retry-After"))
	}
	for i := range 3 {
		if r := n.call(one, "GET", "/whoami", basic("admin", "pw"), ""); r.code != 200 {
			t.Fatalf("locked-out address with the right password (#%d): %s, want 200", i+1, r)
		}
	}
	if r := n.call(two, "GET", "/whoami", basic("admin", "pw"), ""); r.code != 200 {
		t.Errorf("another address: %s, want 200", r)
	}
	if r := n.call(one, "GET", "/healthz", "", ""); r.code != 200 {
		t.Errorf("open route from the locked-out address: %s, want 200", r)
	}
}

// TestBrakeAcrossAddresses: rotating source addresses does not get around
// the brake: 200 guesses at the operator password from 20 addresses (10
// each, under each address's own threshold) are mostly refused, because
// failures are counted per target too; the operator still gets in.
func TestBrakeAcrossAddresses(t *testing.T) {
	const targetThreshold = 10
	n := startNode(t, Options{AdminPassword: "pw", Brake: auth.BrakeConfig{SlowAfter: 100, TargetThreshold: targetThreshold, Lockout: time.Hour, Pace: 20 * time.Millisecond}})
	// The operator has used berth from 127.0.0.1 before the attack.
	n.must(200, "GET", "/whoami", basic("admin", "pw"), "", nil)
	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	for a := range 20 {
		hc := from(fmt.Sprintf("127.0.0.%d", a+2))
		wg.Go(func() {
			for i := range 10 {
				r := n.call(hc, "GET", "/whoami", basic("admin", fmt.Sprintf("guess-%d-%d", a, i)), "")
				mu.Lock()
				codes[r.code]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if codes[200] != 0 || codes[401]+codes[429] != 200 {
		t.Fatalf("answers %v", codes)
	}
	// At most the threshold, plus the requests in flight when it was
	// reached, are answered other than 429.
	if got, bound := 200-codes[429], targetThreshold+20; got > bound {
		t.Errorf("%d of 200 guesses from 20 addresses answered other than 429 (%v); want at most %d", got, codes, bound)
	}
	if r := n.call(nil, "GET", "/whoami", basic("admin", "pw"), ""); r.code != 200 {
		t.Errorf("the operator after the attack: %s, want 200", r)
	}
	if r := n.call(from("127.0.0.99"), "GET", "/whoami", basic("admin", "pw"), ""); r.code != 200 {
		t.Errorf("the operator from a new address after the attack: %s, want 200", r)
	}
}

// TestBrakeIgnoresDataPlane: wrong logins that come through berth's data
// plane (marked Via berth) are refused before the brake, so they cannot
// lock out the address the proxy dials from — the operator's own loopback.
func TestBrakeIgnoresDataPlane(t *testing.T) {
	n := startNode(t, Options{AdminPassword: "pw", Brake: auth.BrakeConfig{Threshold: 3, SlowAfter: 100, TargetThreshold: 3, Lockout: time.Hour}})
	for i := range 11 {
		code, body := rawAdmin(t, n, "GET", "/whoami", n.s.AdminAddr(), "Via: 1.1 berth\r\nAuthorization: "+basic("admin", "guess"+strconv.Itoa(i))+"\r\n", "")
		if code != 403 || !strings.Contains(body, "not reachable through berth's data plane") {
			t.Fatalf("login through the data plane: %d %s, want 403", code, body)
		}
	}
	if r := n.call(nil, "GET", "/whoami", basic("admin", "wrong"), ""); r.code != 401 {
		t.Errorf("a first wrong login from loopback: %s, want 401 (nothing counted before it)", r)
	}
	n.must(200, "GET", "/whoami", basic("admin", "pw"), "", nil)
}

// TestAtRest: after minting tokens and writing secrets, no token secret and
// no secret value (nor secret key name) is anywhere in the data dir.
func TestAtRest(t *testing.T) {
	dir := t.TempDir()
	n := startNode(t, Options{DataDir: dir, AdminPassword: "pw"})
	op := basic("admin", "pw")
	var needles []string
	for i := range 3 {
		var m auth.MintedView
		n.must(201, "POST", "/tokens", op, fmt.Sprintf(`{"name":"t%d","admin":"admin","deployments":["*"]}`, i), &m)
		_, secret, err := auth.ParseToken(m.Token)
		if err != nil {
			t.Fatal(err)
		}
		needles = append(needles, m.Token, secret)
		// The token is used, so last_used_at is written too.
		n.must(200, "GET", "/whoami", bearer(m.Token), "", nil)
	}
	for i := range 3 {
		val := fmt.Sprintf("value-%d-%x", i, time.Now().UnixNano())
		key := fmt.Sprintf("keyname%dzz", i)
		n.must(201, "POST", "/secrets", op, fmt.Sprintf(`{"id":"s%d","namespace":"team-a","description":"descr%dzz","data":{%q:%q}}`, i, i, key, val), nil)
		// Overwrite and patch, so older versions pass through the WAL too.
		n.must(200, "PATCH", fmt.Sprintf("/secrets/s%d?namespace=team-a", i), op, fmt.Sprintf(`{"data":{"extra":%q}}`, val+"-patched"), nil)
		needles = append(needles, val, key, fmt.Sprintf("descr%dzz", i))
	}
	scan := func(when string) {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, nd := range needles {
				if bytes.Contains(b, []byte(nd)) {
					t.Errorf("%s: %s holds %q in plaintext", when, path, nd)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range testStoreValues(t, dir) {
			for _, nd := range needles {
				if strings.Contains(v, nd) {
					t.Errorf("%s: etcd key %s holds %q in plaintext", when, k, nd)
				}
			}
		}
	}
	scan("while running") // the WAL holds the recent writes
	n.stop()
	scan("after shutdown")
	files := []string{secrets.KeyFileName}
	if testStoreEtcd == nil {
		files = append(files, "berth.db")
	}
	for _, f := range files {
		fi, err := os.Stat(filepath.Join(dir, f))
		if err != nil {
			t.Errorf("%s: %v", f, err)
		} else if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v; want 0600", f, fi.Mode())
		}
	}
}

// TestWrongSecretKey: a restart with another BERTH_SECRET_KEY fails loudly
// and leaves the sealed data as it was; the right key still opens it.
func TestWrongSecretKey(t *testing.T) {
	dir := t.TempDir()
	n := startNode(t, Options{DataDir: dir, SecretKey: "the right key"})
	n.must(201, "POST", "/secrets", "", `{"id":"db","data":{"password":"hunter2"}}`, nil)
	n.stop()
	// The records as stored: berth.db, or the etcd store's values (but
	// its holder key, which each start claims).
	records := func() []byte {
		if testStoreEtcd != nil {
			vs := testStoreValues(t, dir)
			var b bytes.Buffer
			for _, k := range slices.Sorted(maps.Keys(vs)) {
				if !strings.HasSuffix(k, "/holder") {
					fmt.Fprintf(&b, "%s=%s\n", k, vs[k])
				}
			}
			return b.Bytes()
		}
		b, err := os.ReadFile(filepath.Join(dir, "berth.db"))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	before := records()
	for _, key := range []string{"another key", ""} { // "" falls back to a new key file
		_, err := tryStart(t, Options{DataDir: dir, SecretKey: key})
		if err == nil || !strings.Contains(err.Error(), "does not open") || !strings.Contains(err.Error(), "nothing was changed") {
			t.Fatalf("start with key %q: %v, want a loud refusal", key, err)
		}
	}
	if !bytes.Equal(before, records()) {
		t.Error("a refused start changed the stored records")
	}
	n = startNode(t, Options{DataDir: dir, SecretKey: "the right key"})
	var s apitype.SecretSummary
	n.must(200, "GET", "/secrets/db", "", "", &s)
	if !slices.Equal(s.Keys, []string{"password"}) {
		t.Errorf("after restart: %+v", s)
	}
}

func TestAdminAddrNeedsCredential(t *testing.T) {
	for _, tt := range []struct {
		addr string
		ok   bool
	}{
		{"127.0.0.1:9090", true}, {"127.1.2.3:0", true}, {"[::1]:9090", true}, {"localhost:9090", true},
		{"0.0.0.0:9090", false}, {":9090", false}, {"[::]:9090", false}, {"192.0.2.1:9090", false},
		{"example.com:9090", false}, {"garbage", false},
	} {
		if got := loopback(tt.addr); got != tt.ok {
			t.Errorf("loopback(%q) = %v, want %v", tt.addr, got, tt.ok)
		}
	}
	_, err := New(context.Background(), Options{AdminAddr: "0.0.0.0:0", ProxyAddr: "127.0.0.1:0", DataDir: t.TempDir(), Log: slog.New(slog.DiscardHandler)})
	if err == nil || !strings.Contains(err.Error(), "BERTH_ADMIN_PASSWORD") {
		t.Fatalf("New on 0.0.0.0 without a password: %v, want a refusal naming BERTH_ADMIN_PASSWORD", err)
	}
}

// TestQueryTokenOnlyOnShell: ?app_token= is a credential on the shell
// websocket route only.
func TestQueryTokenOnlyOnShell(t *testing.T) {
	w := newWorld(t)
	tok := strings.TrimPrefix(w.callers["ns admin"], "Bearer ")
	// Past the gate, the shell of a static deployment is refused by the
	// handler (400), not by the gate (401/403).
	if r := w.call(nil, "GET", "/deployments/a1/shell?app_token="+tok, "", ""); r.code != 400 {
		t.Errorf("shell with ?app_token=: %s, want 400 from the handler", r)
	}
	if r := w.call(nil, "GET", "/deployments/b1/shell?app_token="+tok, "", ""); r.code != 403 {
		t.Errorf("foreign shell with ?app_token=: %s, want 403", r)
	}
	for _, path := range []string{"/deployments/a1?app_token=", "/whoami?app_token=", "/deployments/a1/logs?app_token="} {
		if r := w.call(nil, "GET", path+tok, "", ""); r.code != 401 {
			t.Errorf("GET %s…: %s, want 401", path, r)
		}
	}
}

// TestOpenAdminTokensRefusedOnceGated: a token minted (or widened) while
// the admin API had no password could have been minted by anyone on the
// host; once berth starts with a password on the same data dir it is
// refused, saying why, while tokens minted with the password work.
func TestOpenAdminTokensRefusedOnceGated(t *testing.T) {
	dir := t.TempDir()
	n := startNode(t, Options{DataDir: dir, AdminPassword: "pw"})
	var kept, widened, open auth.MintedView
	n.must(201, "POST", "/tokens", basic("admin", "pw"), `{"name":"kept","admin":"admin","deployments":["*"]}`, &kept)
	n.must(201, "POST", "/tokens", basic("admin", "pw"), `{"name":"narrow","admin":"view","namespace":"team-a"}`, &widened)
	n.stop()

	// No password: any local caller mints, or widens a token.
	n = startNode(t, Options{DataDir: dir})
	n.must(201, "POST", "/tokens", "", `{"name":"open","admin":"admin","deployments":["*"]}`, &open)
	n.must(200, "PATCH", "/tokens/"+widened.ID, "", `{"admin":"admin","namespace":null,"deployments":["*"]}`, nil)
	n.must(200, "GET", "/whoami", bearer(open.Token), "", nil) // works while the admin is open
	n.stop()

	n = startNode(t, Options{DataDir: dir, AdminPassword: "pw"})
	for _, m := range []auth.MintedView{open, widened} {
		r := n.call(nil, "GET", "/deployments", bearer(m.Token), "")
		if r.code != 401 || !strings.Contains(string(r.body), "minted while the admin API had no password") || !strings.Contains(string(r.body), "mint a new one") {
			t.Errorf("token %q after a password was set: %s; want 401 saying why", m.Name, r)
		}
	}
	n.must(200, "GET", "/whoami", bearer(kept.Token), "", nil)
	// The operator still sees them, to revoke them.
	var toks []auth.TokenView
	n.must(200, "GET", "/tokens", basic("admin", "pw"), "", &toks)
	if len(toks) != 3 {
		t.Errorf("GET /tokens lists %d tokens, want 3", len(toks))
	}
	n.must(204, "DELETE", "/tokens/"+open.ID, basic("admin", "pw"), "", nil)
}
