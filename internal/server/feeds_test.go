package server

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mmcdole/gofeed"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/auth"
	"github.com/berth-dev/berth/internal/contracttest"
)

func decode(t *testing.T, b []byte, out any) {
	t.Helper()
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
}

// proxyGetAuth is a GET through the data plane with an Authorization.
func proxyGetAuth(t *testing.T, n *node, host, path, authz string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+n.s.ProxyAddr()+path, nil)
	req.Host = host
	if authz != "" {
		req.Header.Set("Authorization", authz)
	}
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// TestFeeds: a deployment that asks (feed.announce, feed.issues) publishes
// its lifecycle and its upstream's health flip to its namespace's feed,
// one that does not ask publishes nothing; the feed reads as RSS and as
// the contract's FeedEvent[] on /feeds/{ns}, and as RSS behind the
// deployment's gate at feed.expose; a namespace-confined token sees its
// own namespace only and cannot tell another namespace from none; the
// events are there after a restart.
func TestFeeds(t *testing.T) {
	c := contracttest.MustLoad(t)
	w := startTenants(t, Options{})
	flaky := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "app") }))
	defer flaky.Close()
	up := addr(flaky)

	loud := func(host string) string {
		return `{"id":"loud","namespace":"team-a","routes":[{"host":"` + host + `"}],"upstreams":["` + up + `"],` +
			`"auth":{"provider":"app-token"},"feed":{"announce":true,"issues":true,"expose":"/events.xml"}}`
	}
	quiet := `{"id":"quiet","namespace":"team-a","routes":[{"host":"quiet.test"}],"upstreams":["` + up + `"]}`
	w.must(201, "POST", "/deployments", w.op, loud("loud.test"), nil)
	w.must(200, "PUT", "/deployments/loud", w.op, loud("loud.test"), nil)
	w.must(201, "POST", "/deployments", w.op, quiet, nil)
	w.must(200, "PUT", "/deployments/quiet", w.op, quiet, nil)
	w.must(204, "DELETE", "/deployments/quiet", w.op, "", nil)
	w.must(201, "POST", "/deployments", w.op, quiet, nil)
	// A dry run publishes nothing.
	w.must(200, "PUT", "/deployments/loud?dry_run=true", w.op, loud("dry.test"), nil)

	events := func(authz string) []apitype.FeedEvent {
		t.Helper()
		r := w.call(nil, "GET", "/feeds/team-a?format=json", authz, "")
		if r.code != 200 {
			t.Fatalf("GET /feeds/team-a?format=json: %s", r)
		}
		if err := c.CheckJSON("FeedEvent", r.body); err != nil {
			t.Errorf("not the contract's FeedEvent[]: %v\n%s", err, r.body)
		}
		var evs []apitype.FeedEvent
		decode(t, r.body, &evs)
		return evs
	}
	evs := events(w.a)
	if len(evs) != 2 || evs[0].Kind != apitype.FeedUpdated || evs[1].Kind != apitype.FeedDeployed ||
		evs[1].Title != "loud: deployed" || evs[1].Detail != "serving at https://loud.test" || evs[0].Namespace != "team-a" || evs[0].Deployment != "loud" {
		t.Fatalf("lifecycle events %+v, want loud's updated and deployed only", evs)
	}

	// The index: the operator sees every namespace with events, team-a
	// its own, team-b none.
	for _, tt := range []struct {
		who, authz, want string
	}{{"operator", w.op, "team-a:2"}, {"team-a", w.a, "team-a:2"}, {"team-b", w.b, ""}} {
		r := w.call(nil, "GET", "/feeds", tt.authz, "")
		if err := c.CheckJSON("FeedIndexEntry", r.body); r.code != 200 || err != nil {
			t.Fatalf("%s: GET /feeds: %s %v", tt.who, r, err)
		}
		var idx []apitype.FeedIndexEntry
		decode(t, r.body, &idx)
		var got []string
		for _, e := range idx {
			got = append(got, fmt.Sprintf("%s:%d", e.Namespace, e.Events))
		}
		if strings.Join(got, ",") != tt.want {
			t.Errorf("%s: index %v, want %q", tt.who, got, tt.want)
		}
	}

	// RSS, by default and at .xml.
	for _, path := range []string{"/feeds/team-a", "/feeds/team-a.xml", "/feeds/team-a?format=rss"} {
		r := w.call(nil, "GET", path, w.a, "")
		if r.code != 200 || r.header.Get("Content-Type") != "application/rss+xml; charset=utf-8" {
			t.Fatalf("GET %s: %s", path, r)
		}
		doc, err := gofeed.NewParser().ParseString(string(r.body))
		if err != nil || doc.FeedVersion != "2.0" || len(doc.Items) != 2 || doc.Items[0].GUID != fmt.Sprint(evs[0].ID) {
			t.Errorf("GET %s: not the RSS of the events (%v):\n%s", path, err, r.body)
		}
	}
	refused(t, w.call(nil, "GET", "/feeds/team-a?format=atom", w.a, ""), 400, "format")
	refused(t, w.call(nil, "GET", "/feeds/team-a.xml?format=json", w.a, ""), 400, "format")

	// No oracle: team-b asking for team-a's feed gets what it gets for a
	// namespace that does not exist.
	other := w.call(nil, "GET", "/feeds/team-a?format=json", w.b, "")
	none := w.call(nil, "GET", "/feeds/no-such-ns?format=json", w.b, "")
	if other.code != 404 || none.code != 404 || strings.ReplaceAll(string(other.body), "team-a", "X") != strings.ReplaceAll(string(none.body), "no-such-ns", "X") {
		t.Errorf("team-b: another namespace %s, none %s: want the same 404", other, none)
	}
	if r := w.call(nil, "GET", "/feeds/team-a", w.b, ""); r.code != 404 || strings.Contains(string(r.body), "loud") {
		t.Errorf("team-b read team-a's RSS: %s", r)
	}

	// feed.expose: the namespace's RSS on loud's own route, behind its
	// gate; the rest of the route still reaches the upstream.
	if resp, body := proxyGetAuth(t, w.node, "loud.test", "/events.xml", ""); resp.StatusCode != 401 || strings.Contains(body, "<rss") {
		t.Errorf("feed.expose without a credential: %d %q, want the gate's 401", resp.StatusCode, body)
	}
	resp, body := proxyGetAuth(t, w.node, "loud.test", "/events.xml", w.a)
	if resp.StatusCode != 200 || resp.Header.Get("Cache-Control") != "public, max-age=300" {
		t.Fatalf("feed.expose: %d %v %q", resp.StatusCode, resp.Header, body)
	}
	if doc, err := gofeed.NewParser().ParseString(body); err != nil || len(doc.Items) != 2 || doc.Items[1].Title != "loud: deployed" {
		t.Errorf("feed.expose is not the namespace's RSS (%v):\n%s", err, body)
	}
	if resp, body := proxyGetAuth(t, w.node, "loud.test", "/other", w.a); resp.StatusCode != 200 || body != "app" {
		t.Errorf("the rest of the route: %d %q", resp.StatusCode, body)
	}
	// feed.expose is the path the client sends, before strip_prefix; the
	// feed is served without a gate when the deployment has none.
	w.must(201, "POST", "/deployments", w.op, `{"id":"strip","namespace":"team-a","routes":[{"host":"strip.test","path_prefix":"/app","strip_prefix":true}],`+
		`"upstreams":["`+up+`"],"feed":{"expose":"/app/feed"}}`, nil)
	if resp, body := proxyGetAuth(t, w.node, "strip.test", "/app/feed", ""); resp.StatusCode != 200 || !strings.Contains(body, "<rss") || !strings.Contains(body, "loud: deployed") {
		t.Errorf("feed.expose under a stripped prefix: %d %q", resp.StatusCode, body)
	}
	if resp, body := proxyGetAuth(t, w.node, "strip.test", "/app/x", ""); resp.StatusCode != 200 || body != "app" {
		t.Errorf("the rest of the stripped route: %d %q", resp.StatusCode, body)
	}
	if resp, body := proxyGetAuth(t, w.node, "quiet.test", "/events.xml", ""); resp.StatusCode != 200 || body != "app" {
		t.Errorf("a deployment without feed.expose: %d %q, want its upstream", resp.StatusCode, body)
	}

	// The upstream goes away: loud (feed.issues) publishes the flip, quiet
	// (the same upstream, probed in the same round) does not.
	flaky.Close()
	waitFor(t, "loud's upstream unhealthy event", func() bool {
		for _, e := range events(w.a) {
			if e.Kind == apitype.FeedIssue && e.Title == "loud: upstream unhealthy" {
				return true
			}
		}
		return false
	})
	for _, e := range events(w.a) {
		if e.Deployment == "quiet" {
			t.Errorf("quiet asked for no feed and published %+v", e)
		}
	}

	w.must(204, "DELETE", "/deployments/loud", w.op, "", nil)
	evs = events(w.a)
	if evs[0].Kind != apitype.FeedRemoved || evs[0].Title != "loud: removed" || evs[0].Detail != "no longer serving at https://loud.test" {
		t.Errorf("after DELETE: %+v", evs[0])
	}

	// A restart keeps them.
	w.stop()
	n2 := startNode(t, w.o)
	r := n2.call(nil, "GET", "/feeds/team-a?format=json", w.op, "")
	var after []apitype.FeedEvent
	decode(t, r.body, &after)
	if r.code != 200 || fmt.Sprint(after) != fmt.Sprint(evs) {
		t.Errorf("after a restart: %s\nwant %+v", r, evs)
	}
}

