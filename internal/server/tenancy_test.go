package server

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berth-dev/berth/internal/auth"
)

// tenants is a gated server with a team-a and a team-b namespace token.
type tenants struct {
	*node
	op, a, b string // Authorization values: operator, team-a, team-b
}

func startTenants(t *testing.T, o Options) *tenants {
	t.Helper()
	o.AdminPassword = "s3cret"
	o.Brake = auth.BrakeConfig{Threshold: 1 << 30, SlowAfter: 1 << 30}
	n := startNode(t, o)
	w := &tenants{node: n, op: basic("admin", "s3cret")}
	mint := func(ns string) string {
		var m auth.MintedView
		n.must(201, "POST", "/tokens", w.op, fmt.Sprintf(`{"name":%q,"admin":"admin","namespace":%q,"deployments":[]}`, ns, ns), &m)
		return bearer(m.Token)
	}
	w.a, w.b = mint("team-a"), mint("team-b")
	return w
}

// errorOf decodes the error envelope of r.
func errorOf(t *testing.T, r reply) string {
	t.Helper()
	var e struct {
		Error string `json:"error"`
	}
	if err := json.Unmarshal(r.body, &e); err != nil || e.Error == "" {
		t.Fatalf("%s: not the error envelope", r)
	}
	return e.Error
}

func (w *tenants) proxyGet(host, path string) resp {
	w.t.Helper()
	return get(w.t, "http://"+w.s.ProxyAddr()+path, host)
}

func siteBody(id, host, root string) string {
	return fmt.Sprintf(`{"id":%q,"routes":[{"host":%q}],"site":{"root":%q}}`, id, host, root)
}

