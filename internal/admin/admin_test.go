package admin

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/auth"
	"github.com/berth-dev/berth/internal/fleet"
	"github.com/berth-dev/berth/internal/namespaces"
	"github.com/berth-dev/berth/internal/proxy"
	"github.com/berth-dev/berth/internal/ratelimit"
	"github.com/berth-dev/berth/internal/registry"
	"github.com/berth-dev/berth/internal/secrets"
	"github.com/berth-dev/berth/internal/spec"
	"github.com/berth-dev/berth/internal/store"
	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/vmfake"
)

// The tests in this file drive the admin handlers directly (httptest)
// behind a real gate, over a real SQLite store, registry and namespace set,
// with vm deployments run by a real fleet.Manager on the in-memory driver:
// no root, no sandboxes.

type rig struct {
	t     *testing.T
	api   *API
	drv   *vmfake.Driver
	reg   *registry.Registry
	fleet *fleet.Manager
	rl    *ratelimit.Manager
}

var operator = "Basic " + base64.StdEncoding.EncodeToString([]byte("admin:pw"))

func newRig(t *testing.T, conf auth.Confinement) *rig { t.Helper(); return newRigWith(t, conf, nil) }

// newRigWith is newRig with the registry's options changed by mod.
func newRigWith(t *testing.T, conf auth.Confinement, mod func(*registry.Options)) *rig {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	tokens, err := auth.NewTokens(ctx, auth.TokensConfig{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, drv: vmfake.New(vmfake.Options{})}
	r.fleet = fleet.New(fleet.Options{Driver: r.drv, Tick: 50 * time.Millisecond})
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.fleet.Run(rctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		r.drv.Close()
	})
	ns := namespaces.New(st)
	// The rate limits wired as the server wires them (see
	// ratelimits_test.go).
	if r.rl, err = ratelimit.NewManager(ctx, st, ratelimit.Options{Changed: func(id string) { r.reg.Refresh(id) }}); err != nil {
		t.Fatal(err)
	}
	ro := registry.Options{
		Store: st, Pools: r.fleet, Domains: ns.Domains,
		Spec: spec.Options{BaseDomain: "apps.test", Drivers: r.fleet.DriverNames()},
		Limit: func(id string) proxy.Limiter {
			if l := r.rl.Limiter(id); l != nil {
				return l
			}
			return nil
		},
		Forget: r.rl.Forget,
	}
	if mod != nil {
		mod(&ro)
	}
	r.reg = registry.New(ro)
	if err := r.reg.Load(ctx); err != nil {
		t.Fatal(err)
	}
	sec, err := secrets.Open(ctx, st, secrets.Key{1, 2, 3})
	if err != nil {
		t.Fatal(err)
	}
	r.api = New(Options{
		Registry: r.reg, Fleet: r.fleet, Tokens: tokens, Namespaces: ns, Confinement: conf, Secrets: sec, RateLimits: r.rl,
		Gate: auth.New(auth.Config{Password: "pw", Tokens: tokens}),
	})
	return r
}

// do sends a request as cred (an Authorization value; "" for none) with a
// JSON body (none when body is ""), and optional header pairs.
func (r *rig) do(method, path, cred, body string, header ...string) *httptest.ResponseRecorder {
	r.t.Helper()
	var req *http.Request
	if body == "" {
		req = httptest.NewRequest(method, path, nil)
	} else {
		req = httptest.NewRequest(method, path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
	}
	if cred != "" {
		req.Header.Set("Authorization", cred)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	r.api.ServeHTTP(w, req)
	return w
}

// want checks a reply's status and, for an error, that its body is the
// envelope (only "error" and "code") with a message containing each of
// msgs.
func want(t *testing.T, w *httptest.ResponseRecorder, status int, msgs ...string) {
	t.Helper()
	if w.Code != status {
		t.Fatalf("status %d, want %d; body %s", w.Code, status, w.Body)
	}
	if status < 400 {
		return
	}
	var env map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &env); err != nil {
		t.Fatalf("error body %q is not JSON: %v", w.Body, err)
	}
	msg, ok := env["error"].(string)
	delete(env, "error")
	delete(env, "code")
	if !ok || len(env) != 0 {
		t.Fatalf("error body %s is not the envelope", w.Body)
	}
	for _, m := range msgs {
		if !strings.Contains(msg, m) {
			t.Errorf("error %q does not contain %q", msg, m)
		}
	}
}

func decode[T any](t *testing.T, w *httptest.ResponseRecorder) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(w.Body.Bytes(), &v); err != nil {
		t.Fatalf("reply %q: %v", w.Body, err)
	}
	return v
}

// mint mints an app-token as the operator and returns its Authorization
// value.
func (r *rig) mint(body string) string {
	r.t.Helper()
	w := r.do("POST", "/tokens", operator, body)
	want(r.t, w, http.StatusCreated)
	return "Bearer " + decode[map[string]any](r.t, w)["token"].(string)
}

const staticApp = `{"id": "web", "routes": [{"host": "web.example"}], "upstreams": ["127.0.0.1:9"]}`