// TestFeedExposeRefused: feed.expose is validated naming the field.
func TestFeedExposeRefused(t *testing.T) {
	w := startTenants(t, Options{})
	for body, want := range map[string]string{
		`{"id":"f","routes":[{"host":"f.test"}],"upstreams":["127.0.0.1:1"],"feed":{"expose":"feed"}}`:                       "feed.expose: ",
		`{"id":"f","routes":[{"host":"f.test"}],"upstreams":["127.0.0.1:1"],"feed":{"expose":"/feed?x"}}`:                    "feed.expose: ",
		`{"id":"f","routes":[{"host":"f.test","path_prefix":"/app"}],"upstreams":["127.0.0.1:1"],"feed":{"expose":"/feed"}}`: "feed.expose: ",
	} {
		r := w.call(nil, "POST", "/deployments", w.op, body)
		if r.code != 400 || !strings.Contains(errorOf(t, r), want) {
			t.Errorf("%s: %s, want 400 naming %s", body, r, want)
		}
	}
	// A token scoped to deployments reaches no namespace's feed: it may
	// not serve one on a route either.
	var m auth.MintedView
	w.must(201, "POST", "/tokens", w.op, `{"name":"f","admin":"admin","deployments":["f"]}`, &m)
	r := w.call(nil, "POST", "/deployments", bearer(m.Token), `{"id":"f","routes":[{"host":"f.test"}],"upstreams":["127.0.0.1:1"],"feed":{"expose":"/feed"}}`)
	if r.code != 403 || !strings.HasPrefix(errorOf(t, r), "feed.expose: ") {
		t.Errorf("scoped token's feed.expose: %s, want 403 naming feed.expose", r)
	}
	if r := w.call(nil, "GET", "/feeds/default", bearer(m.Token), ""); r.code != 404 {
		t.Errorf("scoped token read the default feed: %s", r)
	}
	w.must(404, "GET", "/deployments/f", w.op, "", nil)
}

