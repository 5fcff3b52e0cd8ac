package server

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/guard"
	"github.com/berth-dev/berth/internal/notify"
	"github.com/berth-dev/berth/internal/sessions"
	"github.com/berth-dev/berth/internal/store"
)

// sharedRig is a server over a SQLite store the test holds too, so that it
// can write records behind the server's back, as another host sharing the
// store would, then hand the server the changes (syncShared) as the
// shared store's watch would.
type sharedRig struct {
	*harness
	st *store.Store
	op string // the operator's Authorization
}

func newSharedRig(t *testing.T) *sharedRig {
	t.Helper()
	st, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	h := startWith(t, "", func(o *Options) { o.Store, o.AdminPassword = st, "pw" })
	return &sharedRig{harness: h, st: st, op: basic("admin", "pw")}
}

func (r *sharedRig) sync(cs ...store.Change) {
	r.t.Helper()
	r.s.syncShared(r.t.Context(), cs)
}

// putStatic writes a static deployment straight into the store, as the
// registry writes one.
func (r *sharedRig) putStatic(id, host string, upstreams ...string) {
	r.t.Helper()
	s := apitype.DeploymentSpec{ID: id, Routes: []apitype.RouteRule{{Host: host}}, Upstreams: upstreams}
	raw, err := json.Marshal(&s)
	if err != nil {
		r.t.Fatal(err)
	}
	if _, err := r.st.PutDeployment(r.t.Context(), store.Deployment{ID: id, Spec: raw}, false, 0); err != nil {
		r.t.Fatal(err)
	}
}

// storeToken writes an admin app-token straight into the store (its
// secret's hash only, as package auth writes one) and returns it.
func (r *sharedRig) storeToken() (id, token string) {
	r.t.Helper()
	var idb [6]byte
	var sec [32]byte
	rand.Read(idb[:])
	rand.Read(sec[:])
	id = hex.EncodeToString(idb[:])
	secret := base64.RawURLEncoding.EncodeToString(sec[:])
	sum := sha256.Sum256([]byte(secret))
	err := r.st.PutToken(r.t.Context(), store.Token{ID: id, Name: "from another host", Admin: string(apitype.ScopeAdmin),
		Deployments: []string{"*"}, SecretSHA256: hex.EncodeToString(sum[:]), CreatedAt: time.Now().UTC().Truncate(time.Second)})
	if err != nil {
		r.t.Fatal(err)
	}
	return id, "berth_" + id + "_" + secret
}

func deploymentChange(id string, deleted bool) store.Change {
	return store.Change{Kind: store.KindDeployments, Key: []string{id}, Deleted: deleted}
}

// TestSyncSharedDeployment: a static deployment written straight into the
// store is served once synced; a change of its upstream is picked up; a
// sync of the unchanged record keeps the pool; once deleted and synced,
// its host answers as an unknown one.
func TestSyncSharedDeployment(t *testing.T) {
	r := newSharedRig(t)
	a, b := backend(t, "a"), backend(t, "b")
	unknown := get(t, r.proxy+"/", "web.example")
	if unknown.code == 200 {
		t.Fatalf("an unknown host answered 200: %s", unknown.body)
	}

	r.putStatic("web", "web.example", addr(a))
	if got := get(t, r.proxy+"/", "web.example"); got.code != unknown.code {
		t.Fatalf("before the sync: %d %s, want the unknown host's %d", got.code, got.body, unknown.code)
	}
	r.sync(deploymentChange("web", false))
	if got := get(t, r.proxy+"/x", "web.example"); got.code != 200 || !strings.HasPrefix(string(got.body), "a /x") {
		t.Fatalf("after the sync: %d %q, want upstream a", got.code, got.body)
	}
	e, _ := r.s.registry.Get("web")

	// Unchanged: nothing is rebuilt.
	r.sync(deploymentChange("web", false))
	if again, _ := r.s.registry.Get("web"); again != e || again.Pool != e.Pool {
		t.Error("a sync of the unchanged record rebuilt the deployment")
	}

	r.putStatic("web", "web.example", addr(b))
	r.sync(deploymentChange("web", false))
	if got := get(t, r.proxy+"/y", "web.example"); got.code != 200 || !strings.HasPrefix(string(got.body), "b /y") {
		t.Fatalf("after the upstream changed: %d %q, want upstream b", got.code, got.body)
	}

	if err := r.st.DeleteDeployment(t.Context(), "web"); err != nil {
		t.Fatal(err)
	}
	r.sync(deploymentChange("web", true))
	if got := get(t, r.proxy+"/", "web.example"); got.code != unknown.code || string(got.body) != string(unknown.body) {
		t.Errorf("after the delete: %d %q, want the unknown host's %d %q", got.code, got.body, unknown.code, unknown.body)
	}
	if _, ok := r.s.registry.Get("web"); ok {
		t.Error("the deleted deployment is still held")
	}
}