// TestDeploymentErrors: each bad write is the envelope with the status its
// cause calls for and a message naming the field.
func TestDeploymentErrors(t *testing.T) {
	r := newRig(t, auth.Confinement{})
	for _, tt := range []struct {
		name, method, path, body string
		header                   []string
		status                   int
		msgs                     []string
	}{
		{"unknown nested key", "POST", "/deployments", `{"id": "web", "routes": [{"host": "web.example"}], "upstreams": ["127.0.0.1:9"], "scaling": {"min_replica": 1}}`, nil, 400, []string{"scaling.min_replica"}},
		{"bad host", "POST", "/deployments", `{"id": "web", "routes": [{"host": "bad host"}], "upstreams": ["127.0.0.1:9"]}`, nil, 400, []string{"routes[0].host"}},
		{"wrong type", "POST", "/deployments", `{"id": "web", "routes": "everywhere"}`, nil, 422, []string{"routes"}},
		{"malformed", "POST", "/deployments", `{"id": `, nil, 400, []string{"malformed JSON"}},
		{"dry_run", "POST", "/deployments?dry_run=yes", staticApp, nil, 400, []string{"dry_run", `"yes"`}},
		{"If-None-Match", "POST", "/deployments", staticApp, []string{"If-None-Match", `"abc"`}, 400, []string{"If-None-Match must be *"}},
		{"metadata upstream", "POST", "/deployments", `{"id": "web", "routes": [{"host": "web.example"}], "upstreams": ["127.0.0.1:9", "169.254.169.254:80"]}`, nil, 400, []string{"upstreams[1]"}},
		{"PUT of a missing one", "PUT", "/deployments/nope", `{"routes": [{"host": "nope.example"}], "upstreams": ["127.0.0.1:9"]}`, nil, 404, []string{`no deployment "nope"`}},
		{"scale a missing one", "PATCH", "/deployments/nope/scaling", `{"max_replicas": 2}`, nil, 404, []string{`"nope"`}},
		{"logs limit", "GET", "/deployments/nope/logs?limit=-1", "", nil, 400, []string{"limit"}},
		{"no such route", "POST", "/deployments/web/update/rollouts", "", nil, 501, []string{"POST /deployments/web/update/rollouts is not supported"}},
		{"wrong method", "PATCH", "/deployments", "", nil, 405, []string{"PATCH", "allowed"}},
		{"no image store", "GET", "/images", "", nil, 503, []string{"image inventory is not running"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			want(t, r.do(tt.method, tt.path, operator, tt.body, tt.header...), tt.status, tt.msgs...)
		})
	}
	if n := r.reg.Len(); n != 0 {
		t.Errorf("refused writes registered %d deployments", n)
	}
	// Text/plain is a 415, and no credential a 401.
	req := httptest.NewRequest("POST", "/deployments", strings.NewReader(staticApp))
	req.Header.Set("Content-Type", "text/plain")
	req.Header.Set("Authorization", operator)
	w := httptest.NewRecorder()
	r.api.ServeHTTP(w, req)
	want(t, w, http.StatusUnsupportedMediaType, "Content-Type")
	if w := r.do("GET", "/deployments", "", ""); w.Code != http.StatusUnauthorized {
		t.Errorf("no credential: %d, want 401", w.Code)
	}
}

// TestDeploymentCRUD: create, create-only, conditional get and put,
// delete, with the statuses and ETags app-lb gives.
func TestDeploymentCRUD(t *testing.T) {
	r := newRig(t, auth.Confinement{})
	w := r.do("POST", "/deployments", operator, staticApp)
	want(t, w, http.StatusCreated)
	etag := w.Header().Get("ETag")
	st := decode[map[string]any](t, w)
	if etag == "" || st["kind"] != "static" || st["spec"].(map[string]any)["id"] != "web" {
		t.Fatalf("create: ETag %q, body %s", etag, w.Body)
	}
	want(t, r.do("POST", "/deployments", operator, staticApp, "If-None-Match", "*"), http.StatusPreconditionFailed, "already exists")

	w = r.do("GET", "/deployments/web", operator, "")
	want(t, w, http.StatusOK)
	if w.Header().Get("ETag") != etag {
		t.Errorf("GET ETag %q, want %q", w.Header().Get("ETag"), etag)
	}
	want(t, r.do("GET", "/deployments/web", operator, "", "If-None-Match", etag), http.StatusNotModified)

	moved := `{"routes": [{"host": "web.example"}], "upstreams": ["127.0.0.1:10"]}`
	want(t, r.do("PUT", "/deployments/web", operator, moved, "If-Match", `"`+strings.Repeat("0", 64)+`"`), http.StatusPreconditionFailed, "If-Match")
	w = r.do("PUT", "/deployments/web", operator, moved, "If-Match", etag)
	want(t, w, http.StatusOK)
	if w.Header().Get("ETag") == etag {
		t.Error("PUT did not change the ETag")
	}
	if e, _ := r.reg.Get("web"); e.Upstreams[0] != "127.0.0.1:10" {
		t.Errorf("after PUT upstreams are %v", e.Upstreams)
	}

	w = r.do("GET", "/deployments", operator, "")
	want(t, w, http.StatusOK)
	if list := decode[[]map[string]any](t, w); len(list) != 1 || w.Header().Get(DryRunHeader) != "1" {
		t.Errorf("list: %s, %s %q", w.Body, DryRunHeader, w.Header().Get(DryRunHeader))
	}
	want(t, r.do("PATCH", "/deployments/web/scaling", operator, `{"max_replicas": 2}`), http.StatusBadRequest, "static")

	want(t, r.do("DELETE", "/deployments/web", operator, ""), http.StatusNoContent)
	want(t, r.do("GET", "/deployments/web", operator, ""), http.StatusNotFound, `no deployment "web"`)
	want(t, r.do("DELETE", "/deployments/web", operator, ""), http.StatusNotFound)
}