// TestSiteRootConfinedToSitesDir reproduces issue 9's critical finding: a
// team-a token registered a site on / and read /etc/shadow, and the data
// directory's keys and database, through the proxy. Site roots now lie in
// the namespace's subtree of the sites directory, whoever asks; a symbolic
// link in that subtree cannot lead out of it.
func TestSiteRootConfinedToSitesDir(t *testing.T) {
	extra := t.TempDir()
	os.WriteFile(filepath.Join(extra, "index.html"), []byte("extra"), 0o644)
	w := startTenants(t, Options{SiteRootsAllow: []string{extra}})
	w.must(201, "POST", "/namespaces", w.op, `{"name":"team-a","domains":["a.test"]}`, nil)
	data := w.o.DataDir
	sites := filepath.Join(data, "sites")
	if err := os.WriteFile(filepath.Join(data, "probe.txt"), []byte("DATA-DIR-PROBE"), 0o600); err != nil {
		t.Fatal(err)
	}

	refused := []string{"/", "/etc", "/tmp/../etc", data, data + "/", sites, filepath.Join(sites, "team-b"),
		filepath.Join(sites, "team-a", "..", "team-b"), "../team-b", "../../../../etc", "../..", extra}
	for i, root := range refused {
		r := w.call(nil, "POST", "/deployments", w.a, siteBody(fmt.Sprintf("a-files%d", i), fmt.Sprintf("f%d.a.test", i), root))
		if r.code != 400 || !strings.HasPrefix(errorOf(t, r), "site.root: ") {
			t.Errorf("team-a root %q: %s, want 400 naming site.root", root, r)
		}
	}
	// Whoever asks: the operator cannot serve / or the data directory
	// either.
	for i, root := range []string{"/", "/etc", data, filepath.Join(data, "..")} {
		r := w.call(nil, "POST", "/deployments", w.op, siteBody(fmt.Sprintf("op-files%d", i), fmt.Sprintf("o%d.test", i), root))
		if r.code != 400 || !strings.HasPrefix(errorOf(t, r), "site.root: ") {
			t.Errorf("operator root %q: %s, want 400 naming site.root", root, r)
		}
	}
	for i := range refused {
		if r := w.proxyGet(fmt.Sprintf("f%d.a.test", i), "/etc/shadow"); r.code != 404 {
			t.Errorf("f%d.a.test: %d, want 404", i, r.code)
		}
	}

	// Symbolic links inside team-a's subtree that lead out of it.
	own := filepath.Join(sites, "team-a")
	if err := os.MkdirAll(filepath.Join(own, "www"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(own, "www", "index.html"), []byte("team-a site"), 0o644)
	os.MkdirAll(filepath.Join(sites, "team-b", "www"), 0o755)
	os.WriteFile(filepath.Join(sites, "team-b", "www", "index.html"), []byte("team-b site"), 0o644)
	for name, to := range map[string]string{"etc": "/etc", "data": data, "up": "../..", "b": "../team-b/www"} {
		if err := os.Symlink(to, filepath.Join(own, name)); err != nil {
			t.Fatal(err)
		}
		host := "link-" + name + ".a.test"
		w.must(201, "POST", "/deployments", w.a, siteBody("link-"+name, host, name), nil)
		for _, p := range []string{"/", "/passwd", "/shadow", "/probe.txt", "/secret.key", "/berth.db", "/index.html"} {
			r := w.proxyGet(host, p)
			if r.code != 404 || r.header.Get("X-Applb-Site") != "root-unreadable" {
				t.Errorf("root %s → %s: GET %s = %d %q, want 404 root-unreadable", name, to, p, r.code, r.body)
			}
		}
	}

	// What stays possible: a root in the namespace's own subtree, relative
	// or absolute; the operator's extra root for the operator.
	w.must(201, "POST", "/deployments", w.a, siteBody("a-www", "www.a.test", "www"), nil)
	w.must(201, "POST", "/deployments", w.a, siteBody("a-www2", "www2.a.test", filepath.Join(own, "www")), nil)
	w.must(201, "POST", "/deployments", w.op, siteBody("op-extra", "extra.test", extra), nil)
	for host, want := range map[string]string{"www.a.test": "team-a site", "www2.a.test": "team-a site", "extra.test": "extra"} {
		if r := w.proxyGet(host, "/"); r.code != 200 || string(r.body) != want {
			t.Errorf("%s: %d %q, want 200 %q", host, r.code, r.body, want)
		}
	}
}

// TestStoredSiteRootOutOfBounds: a stored site whose root is no longer
// allowed is not served (and logged), but kept: allowing its root again
// serves it again.
func TestStoredSiteRootOutOfBounds(t *testing.T) {
	extra, dir := t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(extra, "index.html"), []byte("extra"), 0o644)
	w := startTenants(t, Options{DataDir: dir, SiteRootsAllow: []string{extra}})
	w.must(201, "POST", "/deployments", w.op, siteBody("old", "old.test", extra), nil)
	if r := w.proxyGet("old.test", "/"); r.code != 200 {
		t.Fatalf("served before: %d", r.code)
	}
	w.stop()

	n := startNode(t, Options{DataDir: dir, AdminPassword: "s3cret"})
	if r := get(t, "http://"+n.s.ProxyAddr()+"/", "old.test"); r.code != 404 || string(r.body) == "extra" {
		t.Errorf("out-of-bounds stored root served: %d %q", r.code, r.body)
	}
	if _, ok := n.s.registry.Get("old"); ok {
		t.Error("out-of-bounds stored root loaded")
	}
	n.stop()

	n = startNode(t, Options{DataDir: dir, AdminPassword: "s3cret", SiteRootsAllow: []string{extra}})
	if r := get(t, "http://"+n.s.ProxyAddr()+"/", "old.test"); r.code != 200 || string(r.body) != "extra" {
		t.Errorf("allowed again: %d %q, want the site", r.code, r.body)
	}
}