// TestSyncSharedToken: a token created straight in the store opens the
// admin API once synced, and no longer once deleted and synced.
func TestSyncSharedToken(t *testing.T) {
	r := newSharedRig(t)
	id, tok := r.storeToken()
	if got := r.do("GET", "/deployments", "", "", "Authorization", bearer(tok)); got.code != 401 {
		t.Fatalf("before the sync: %d %s, want 401", got.code, got.body)
	}
	r.sync(store.Change{Kind: store.KindTokens, Key: []string{id}})
	if got := r.do("GET", "/deployments", "", "", "Authorization", bearer(tok)); got.code != 200 {
		t.Fatalf("after the sync: %d %s, want 200", got.code, got.body)
	}
	if err := r.st.DeleteToken(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	r.sync(store.Change{Kind: store.KindTokens, Key: []string{id}, Deleted: true})
	if got := r.do("GET", "/deployments", "", "", "Authorization", bearer(tok)); got.code != 401 {
		t.Errorf("after the delete: %d %s, want 401", got.code, got.body)
	}
}

// TestSyncSharedGuardRule: a block rule created straight in the store
// blocks its host once synced, and no longer once deleted and synced.
func TestSyncSharedGuardRule(t *testing.T) {
	r := newSharedRig(t)
	a := backend(t, "a")
	if got := r.json("POST", "/deployments", `{"id":"web","routes":[{"host":"web.example"}],"upstreams":["`+addr(a)+`"]}`, "Authorization", r.op); got.code != 201 {
		t.Fatalf("create: %d %s", got.code, got.body)
	}
	n, err := guard.Normalize(apitype.RuleSpec{Action: apitype.RuleBlock, Match: apitype.RuleMatch{Host: "web.example"}})
	if err != nil {
		t.Fatal(err)
	}
	id := guard.ID(n.Action, n.Match)
	err = r.st.PutGuardRule(t.Context(), store.GuardRule{ID: id, Action: string(n.Action), Host: n.Match.Host, CreatedAt: time.Now().UTC()})
	if err != nil {
		t.Fatal(err)
	}
	if got := get(t, r.proxy+"/", "web.example"); got.code != 200 {
		t.Fatalf("before the sync: %d %s, want 200", got.code, got.body)
	}
	r.sync(store.Change{Kind: store.KindGuardRules, Key: []string{id}})
	if got := get(t, r.proxy+"/", "web.example"); got.code != 403 {
		t.Fatalf("after the sync: %d %s, want 403 (blocked)", got.code, got.body)
	}
	if err := r.st.DeleteGuardRules(t.Context(), []string{id}); err != nil {
		t.Fatal(err)
	}
	r.sync(store.Change{Kind: store.KindGuardRules, Key: []string{id}, Deleted: true})
	if got := get(t, r.proxy+"/", "web.example"); got.code != 200 {
		t.Errorf("after the delete: %d %s, want 200", got.code, got.body)
	}
}

// TestSyncSharedNamespace: a namespace declared straight in the store with
// a domain owns it on this host too: another namespace's deployment may
// not route under it (read from the store on every write), and deleting
// it hands the domain back.
func TestSyncSharedNamespace(t *testing.T) {
	r := newSharedRig(t)
	spec := `{"id":"intruder","namespace":"team-b","routes":[{"host":"app.owned.example"}],"upstreams":["127.0.0.1:1"]}`
	if _, _, err := r.st.PutNamespace(t.Context(), store.Namespace{Name: "team-a", Domains: []string{"owned.example"}}); err != nil {
		t.Fatal(err)
	}
	r.sync(store.Change{Kind: store.KindNamespaces, Key: []string{"team-a"}})
	if got := r.json("POST", "/deployments", spec, "Authorization", r.op); got.code != 409 {
		t.Fatalf("routing another namespace's domain: %d %s, want 409", got.code, got.body)
	}
	if err := r.st.DeleteNamespace(t.Context(), "team-a"); err != nil {
		t.Fatal(err)
	}
	r.sync(store.Change{Kind: store.KindNamespaces, Key: []string{"team-a"}, Deleted: true})
	if got := r.json("POST", "/deployments", spec, "Authorization", r.op); got.code != 201 {
		t.Errorf("after the namespace went: %d %s, want 201", got.code, got.body)
	}
}

// TestSyncSharedEverything: a Change with Kind "" (changes may have been
// missed) picks up every kind at once, and leaves what did not change as
// it was.
func TestSyncSharedEverything(t *testing.T) {
	r := newSharedRig(t)
	a, b := backend(t, "a"), backend(t, "b")
	if got := r.json("POST", "/deployments", `{"id":"kept","routes":[{"host":"kept.example"}],"upstreams":["`+addr(a)+`"]}`, "Authorization", r.op); got.code != 201 {
		t.Fatalf("create: %d %s", got.code, got.body)
	}
	kept, _ := r.s.registry.Get("kept")
	r.putStatic("web", "web.example", addr(b))
	_, tok := r.storeToken()
	n, _ := guard.Normalize(apitype.RuleSpec{Action: apitype.RuleBlock, Match: apitype.RuleMatch{Host: "kept.example", PathPrefix: "/blocked"}})
	if err := r.st.PutGuardRule(t.Context(), store.GuardRule{ID: guard.ID(n.Action, n.Match), Action: string(n.Action), Host: n.Match.Host, PathPrefix: n.Match.PathPrefix, CreatedAt: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.st.PutRateLimit(t.Context(), store.RateLimit{Deployment: "kept", RequestsPerSec: 0.001, Burst: 1, MaxClients: 1000}); err != nil {
		t.Fatal(err)
	}

	r.sync(store.Change{Kind: ""})
	if got := get(t, r.proxy+"/", "web.example"); got.code != 200 || !strings.HasPrefix(string(got.body), "b /") {
		t.Errorf("the deployment: %d %q, want upstream b", got.code, got.body)
	}
	if got := r.do("GET", "/deployments", "", "", "Authorization", bearer(tok)); got.code != 200 {
		t.Errorf("the token: %d %s, want 200", got.code, got.body)
	}
	if got := get(t, r.proxy+"/blocked", "kept.example"); got.code != 403 {
		t.Errorf("the guard rule: %d %s, want 403", got.code, got.body)
	}
	if got := r.do("GET", "/deployments/kept/rate-limit", "", "", "Authorization", r.op); got.code != 200 {
		t.Errorf("the rate limit: %d %s, want 200", got.code, got.body)
	}
	// One request per 1000 s, a burst of one: the second is refused.
	get(t, r.proxy+"/", "kept.example")
	if got := get(t, r.proxy+"/", "kept.example"); got.code != 429 {
		t.Errorf("the rate limit on the data plane: %d %s, want 429", got.code, got.body)
	}
	if e, _ := r.s.registry.Get("kept"); e.Pool != kept.Pool || e.Revision != kept.Revision {
		t.Error("the unchanged deployment was rebuilt")
	}
}

// TestSyncSharedSessionsAndWebhooks: a sign-in session and a webhook that
// another host's managers write to the store reach this host once synced
// (the session found by its secret, the webhook listed), and leave it
// once that host ends them.
func TestSyncSharedSessionsAndWebhooks(t *testing.T) {
	r := newSharedRig(t)
	ctx := t.Context()
	other, err := sessions.New(ctx, r.st, sessions.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	secret, x, err := other.Create(ctx, sessions.Session{Deployment: "web", Fingerprint: "fp", Subject: "ann"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := r.s.sessions.Lookup(secret, "web", "fp"); ok {
		t.Fatal("the session is known before the sync")
	}
	r.sync(store.Change{Kind: store.KindSessions, Key: []string{x.ID}}, store.Change{Kind: store.KindSessionHashes})
	if got, ok := r.s.sessions.Lookup(secret, "web", "fp"); !ok || got.ID != x.ID {
		t.Fatalf("after the sync: %+v, %v; want session %s", got, ok, x.ID)
	}
	if err := other.Revoke(ctx, x.ID); err != nil {
		t.Fatal(err)
	}
	r.sync(store.Change{Kind: store.KindSessions, Key: []string{x.ID}, Deleted: true})
	if _, ok := r.s.sessions.Lookup(secret, "web", "fp"); ok {
		t.Error("the revoked session still signs in after the sync")
	}

	hooks, err := notify.New(ctx, notify.Options{Store: r.st, Key: r.s.sealKey})
	if err != nil {
		t.Fatal(err)
	}
	defer hooks.Close()
	v, err := hooks.Add(ctx, apitype.WebhookSpec{URL: "https://hooks.example.com/x", Note: "from another host"})
	if err != nil {
		t.Fatal(err)
	}
	listed := func() bool {
		got := r.do("GET", "/security/webhooks", "", "", "Authorization", r.op)
		if got.code != 200 {
			t.Fatalf("GET /security/webhooks: %d %s", got.code, got.body)
		}
		return strings.Contains(string(got.body), v.ID)
	}
	if listed() {
		t.Fatal("the webhook is listed before the sync")
	}
	r.sync(store.Change{Kind: store.KindWebhooks, Key: []string{v.ID}})
	if !listed() {
		t.Fatal("the webhook is not listed after the sync")
	}
	if err := hooks.Delete(ctx, v.ID); err != nil {
		t.Fatal(err)
	}
	r.sync(store.Change{Kind: store.KindWebhooks, Key: []string{v.ID}, Deleted: true})
	if listed() {
		t.Error("the deleted webhook is still listed after the sync")
	}
}