// TestDryRun: ?dry_run=true answers 200 with the status the deployment
// would have, marked with X-Berth-Dry-Run, and stores and starts nothing;
// a dry run that would fail fails the same way.
func TestDryRun(t *testing.T) {
	r := newRig(t, auth.Confinement{})
	app := `{"id": "app", "routes": [{"host": "app.example"}], "vm": {"driver": "process", "port": 8080, "start_command": "serve"}, "scaling": {"min_replicas": 1, "max_replicas": 1}}`
	w := r.do("POST", "/deployments?dry_run=true", operator, app)
	want(t, w, http.StatusOK)
	if w.Header().Get(DryRunHeader) != "true" || decode[map[string]any](t, w)["kind"] != "vm" || w.Header().Get("ETag") == "" {
		t.Errorf("dry run: %s %q, ETag %q, body %s", DryRunHeader, w.Header().Get(DryRunHeader), w.Header().Get("ETag"), w.Body)
	}
	want(t, r.do("GET", "/deployments/app", operator, ""), http.StatusNotFound)
	if _, ok := r.fleet.Pool("app"); ok || r.drv.Starts() != 0 {
		t.Errorf("a dry run made a pool (%v) or started %d replicas", ok, r.drv.Starts())
	}

	want(t, r.do("POST", "/deployments", operator, staticApp), http.StatusCreated)
	before, _ := r.reg.Get("web")
	w = r.do("PUT", "/deployments/web?dry_run=true", operator, `{"routes": [{"host": "web.example"}], "upstreams": ["127.0.0.1:10"]}`)
	want(t, w, http.StatusOK)
	if after, _ := r.reg.Get("web"); after != before {
		t.Error("a dry-run PUT replaced the deployment")
	}
	want(t, r.do("PUT", "/deployments/web?dry_run=true", operator, `{"routes": [{"host": "bad host"}], "upstreams": ["127.0.0.1:9"]}`), http.StatusBadRequest, "routes[0].host")
}

// TestScopeWalls: a namespace token reaches its own namespace only; a
// deployment of another namespace and one that does not exist are refused
// alike (no existence oracle), where the operator gets a 404; lists are
// narrowed; fleet-wide routes are refused to it; what it writes lands in
// its namespace.
func TestScopeWalls(t *testing.T) {
	r := newRig(t, auth.Confinement{})
	want(t, r.do("POST", "/deployments", operator, `{"id": "theirs", "namespace": "team-b", "routes": [{"host": "theirs.example"}], "upstreams": ["127.0.0.1:9"]}`), http.StatusCreated)
	team := r.mint(`{"name": "team-a", "admin": "admin", "namespace": "team-a", "deployments": []}`)

	w := r.do("POST", "/deployments", team, `{"id": "mine", "routes": [{"host": "mine.apps.test"}], "upstreams": ["127.0.0.1:9"]}`)
	want(t, w, http.StatusCreated)
	if e, _ := r.reg.Get("mine"); namespace(e) != "team-a" {
		t.Errorf("a namespace token's write landed in %q", namespace(e))
	}
	want(t, r.do("GET", "/deployments/mine", team, ""), http.StatusOK)

	foreign := r.do("GET", "/deployments/theirs", team, "")
	missing := r.do("GET", "/deployments/nothing", team, "")
	want(t, foreign, http.StatusForbidden, `"theirs"`)
	want(t, missing, http.StatusForbidden, `"nothing"`)
	if strings.Replace(foreign.Body.String(), "theirs", "nothing", 1) != missing.Body.String() {
		t.Errorf("a foreign and a missing deployment answer differently: %s vs %s", foreign.Body, missing.Body)
	}
	want(t, r.do("GET", "/deployments/nothing", operator, ""), http.StatusNotFound)
	for _, m := range []string{"PUT", "DELETE"} {
		body := ""
		if m == "PUT" {
			body = `{"routes": [{"host": "theirs.example"}], "upstreams": ["127.0.0.1:9"]}`
		}
		want(t, r.do(m, "/deployments/theirs", team, body), http.StatusForbidden)
	}
	if _, ok := r.reg.Get("theirs"); !ok {
		t.Fatal("a namespace token deleted another namespace's deployment")
	}

	// Writing into another namespace, or over its deployment, is refused.
	want(t, r.do("POST", "/deployments", team, `{"id": "sneaky", "namespace": "team-b", "routes": [{"host": "sneaky.apps.test"}], "upstreams": ["127.0.0.1:9"]}`), http.StatusForbidden)
	want(t, r.do("POST", "/deployments", team, `{"id": "theirs", "routes": [{"host": "theirs.apps.test"}], "upstreams": ["127.0.0.1:9"]}`), http.StatusForbidden)
	// Routing a host outside its domains is a 403 naming the field.
	want(t, r.do("POST", "/deployments", team, `{"id": "wide", "routes": [{"host": "wide.example"}], "upstreams": ["127.0.0.1:9"]}`), http.StatusForbidden, "routes[0]")

	w = r.do("GET", "/deployments", team, "")
	want(t, w, http.StatusOK)
	var ids []string
	for _, d := range decode[[]map[string]any](t, w) {
		ids = append(ids, d["spec"].(map[string]any)["id"].(string))
	}
	if !slices.Equal(ids, []string{"mine"}) {
		t.Errorf("a namespace token lists %v, want [mine]", ids)
	}
	if w := r.do("GET", "/deployments", operator, ""); len(decode[[]map[string]any](t, w)) != 2 {
		t.Errorf("the operator lists %s", w.Body)
	}

	want(t, r.do("POST", "/namespaces", team, `{"name": "team-c"}`), http.StatusForbidden)
	want(t, r.do("GET", "/metrics/cold-start", team, ""), http.StatusForbidden)

	// A view-scoped token may read, not write.
	view := r.mint(`{"name": "viewer", "admin": "view", "namespace": "team-a", "deployments": []}`)
	want(t, r.do("GET", "/namespaces", view, ""), http.StatusOK)
	want(t, r.do("GET", "/deployments/mine", view, ""), http.StatusForbidden)
}