// TestSitesDirMayNotHoldTheDataDir: neither the sites directory nor an
// allowed site root may contain the data directory.
func TestSitesDirMayNotHoldTheDataDir(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	for _, o := range []Options{
		{DataDir: data, SitesDir: dir},
		{DataDir: data, SitesDir: data},
		{DataDir: data, SiteRootsAllow: []string{"/"}},
		{DataDir: data, SiteRootsAllow: []string{dir}},
		{DataDir: data, SiteRootsAllow: []string{"relative"}},
	} {
		if n, err := tryStart(t, o); err == nil {
			n.stop()
			t.Errorf("sites %q allow %q: started, want refused", o.SitesDir, o.SiteRootsAllow)
		}
	}
}

func staticBody(id, ns string, routes string, up string) string {
	nsField := ""
	if ns != "" {
		nsField = fmt.Sprintf(`"namespace":%q,`, ns)
	}
	return fmt.Sprintf(`{"id":%q,%s"routes":%s,"upstreams":[%q]}`, id, nsField, routes, up)
}

// TestHostTakeover reproduces issue 9's finding that one tenant took
// another's host: a team-a token routing team-b's b-app.test got 201, and
// team-b's traffic went to team-a from then on. A host now belongs to one
// namespace: the operator assigns domains; a namespace token routes only
// hosts under its own; a rule sharing a host with another namespace's, or
// tying with any other deployment's, is 409, and the message names
// nothing the caller cannot see.
func TestHostTakeover(t *testing.T) {
	w := startTenants(t, Options{BaseDomain: "apps.test"})
	aUp, bUp := addr(backend(t, "team-a")), addr(backend(t, "team-b"))
	w.must(201, "POST", "/namespaces", w.op, `{"name":"team-a","domains":["a.test"]}`, nil)
	var ent map[string]any
	w.must(201, "POST", "/namespaces", w.op, `{"name":"team-b","domains":["B-App.test."]}`, &ent)
	if fmt.Sprint(ent["domains"]) != "[b-app.test]" {
		t.Errorf("declared entry %v, want domains [b-app.test]", ent)
	}
	w.must(201, "POST", "/deployments", w.b, staticBody("b-web", "", `[{"host":"b-app.test","path_prefix":"/"}]`, bUp), nil)

	attacks := []struct {
		id, routes string
		code       int
	}{
		{"a-take", `[{"host":"b-app.test","path_prefix":"/"}]`, 409},     // the reported attack
		{"a-take", `[{"host":"b-app.test","path_prefix":"/api"}]`, 409},  // more specific
		{"a-take", `[{"host":"b-app.test"}]`, 409},                       // less specific
		{"a-take", `[{"host_suffix":"b-app.test"}]`, 409},                // suffix on it
		{"a-take", `[{"host_suffix":"test","path_prefix":"/"}]`, 409},    // suffix above it
		{"a", `[{"host":"b-app.test","path_prefix":"/"}]`, 409},          // a smaller id ties no more
		{"a-take", `[{"host":"x.b-app.test"}]`, 409},                     // under team-b's domain
		{"a-take", `[{"path_prefix":"/"}]`, 403},                         // every host
		{"a-take", `[{"host":"c.test"}]`, 403},                           // nobody's, not team-a's
		{"a-take", `[{"host":"other.apps.test"}]`, 403},                  // not its own auto host
		{"a-take", `[{"host":"www.a.test"},{"path_prefix":"/x"}]`, 403},  // one host-less rule is enough
		{"a-take", `[{"host":"www.a.test"},{"host":"b-app.test"}]`, 409}, // the second rule
	}
	for _, tt := range attacks {
		r := w.call(nil, "POST", "/deployments", w.a, staticBody(tt.id, "", tt.routes, aUp))
		if r.code != tt.code {
			t.Errorf("team-a routes %s: %s, want %d", tt.routes, r, tt.code)
			continue
		}
		msg := errorOf(t, r)
		if !strings.HasPrefix(msg, "routes[") {
			t.Errorf("team-a routes %s: %q does not name the rule", tt.routes, msg)
		}
		if strings.Contains(msg, "team-b") || strings.Contains(msg, "b-web") {
			t.Errorf("team-a routes %s: %q reveals team-b's namespace or deployment", tt.routes, msg)
		}
		if tt.code == 409 && !strings.Contains(msg, "another namespace") {
			t.Errorf("team-a routes %s: %q does not say another namespace holds it", tt.routes, msg)
		}
	}
	// The takeover over an existing deployment of its own, by PUT.
	w.must(201, "POST", "/deployments", w.a, staticBody("a-web", "", `[{"host":"www.a.test"}]`, aUp), nil)
	if r := w.call(nil, "PUT", "/deployments/a-web", w.a, staticBody("a-web", "", `[{"host":"b-app.test","path_prefix":"/"}]`, aUp)); r.code != 409 {
		t.Errorf("PUT takeover: %s, want 409", r)
	}
	for _, p := range []string{"/", "/api/x"} {
		if r := w.proxyGet("b-app.test", p); r.code != 200 || !strings.HasPrefix(string(r.body), "team-b ") {
			t.Errorf("team-b's traffic %s: %d %q, want team-b's upstream", p, r.code, r.body)
		}
	}
	if r := w.proxyGet("www.a.test", "/"); !strings.HasPrefix(string(r.body), "team-a ") {
		t.Errorf("team-a's own host: %d %q", r.code, r.body)
	}

	// Equal specificity in the same namespace: 409 naming the deployment
	// the caller can see, instead of a tie broken by id.
	r := w.call(nil, "POST", "/deployments", w.a, staticBody("a-twin", "", `[{"host":"www.a.test"}]`, aUp))
	if r.code != 409 || !strings.Contains(errorOf(t, r), `"a-web"`) {
		t.Errorf("same rule in the same namespace: %s, want 409 naming a-web", r)
	}
	w.must(201, "POST", "/deployments", w.a, staticBody("a-api", "", `[{"host":"www.a.test","path_prefix":"/api"}]`, aUp), nil)
	w.must(201, "POST", "/deployments", w.a, staticBody("a-sub", "", `[{"host_suffix":"a.test"}]`, aUp), nil)
	// A namespace with no domains has its deployments' automatic hosts.
	c := w.mintNS(t, "team-c")
	w.must(201, "POST", "/deployments", c, `{"id":"c-app","upstreams":["`+aUp+`"]}`, nil)
	w.must(201, "POST", "/deployments", c, staticBody("c-two", "", `[{"host":"c-two.apps.test","path_prefix":"/v2"}]`, aUp), nil)

	// The operator routes anything, but the same conflicts hold, and it
	// sees whom it conflicts with.
	r = w.call(nil, "POST", "/deployments", w.op, staticBody("op-dup", "", `[{"host":"b-app.test","path_prefix":"/"}]`, aUp))
	if m := errorOf(t, r); r.code != 409 || !strings.Contains(m, `"b-web"`) {
		t.Errorf("operator duplicate: %s, want 409 naming b-web", r)
	}
	r = w.call(nil, "POST", "/deployments", w.op, staticBody("op-share", "", `[{"host":"b-app.test","path_prefix":"/op"}]`, aUp))
	if m := errorOf(t, r); r.code != 409 || !strings.Contains(m, `"b-web"`) || !strings.Contains(m, "shares hosts") {
		t.Errorf("operator sharing team-b's host: %s, want 409 naming b-web", r)
	}
	r = w.call(nil, "POST", "/deployments", w.op, staticBody("op-a", "", `[{"host":"new.a.test"}]`, aUp))
	if m := errorOf(t, r); r.code != 409 || !strings.Contains(m, `namespace "team-a"`) {
		t.Errorf("operator under team-a's domain: %s, want 409 naming team-a", r)
	}
	w.must(201, "POST", "/deployments", w.op, staticBody("op-free", "", `[{"host":"free.test"},{"path_prefix":"/fallback"}]`, aUp), nil)
	// Domains are one namespace's: an overlapping assignment is 409.
	if r := w.call(nil, "POST", "/namespaces", w.op, `{"name":"team-c","domains":["www.a.test"]}`); r.code != 409 {
		t.Errorf("overlapping domain: %s, want 409", r)
	}
	// The operator hands b-app.test over by assigning it: team-a may then
	// route beside team-b's rule (not tie with it).
	w.must(200, "POST", "/namespaces", w.op, `{"name":"team-b","domains":[]}`, nil)
	w.must(200, "POST", "/namespaces", w.op, `{"name":"team-a","domains":["a.test","b-app.test"]}`, nil)
	w.must(201, "POST", "/deployments", w.a, staticBody("a-new", "", `[{"host":"b-app.test","path_prefix":"/new"}]`, aUp), nil)
	if r := w.call(nil, "POST", "/deployments", w.a, staticBody("a-tie", "", `[{"host":"b-app.test","path_prefix":"/"}]`, aUp)); r.code != 409 {
		t.Errorf("tie after the handover: %s, want 409", r)
	}
	// Absent domains keep them.
	w.must(200, "POST", "/namespaces", w.op, `{"name":"team-a","description":"A"}`, nil)
	var list []map[string]any
	w.must(200, "GET", "/namespaces", w.a, "", &list)
	if len(list) != 1 || fmt.Sprint(list[0]["domains"]) != "[a.test b-app.test]" {
		t.Errorf("team-a's namespaces: %v", list)
	}
}