// TestFeedIssuesFromReplicas: a vm deployment with feed.issues whose
// replicas fail to boot publishes the failure, folded; its twin without
// feed.issues fails the same way and publishes nothing.
func TestFeedIssuesFromReplicas(t *testing.T) {
	h := start(t, "")
	crash := func(id, feed string) string {
		return `{"id":"` + id + `","routes":[{"host":"` + id + `.test"}],"vm":{"driver":"process","port":8080,"start_command":"exit 3"},` +
			`"scaling":{"min_replicas":1,"max_replicas":1}` + feed + `}`
	}
	for _, body := range []string{crash("loud", `,"feed":{"issues":true}`), crash("mute", "")} {
		if r := h.json("POST", "/deployments", body); r.code != 201 {
			t.Fatalf("POST: %d %s", r.code, r.body)
		}
	}
	failures := func(id string) int {
		var m apitype.MetricsResponse
		if err := json.Unmarshal(h.do("GET", "/metrics?deployment="+id, "", "").body, &m); err != nil || len(m.Deployments) != 1 {
			t.Fatalf("metrics of %s: %v", id, err)
		}
		return m.Deployments[0].Metrics.Autoscale.CreateFailures
	}
	waitFor(t, "both deployments' boot failures", func() bool { return failures("loud") >= 1 && failures("mute") >= 1 })
	var evs []apitype.FeedEvent
	waitFor(t, "loud's issue", func() bool {
		evs = nil
		json.Unmarshal(h.do("GET", "/feeds/default?format=json", "", "").body, &evs)
		return len(evs) > 0
	})
	if len(evs) != 1 {
		t.Errorf("events %+v, want loud's boot failures folded into one", evs)
	}
	for _, e := range evs {
		if e.Deployment != "loud" || e.Kind != apitype.FeedIssue || e.Title != "loud: replica failed to boot" || e.Count < 1 {
			t.Errorf("event %+v, want only loud's boot failures", e)
		}
		if strings.Contains(e.Detail, "exit") {
			t.Errorf("detail %q carries the replica's own words", e.Detail)
		}
	}
}