// TestReplicaQuota: a namespace token's vm writes are held to the drivers
// its namespace may use and to the namespace's replica quota; a write that
// does not raise the sum passes.
func TestReplicaQuota(t *testing.T) {
	r := newRig(t, auth.Confinement{Drivers: map[string][]string{"team-a": {"process"}}, ReplicaQuota: 3})
	team := r.mint(`{"name": "team-a", "admin": "admin", "namespace": "team-a", "deployments": []}`)
	app := func(id string, max int) string {
		return `{"id": "` + id + `", "routes": [{"host": "` + id + `.apps.test"}], "vm": {"driver": "process", "port": 8080, "start_command": "serve"}, "scaling": {"min_replicas": 0, "max_replicas": ` + string(rune('0'+max)) + `}}`
	}
	want(t, r.do("POST", "/deployments", team, app("one", 2)), http.StatusCreated)
	want(t, r.do("POST", "/deployments", team, app("two", 2)), http.StatusForbidden, "scaling.max_replicas", "quota of 3")
	if _, ok := r.reg.Get("two"); ok {
		t.Error("a write over the quota was registered")
	}
	want(t, r.do("POST", "/deployments", team, app("two", 1)), http.StatusCreated)
	// The operator is not held to the quota.
	want(t, r.do("POST", "/deployments", operator, strings.Replace(app("three", 5), `"id"`, `"namespace": "team-a", "id"`, 1)), http.StatusCreated)
	// Over the quota now, a write that lowers the sum still passes.
	want(t, r.do("PUT", "/deployments/one", team, app("one", 1)), http.StatusOK)
	want(t, r.do("PUT", "/deployments/one", team, app("one", 2)), http.StatusForbidden, "quota")

	other := r.mint(`{"name": "team-b", "admin": "admin", "namespace": "team-b", "deployments": []}`)
	want(t, r.do("POST", "/deployments", other, app("bee", 1)), http.StatusForbidden, "vm.driver", `"process" is not allowed for namespace "team-b"`)
}

// TestTokens: mint, list, get and revoke answer the contract's shapes (the
// secret only in the mint's reply, never cached), a revoked token is
// refused at once, and a namespace token mints only inside its namespace.
func TestTokens(t *testing.T) {
	r := newRig(t, auth.Confinement{})
	w := r.do("POST", "/tokens", operator, `{"name": "ci", "admin": "admin", "deployments": ["web"], "expires_in_secs": 3600}`)
	want(t, w, http.StatusCreated)
	if w.Header().Get("Cache-Control") != "no-store" {
		t.Errorf("mint Cache-Control %q, want no-store", w.Header().Get("Cache-Control"))
	}
	minted := decode[map[string]any](t, w)
	keys := slices.Sorted(maps.Keys(minted))
	if !slices.Equal(keys, []string{"admin", "created_at", "deployments", "expires_at", "id", "name", "token"}) {
		t.Errorf("minted keys %v", keys)
	}
	id, secret := minted["id"].(string), minted["token"].(string)
	if id == "" || secret == "" || strings.Contains(secret, id) && secret == id {
		t.Errorf("minted id %q token %q", id, secret)
	}

	w = r.do("GET", "/tokens", operator, "")
	want(t, w, http.StatusOK)
	list := decode[[]map[string]any](t, w)
	if len(list) != 1 || list[0]["id"] != id || list[0]["token"] != nil || strings.Contains(w.Body.String(), secret) {
		t.Errorf("list %s", w.Body)
	}
	w = r.do("GET", "/tokens/"+id, operator, "")
	want(t, w, http.StatusOK)
	if strings.Contains(w.Body.String(), secret) || decode[map[string]any](t, w)["name"] != "ci" {
		t.Errorf("get %s", w.Body)
	}
	w = r.do("GET", "/tokens/"+id+"/provenance", operator, "")
	want(t, w, http.StatusOK)
	if p := decode[map[string]any](t, w); p["id"] != id || p["minted_by"] != "user:admin" {
		t.Errorf("provenance %s", w.Body)
	}

	for _, tt := range []struct {
		body string
		msg  string
	}{
		{`{"name": "x", "admin": "admin", "deployments": [], "expires_in_secs": -1}`, "expires_in_secs"},
		{`{"name": "x", "admin": "root", "deployments": []}`, "admin"},
		{`{"name": "x", "admin": "admin", "deployments": "all"}`, "deployments"},
	} {
		if w := r.do("POST", "/tokens", operator, tt.body); w.Code < 400 || w.Code >= 500 {
			t.Errorf("mint %s: %d, want a 4xx", tt.body, w.Code)
		} else {
			want(t, w, w.Code, tt.msg)
		}
	}

	// A namespace token mints only inside its namespace.
	team := r.mint(`{"name": "team-a", "admin": "admin", "namespace": "team-a", "deployments": []}`)
	want(t, r.do("POST", "/tokens", team, `{"name": "x", "admin": "view", "deployments": []}`), http.StatusForbidden, "namespace")
	want(t, r.do("POST", "/tokens", team, `{"name": "x", "admin": "view", "namespace": "team-b", "deployments": []}`), http.StatusForbidden)
	want(t, r.do("POST", "/tokens", team, `{"name": "x", "admin": "view", "namespace": "team-a", "deployments": []}`), http.StatusCreated)
	if w := r.do("GET", "/tokens", team, ""); len(decode[[]map[string]any](t, w)) != 2 {
		t.Errorf("a namespace token lists %s, want its namespace's two", w.Body)
	}
	if w := r.do("GET", "/tokens/"+id, team, ""); w.Code != http.StatusNotFound && w.Code != http.StatusForbidden {
		t.Errorf("a namespace token reading an operator's token: %d", w.Code)
	}

	// Revoked, the token is refused at once.
	ci := "Bearer " + secret
	want(t, r.do("GET", "/whoami", ci, ""), http.StatusOK)
	want(t, r.do("DELETE", "/tokens/"+id, operator, ""), http.StatusNoContent)
	if w := r.do("GET", "/whoami", ci, ""); w.Code != http.StatusUnauthorized {
		t.Errorf("a revoked token: %d, want 401", w.Code)
	}
	if w := r.do("DELETE", "/tokens/"+id, operator, ""); w.Code != http.StatusNotFound {
		t.Errorf("second revoke: %d, want 404", w.Code)
	}
}