func (w *tenants) mintNS(t *testing.T, ns string) string {
	t.Helper()
	var m auth.MintedView
	w.must(201, "POST", "/tokens", w.op, fmt.Sprintf(`{"name":%q,"admin":"admin","namespace":%q,"deployments":[]}`, ns, ns), &m)
	return bearer(m.Token)
}

// TestWorkspaceStoresConfined: what is the operator's stays the operator's.
// A namespace credential may not use berth's own S3 credentials (an
// s3:// workspace store needs a secret of its own) nor name archive keys
// outside its namespace's prefix of the archive bucket; a fleet
// credential may do both.
func TestWorkspaceStoresConfined(t *testing.T) {
	w := startTenants(t, Options{ConfinedDrivers: []string{"process"}, WorkspaceArchiveBucket: "archives", BaseDomain: "apps.test"})
	w.must(201, "POST", "/namespaces", w.op, `{"name":"team-a","domains":["a.test"]}`, nil)
	vmBody := func(id, vmExtra string) string {
		return `{"id":"` + id + `","namespace":"team-a","routes":[{"host":"` + id + `.a.test"}],"vm":{"driver":"process","port":8080,"start_command":"true"` + vmExtra + `},"scaling":{"max_replicas":1}}`
	}
	for _, c := range []struct{ field, extra string }{
		{"vm.workspace.auth", `,"workspace":{"store":"s3://bucket/x"}`},
		{"vm.workspace_archive.s3_key", `,"workspace_archive":{"s3_key":"team-b/data.tgz"}`},
		{"vm.workspace_archive.s3_key", `,"workspace_archive":{"s3_key":"data.tgz"}`},
	} {
		r := w.call(nil, "POST", "/deployments", w.a, vmBody("ws", c.extra))
		if msg := errorOf(t, r); r.code != 403 || !strings.HasPrefix(msg, c.field+": ") {
			t.Errorf("team-a %s: %s, want 403 naming %s", c.extra, r, c.field)
		}
	}
	if r := w.call(nil, "POST", "/deployments", w.a, vmBody("ws", `,"workspace_archive":{"s3_key":"team-a/../team-b/data.tgz"}`)); r.code != 400 {
		t.Errorf("a key with .. segments: %s, want 400", r)
	}
	w.must(201, "POST", "/deployments", w.a, vmBody("own", `,"workspace_archive":{"s3_key":"team-a/data.tgz"}`), nil)
	w.must(201, "POST", "/deployments", w.op, vmBody("fleet", `,"workspace":{"store":"s3://bucket/x"}`), nil)
}