// TestVMRoutes: logs, scaling and eviction of a vm deployment on the fake
// driver; exec answers 501, as the fake has no in-sandbox agent.
func TestVMRoutes(t *testing.T) {
	r := newRig(t, auth.Confinement{})
	app := `{"id": "app", "routes": [{"host": "app.example"}], "vm": {"driver": "process", "port": 8080, "start_command": "echo hello from the app; serve"}, "scaling": {"min_replicas": 1, "max_replicas": 2}, "health": {"path": "/"}}`
	want(t, r.do("POST", "/deployments", operator, app), http.StatusCreated)
	var sandbox string
	waitFor(t, "a ready replica", func() bool {
		w := r.do("GET", "/deployments/app", operator, "")
		st := decode[map[string]any](t, w)
		if st["ready"].(float64) < 1 {
			return false
		}
		sandbox = st["vms"].([]any)[0].(map[string]any)["sandbox_id"].(string)
		return true
	})
	w := r.do("GET", "/deployments/app/logs", operator, "")
	want(t, w, http.StatusOK)
	if !strings.Contains(w.Body.String(), sandbox) || !strings.Contains(w.Body.String(), "hello from the app") {
		t.Errorf("logs %q", w.Body)
	}
	want(t, r.do("GET", "/deployments/app/logs?follow=maybe", operator, ""), http.StatusBadRequest, "follow")

	w = r.do("PATCH", "/deployments/app/scaling", operator, `{"max_replicas": 3}`)
	want(t, w, http.StatusOK)
	if e, _ := r.reg.Get("app"); *e.Spec.Scaling.MaxReplicas != 3 || *e.Spec.Scaling.MinReplicas != 1 {
		t.Errorf("scaling after the patch %+v", e.Spec.Scaling)
	}
	want(t, r.do("PATCH", "/deployments/app/scaling", operator, `{"max_replicas": "lots"}`), http.StatusBadRequest, "max_replicas")

	want(t, r.do("POST", "/deployments/app/exec", operator, `{"command": "true"}`), http.StatusNotImplemented, "agent")
	want(t, r.do("DELETE", "/deployments/app/vms/berth-app-000000000000", operator, ""), http.StatusNotFound, "berth-app-000000000000")
	want(t, r.do("DELETE", "/deployments/app/vms/"+sandbox+"?force=yes", operator, ""), http.StatusBadRequest, "force")
	w = r.do("DELETE", "/deployments/app/vms/"+sandbox+"?force=true", operator, "")
	want(t, w, http.StatusOK)
	if decode[map[string]any](t, w)["outcome"] != "killed" || !r.drv.Stopped(sandbox) {
		t.Errorf("evict: %s, stopped %v", w.Body, r.drv.Stopped(sandbox))
	}
	// A static deployment has no VMs to read.
	want(t, r.do("POST", "/deployments", operator, staticApp), http.StatusCreated)
	if w := r.do("GET", "/deployments/web/logs", operator, ""); w.Code < 400 || w.Code >= 500 {
		t.Errorf("logs of a static deployment: %d", w.Code)
	}
}

// TestNamespaces: declaring needs the fleet wall, a bad name is a 400
// naming it, and a namespace token lists only its own.
func TestNamespaces(t *testing.T) {
	r := newRig(t, auth.Confinement{})
	want(t, r.do("POST", "/namespaces", operator, `{"name": "team-a", "domains": ["a.example"]}`), http.StatusCreated)
	want(t, r.do("POST", "/namespaces", operator, `{"name": "team-b"}`), http.StatusCreated)
	want(t, r.do("POST", "/namespaces", operator, `{"name": "Bad Name"}`), http.StatusBadRequest, "name")
	want(t, r.do("POST", "/namespaces", operator, `{"name": "team-c", "domains": ["x.a.example"]}`), http.StatusConflict, "domains[0]")
	team := r.mint(`{"name": "team-a", "admin": "admin", "namespace": "team-a", "deployments": []}`)
	w := r.do("GET", "/namespaces", team, "")
	want(t, w, http.StatusOK)
	if strings.Contains(w.Body.String(), "team-b") || !strings.Contains(w.Body.String(), "team-a") {
		t.Errorf("a namespace token lists %s", w.Body)
	}
	want(t, r.do("DELETE", "/namespaces/team-b", team, ""), http.StatusForbidden)
	want(t, r.do("DELETE", "/namespaces/team-b", operator, ""), http.StatusNoContent)
	if w := r.do("DELETE", "/namespaces/team-b", operator, ""); w.Code != http.StatusNotFound {
		t.Errorf("second delete: %d, want 404", w.Code)
	}
}

// waitFor polls cond until it holds; the limit only guards against a hang.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestMetricsWalls: GET /metrics reports a vm replica's usage as the
// driver measures it; a namespace token sees (and counts) its own
// deployments only.
func TestMetricsWalls(t *testing.T) {
	r := newRig(t, auth.Confinement{})
	app := `{"id": "app", "namespace": "team-a", "routes": [{"host": "app.example"}], "vm": {"driver": "process", "port": 8080, "start_command": "serve"}, "scaling": {"min_replicas": 1, "max_replicas": 1}}`
	want(t, r.do("POST", "/deployments", operator, app), http.StatusCreated)
	want(t, r.do("POST", "/deployments", operator, staticApp), http.StatusCreated)
	var sandbox string
	waitFor(t, "a ready replica", func() bool {
		st := decode[map[string]any](t, r.do("GET", "/deployments/app", operator, ""))
		if st["ready"].(float64) < 1 {
			return false
		}
		sandbox = st["vms"].([]any)[0].(map[string]any)["sandbox_id"].(string)
		return true
	})
	if err := r.drv.SetUsage(sandbox, vm.Usage{CPUPercent: 12.5, MemoryBytes: 3 << 20}); err != nil {
		t.Fatal(err)
	}
	type metricsReply struct {
		Deployments []struct {
			ID   string `json:"id"`
			Pool struct {
				CPUPercent  *float64 `json:"cpu_percent"`
				MemoryBytes *int64   `json:"memory_bytes"`
			} `json:"pool"`
		} `json:"deployments"`
		Tracked int `json:"tracked_deployments"`
	}
	w := r.do("GET", "/metrics?deployment=app", operator, "")
	want(t, w, http.StatusOK)
	m := decode[metricsReply](t, w)
	if len(m.Deployments) != 1 || m.Tracked != 2 {
		t.Fatalf("operator metrics: %s", w.Body)
	}
	if p := m.Deployments[0].Pool; p.CPUPercent == nil || *p.CPUPercent != 12.5 || p.MemoryBytes == nil || *p.MemoryBytes != 3<<20 {
		t.Errorf("pool usage %s, want 12.5%% and 3 MiB", w.Body)
	}

	team := r.mint(`{"name": "team-a", "admin": "view", "namespace": "team-a", "deployments": []}`)
	w = r.do("GET", "/metrics", team, "")
	want(t, w, http.StatusOK)
	m = decode[metricsReply](t, w)
	if len(m.Deployments) != 1 || m.Deployments[0].ID != "app" || m.Tracked != 1 {
		t.Errorf("a namespace token's metrics: %s", w.Body)
	}
	want(t, r.do("GET", "/metrics?limit=x", operator, ""), http.StatusBadRequest, "limit")
}

// TestSecrets: a secret's values never come back; a namespace token reaches
// its own namespace's secrets only, refused alike whether the other
// namespace's secret exists or not; a token that does not administer the
// namespace reads but does not write;
// a secret a deployment references is not deleted without force.
func TestSecrets(t *testing.T) {
	r := newRig(t, auth.Confinement{})
	w := r.do("POST", "/secrets", operator, `{"id": "db", "namespace": "team-b", "data": {"password": "hunter2"}}`)
	want(t, w, http.StatusCreated)
	if strings.Contains(w.Body.String(), "hunter2") || !slices.Equal(decode[struct{ Keys []string }](t, w).Keys, []string{"password"}) {
		t.Errorf("create: %s", w.Body)
	}
	want(t, r.do("PUT", "/secrets/db?namespace=team-b", operator, `{"data": {"password": "hunter3"}}`), http.StatusOK)
	w = r.do("GET", "/secrets/db?namespace=team-b", operator, "")
	want(t, w, http.StatusOK)
	if strings.Contains(w.Body.String(), "hunter") {
		t.Errorf("GET shows a value: %s", w.Body)
	}
	want(t, r.do("GET", "/secrets/db", operator, ""), http.StatusNotFound, `no secret "db"`)
	want(t, r.do("POST", "/secrets", operator, `{"id": "x", "data": {}}`), http.StatusBadRequest, "data")
	want(t, r.do("POST", "/secrets", operator, `{"id": "../x", "data": {"k": "v"}}`), http.StatusBadRequest, "id")

	team := r.mint(`{"name": "team-a", "admin": "admin", "namespace": "team-a", "deployments": []}`)
	exists := r.do("GET", "/secrets/db?namespace=team-b", team, "")
	missing := r.do("GET", "/secrets/nope?namespace=team-b", team, "")
	want(t, exists, http.StatusForbidden, `"team-b"`)
	want(t, missing, http.StatusForbidden)
	if exists.Body.String() != missing.Body.String() {
		t.Errorf("another namespace's secret answers differently when it exists: %s vs %s", exists.Body, missing.Body)
	}
	want(t, r.do("DELETE", "/secrets/db?namespace=team-b", team, ""), http.StatusForbidden)
	want(t, r.do("POST", "/secrets", team, `{"id": "mine", "data": {"k": "v"}}`), http.StatusCreated)
	w = r.do("GET", "/secrets", team, "")
	want(t, w, http.StatusOK)
	if list := decode[[]map[string]any](t, w); len(list) != 1 || list[0]["namespace"] != "team-a" {
		t.Errorf("a namespace token lists %s", w.Body)
	}
	// A token scoped to some deployments reads its namespace's secrets but
	// does not write them; a view token does neither (the routes need admin).
	some := r.mint(`{"name": "one-app", "admin": "admin", "namespace": "team-a", "deployments": ["web"]}`)
	want(t, r.do("GET", "/secrets/mine", some, ""), http.StatusOK)
	want(t, r.do("POST", "/secrets", some, `{"id": "mine", "data": {"k": "w"}}`), http.StatusForbidden, "only view")
	view := r.mint(`{"name": "viewer", "admin": "view", "namespace": "team-a", "deployments": []}`)
	want(t, r.do("GET", "/secrets/mine", view, ""), http.StatusForbidden, "admin")

	// Referenced by a deployment: deleted only with force.
	app := `{"id": "app", "namespace": "team-b", "routes": [{"host": "app.example"}], "vm": {"driver": "process", "port": 8080, "start_command": "serve", "env_from": [{"secret": "db"}]}, "scaling": {"min_replicas": 0, "max_replicas": 1}}`
	want(t, r.do("POST", "/deployments", operator, app), http.StatusCreated)
	want(t, r.do("DELETE", "/secrets/db?namespace=team-b", operator, ""), http.StatusConflict, "deployment app", "force=true")
	want(t, r.do("DELETE", "/secrets/db?namespace=team-b&force=true", operator, ""), http.StatusNoContent)
	want(t, r.do("GET", "/secrets/db?namespace=team-b", operator, ""), http.StatusNotFound)
}

// TestDrainRoutes: the drain routes' statuses and bodies.
func TestDrainRoutes(t *testing.T) {
	r := newRig(t, auth.Confinement{})
	want(t, r.do("POST", "/deployments", operator, `{"id": "web", "routes": [{"host": "web.example"}], "upstreams": ["127.0.0.1:9", "127.0.0.1:10"]}`), http.StatusCreated)
	w := r.do("PUT", "/deployments/web/upstreams/127.0.0.1:9/drain", operator, `{"reason": "deploy"}`)
	want(t, w, http.StatusOK)
	if st := decode[map[string]any](t, w); st["state"] != "drained" || st["reason"] != "deploy" {
		t.Errorf("drain: %s", w.Body)
	}
	want(t, r.do("PUT", "/deployments/web/upstreams/127.0.0.1:10/drain", operator, ""), http.StatusConflict, "last healthy", "force")
	want(t, r.do("PUT", "/deployments/web/upstreams/127.0.0.1:10/drain", operator, `{"force": true}`), http.StatusOK)
	want(t, r.do("PUT", "/deployments/web/upstreams/127.0.0.1:11/drain", operator, ""), http.StatusNotFound, `"127.0.0.1:11"`)
	want(t, r.do("PUT", "/deployments/web/upstreams/127.0.0.1:9/drain", operator, `{"reason": "`+strings.Repeat("x", 513)+`"}`), http.StatusBadRequest, "reason")
	want(t, r.do("PUT", "/deployments/web/upstreams/127.0.0.1:9/drain", operator, `{"force": "yes"}`), http.StatusUnprocessableEntity, "force")
	w = r.do("DELETE", "/deployments/web/upstreams/127.0.0.1:9/drain", operator, "")
	want(t, w, http.StatusOK)
	if st := decode[map[string]any](t, w); st["state"] != "accepting" {
		t.Errorf("undrain: %s", w.Body)
	}
}

// TestAuthProviders: providers are written and read behind their
// namespace's wall (refused alike whether another namespace's provider
// exists), and a bad field is a 400 naming it; a namespace that holds
// deployments is not deleted.
func TestAuthProviders(t *testing.T) {
	r := newRig(t, auth.Confinement{})
	google := `{"name": "corp", "namespace": "team-b", "provider": ["google"], "client_id": "cid", "client_secret": {"secret": "oauth"}, "allowed_domains": ["example.com"]}`
	w := r.do("POST", "/auth-providers", operator, google)
	want(t, w, http.StatusCreated)
	if v := decode[map[string]any](t, w); v["client_secret"].(map[string]any)["namespace"] != "team-b" {
		t.Errorf("the provider's secret is not bound to its namespace: %s", w.Body)
	}
	want(t, r.do("POST", "/auth-providers", operator, google), http.StatusOK)
	want(t, r.do("POST", "/auth-providers", operator, `{"name": "bad", "provider": ["github"]}`), http.StatusBadRequest, "provider[0]")

	team := r.mint(`{"name": "team-a", "admin": "admin", "namespace": "team-a", "deployments": []}`)
	exists := r.do("GET", "/auth-providers/team-b/corp", team, "")
	missing := r.do("GET", "/auth-providers/team-b/nope", team, "")
	want(t, exists, http.StatusForbidden)
	if exists.Body.String() != missing.Body.String() {
		t.Errorf("another namespace's provider answers differently when it exists: %s vs %s", exists.Body, missing.Body)
	}
	want(t, r.do("POST", "/auth-providers", team, strings.Replace(google, "team-b", "team-a", 1)), http.StatusCreated)
	w = r.do("GET", "/auth-providers", team, "")
	if list := decode[[]map[string]any](t, w); len(list) != 1 || list[0]["namespace"] != "team-a" {
		t.Errorf("a namespace token lists %s", w.Body)
	}
	want(t, r.do("DELETE", "/auth-providers/team-b/corp", team, ""), http.StatusForbidden)

	// This rig's registry compiles no gates (the server's does: its
	// tests sign in through inherited providers), so a gated deployment
	// is refused here naming auth; a namespace holding a deployment is
	// not deleted.
	gated := `{"id": "gated", "namespace": "team-b", "routes": [{"host": "gated.example"}], "upstreams": ["127.0.0.1:9"], "auth": {"provider_ref": "corp"}}`
	want(t, r.do("POST", "/deployments", operator, gated), http.StatusBadRequest, "auth")
	want(t, r.do("POST", "/deployments", operator, `{"id": "app", "namespace": "team-b", "routes": [{"host": "app.example"}], "upstreams": ["127.0.0.1:9"]}`), http.StatusCreated)
	want(t, r.do("POST", "/namespaces", operator, `{"name": "team-b"}`), http.StatusCreated)
	want(t, r.do("DELETE", "/namespaces/team-b", operator, ""), http.StatusConflict, "app")
	want(t, r.do("DELETE", "/deployments/app", operator, ""), http.StatusNoContent)
	want(t, r.do("DELETE", "/auth-providers/team-b/corp", operator, ""), http.StatusNoContent)
	want(t, r.do("GET", "/auth-providers/team-b/corp", operator, ""), http.StatusNotFound)
}

// TestWhoamiAndHealthz: /healthz needs no credential; /whoami describes the
// credential presented; a token patch changes what it may do, and a
// namespace token cannot patch itself out of its namespace.
func TestWhoamiAndHealthz(t *testing.T) {
	r := newRig(t, auth.Confinement{})
	w := r.do("GET", "/healthz", "", "")
	if w.Code != http.StatusOK || w.Body.String() != "ok\n" || w.Header().Get("x-heyo-revision") != "unknown" {
		t.Errorf("healthz: %d %q revision %q", w.Code, w.Body, w.Header().Get("x-heyo-revision"))
	}
	w = r.do("GET", "/whoami", operator, "")
	want(t, w, http.StatusOK)
	if me := decode[map[string]any](t, w); me["caller"] != "operator" || me["admin_scope"] != "admin" || me["fleet"] != true || me["confined"] != false {
		t.Errorf("operator whoami %s", w.Body)
	}

	mw := r.do("POST", "/tokens", operator, `{"name": "team", "admin": "view", "namespace": "team-a", "deployments": []}`)
	want(t, mw, http.StatusCreated)
	minted := decode[map[string]any](t, mw)
	team := "Bearer " + minted["token"].(string)
	w = r.do("GET", "/whoami", team, "")
	want(t, w, http.StatusOK)
	if me := decode[map[string]any](t, w); me["caller"] != "app-token" || me["admin_scope"] != "view" || me["fleet"] != false || me["confined"] != true || me["namespace"] != "team-a" {
		t.Errorf("namespace token whoami %s", w.Body)
	}

	id := minted["id"].(string)
	w = r.do("PATCH", "/tokens/"+id, operator, `{"admin": "admin", "name": "team admin"}`)
	want(t, w, http.StatusOK)
	if p := decode[map[string]any](t, w); p["admin"] != "admin" || p["name"] != "team admin" || p["namespace"] != "team-a" {
		t.Errorf("patched %s", w.Body)
	}
	if me := decode[map[string]any](t, r.do("GET", "/whoami", team, "")); me["admin_scope"] != "admin" {
		t.Errorf("after the patch whoami says %v", me["admin_scope"])
	}
	if w := r.do("PATCH", "/tokens/"+id, team, `{"namespace": null}`); w.Code < 400 || w.Code >= 500 {
		t.Errorf("a namespace token unconfining itself: %d %s", w.Code, w.Body)
	}
	if me := decode[map[string]any](t, r.do("GET", "/whoami", team, "")); me["namespace"] != "team-a" {
		t.Errorf("after a refused patch the token's namespace is %v", me["namespace"])
	}
	want(t, r.do("PATCH", "/tokens/"+id, operator, `{"admin": "root"}`), http.StatusBadRequest, "admin")
}

// fakeCerts is a CertSource with fixed answers.
type fakeCerts struct{}

func (fakeCerts) Certs() []apitype.CertStatus {
	return []apitype.CertStatus{{Host: "a.example", NotAfter: "2027-01-01T00:00:00Z", Issuer: "pebble", NeedsRenewal: false}}
}

func (fakeCerts) Pending() []apitype.CertPending {
	return []apitype.CertPending{{Host: "b.example", State: "backoff", RetryAt: 1700000000, Failures: 2, LastError: "no"}}
}

// TestCerts: GET /certs is the contract's CertStatus[] (an empty list, not
// null, when berth serves no HTTPS), and with /certs/pending fleet-wide
// only: a namespace token is refused.
func TestCerts(t *testing.T) {
	r := newRig(t, auth.Confinement{})
	w := r.do("GET", "/certs", operator, "")
	want(t, w, http.StatusOK)
	if strings.TrimSpace(w.Body.String()) != "[]" {
		t.Errorf("GET /certs without HTTPS = %s, want []", w.Body)
	}
	r.api.o.Certs = fakeCerts{}
	w = r.do("GET", "/certs", operator, "")
	want(t, w, http.StatusOK)
	if got := decode[[]map[string]any](t, w); len(got) != 1 || got[0]["host"] != "a.example" || got[0]["needs_renewal"] != false || len(got[0]) != 4 {
		t.Errorf("GET /certs = %s", w.Body)
	}
	w = r.do("GET", "/certs/pending", operator, "")
	want(t, w, http.StatusOK)
	if got := decode[[]apitype.CertPending](t, w); len(got) != 1 || got[0].State != "backoff" || got[0].Failures != 2 {
		t.Errorf("GET /certs/pending = %s", w.Body)
	}
	team := r.mint(`{"name": "team-a", "admin": "admin", "namespace": "team-a", "deployments": []}`)
	for _, p := range []string{"/certs", "/certs/pending"} {
		want(t, r.do("GET", p, team, ""), http.StatusForbidden)
	}
}
