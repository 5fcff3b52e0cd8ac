package feed

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mmcdole/gofeed"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/contracttest"
	"github.com/berth-dev/berth/internal/store"
)

// clock is a settable time for the feed's timestamps.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func open(t *testing.T, o Options) *Feed {
	t.Helper()
	f, err := Open(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestIssuesFold: repeats of an issue fold into one entry (count, last_ts,
// the latest detail; ts stays the first time), which becomes the most
// recently active; another deployment's, another title's and a repeat after
// a lifecycle event of the deployment are entries of their own.
func TestIssuesFold(t *testing.T) {
	c := &clock{time.Unix(1000, 0)}
	f := open(t, Options{Now: c.now})
	f.Issue("team", "web", "cold start timed out", "a request waited 2m0s")
	c.t = c.t.Add(time.Second)
	f.Issue("team", "api", "cold start timed out", "a request waited 2m0s")
	c.t = c.t.Add(time.Second)
	f.Issue("team", "web", "cold start timed out", "a request waited 1m0s")
	f.Issue("team", "web", "replica create failed", "no")

	evs := f.Events("team")
	if len(evs) != 3 {
		t.Fatalf("events %+v, want 3", evs)
	}
	web := evs[1]
	if web.Title != "web: cold start timed out" || web.Count != 2 || web.Ts != 1000 || web.LastTs != 1002 || web.Detail != "a request waited 1m0s" || web.Kind != apitype.FeedIssue {
		t.Errorf("folded entry %+v", web)
	}
	if evs[0].Title != "web: replica create failed" || evs[2].Deployment != "api" || evs[2].Count != 1 {
		t.Errorf("order (most recently active first): %+v", evs)
	}

	f.Lifecycle("team", "web", apitype.FeedUpdated, "serving at https://web.test")
	f.Issue("team", "web", "cold start timed out", "again")
	evs = f.Events("team")
	if len(evs) != 5 || evs[0].Count != 1 || evs[0].Detail != "again" || evs[1].Kind != apitype.FeedUpdated || evs[1].Title != "web: updated" {
		t.Errorf("after a lifecycle event the issue is news again: %+v", evs)
	}
	if got := f.Events("other"); len(got) != 0 {
		t.Errorf("another namespace: %+v", got)
	}
}

// TestRingBounded: a namespace keeps Size entries, the least recently
// active dropped first; a folded entry is recent again and stays. Other
// namespaces are not touched.
func TestRingBounded(t *testing.T) {
	f := open(t, Options{Size: 3})
	f.Issue("a", "old", "flapping", "1")
	f.Lifecycle("b", "x", apitype.FeedDeployed, "d")
	for i := range 4 {
		f.Lifecycle("a", fmt.Sprintf("d%d", i), apitype.FeedDeployed, "d")
		f.Issue("a", "old", "flapping", "again") // folds: stays the most recent
	}
	evs := f.Events("a")
	var titles []string
	for _, e := range evs {
		titles = append(titles, e.Title)
	}
	if got := strings.Join(titles, ","); got != "old: flapping,d3: deployed,d2: deployed" {
		t.Errorf("ring %s", got)
	}
	if evs[0].Count != 5 {
		t.Errorf("folded count %d, want 5", evs[0].Count)
	}
	idx := f.Index(nil)
	if len(idx) != 2 || idx[0] != (apitype.FeedIndexEntry{Namespace: "a", Events: 3}) || idx[1] != (apitype.FeedIndexEntry{Namespace: "b", Events: 1}) {
		t.Errorf("index %+v", idx)
	}
	if idx := f.Index(func(ns string) bool { return ns == "b" }); len(idx) != 1 || idx[0].Namespace != "b" {
		t.Errorf("narrowed index %+v", idx)
	}
}

// TestSurvivesRestart: what Run saved is there after a reopen of the
// store: the entries, their folds (a repeat still folds) and the ids
// (new events do not reuse one); dropped entries stay dropped.
func TestSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	st, err := store.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	f := open(t, Options{Store: st, Size: 3})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	f.Lifecycle("team", "gone", apitype.FeedDeployed, "dropped by the bound")
	f.Lifecycle("team", "web", apitype.FeedDeployed, "serving at https://web.test")
	f.Issue("team", "web", "upstream unhealthy", "first")
	f.Lifecycle("team", "api", apitype.FeedDeployed, "serving at https://api.test")
	f.Issue("team", "web", "upstream unhealthy", "second") // the most recent again, in the same second
	want := f.Events("team")
	if len(want) != 3 || want[0].Title != "web: upstream unhealthy" || want[1].Title != "api: deployed" {
		t.Fatalf("before restart %+v", want)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	st.Close()

	st, err = store.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	f = open(t, Options{Store: st, Size: 3})
	got := f.Events("team")
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after restart %+v, want %+v", got, want)
	}
	f.Issue("team", "web", "upstream unhealthy", "third")
	f.Lifecycle("team", "new", apitype.FeedDeployed, "d")
	got = f.Events("team")
	if len(got) != 3 || got[1].Count != 3 || got[0].ID <= want[1].ID || got[2].Title != "api: deployed" {
		t.Errorf("after restart, a repeat folds and ids go on: %+v (before: %+v)", got, want)
	}
	if err := f.Save(context.Background()); err != nil {
		t.Fatal(err)
	}
	rows, err := st.FeedEvents(context.Background())
	if err != nil || len(rows) != 3 {
		t.Errorf("stored rows %+v %v, want the 3 in the ring", rows, err)
	}
}

// TestRSS: the RSS document parses back as RSS 2.0 with one item per
// event, newest first, each guid the event id; the JSON of Events is the
// contract's FeedEvent[].
func TestRSS(t *testing.T) {
	c := &clock{time.Unix(1700000000, 0)}
	f := open(t, Options{Now: c.now})
	f.Lifecycle("team", "web", apitype.FeedDeployed, "serving at https://web.test")
	c.t = c.t.Add(time.Minute)
	f.Issue("team", "web", "replica boot timed out", "replica r1 <did not> become ready & gave up \x1b[0m")
	f.Issue("team", "web", "replica boot timed out", "replica r2 did not become ready")

	rec := httptest.NewRecorder()
	if err := f.WriteRSS(rec, "team", "http://admin.test/feeds/team"); err != nil {
		t.Fatal(err)
	}
	if ct := rec.Header().Get("Content-Type"); ct != RSSType {
		t.Errorf("content type %q", ct)
	}
	doc, err := gofeed.NewParser().ParseString(rec.Body.String())
	if err != nil {
		t.Fatalf("RSS does not parse: %v\n%s", err, rec.Body)
	}
	if doc.FeedType != "rss" || doc.FeedVersion != "2.0" || doc.Link != "http://admin.test/feeds/team" || len(doc.Items) != 2 {
		t.Fatalf("RSS %s %s link %q, %d items\n%s", doc.FeedType, doc.FeedVersion, doc.Link, len(doc.Items), rec.Body)
	}
	evs := f.Events("team")
	for i, it := range doc.Items {
		if it.GUID != fmt.Sprint(evs[i].ID) || it.Title != evs[i].Title {
			t.Errorf("item %d: guid %q title %q, want %d %q", i, it.GUID, it.Title, evs[i].ID, evs[i].Title)
		}
	}
	if !strings.Contains(doc.Items[0].Description, "(2 times, last at") {
		t.Errorf("folded item's description %q", doc.Items[0].Description)
	}

	raw, err := json.Marshal(evs)
	if err != nil {
		t.Fatal(err)
	}
	if err := contracttest.MustLoad(t).CheckJSON("FeedEvent", raw); err != nil {
		t.Errorf("events not the contract's FeedEvent[]: %v\n%s", err, raw)
	}
	raw, _ = json.Marshal(f.Index(nil))
	if err := contracttest.MustLoad(t).CheckJSON("FeedIndexEntry", raw); err != nil {
		t.Errorf("index not the contract's FeedIndexEntry[]: %v\n%s", err, raw)
	}
}

// TestExposed: the feed.expose handler answers GET with cacheable RSS and
// refuses other methods.
func TestExposed(t *testing.T) {
	f := open(t, Options{})
	f.Lifecycle("team", "web", apitype.FeedDeployed, "d")
	srv := httptest.NewServer(f.Exposed("team"))
	defer srv.Close()
	r, err := http.Get(srv.URL + "/feed.xml")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := gofeed.NewParser().Parse(r.Body)
	r.Body.Close()
	if err != nil || r.StatusCode != 200 || r.Header.Get("Cache-Control") != "public, max-age=300" || len(doc.Items) != 1 {
		t.Errorf("GET: %d %v %q", r.StatusCode, err, r.Header.Get("Cache-Control"))
	}
	r, err = http.Head(srv.URL + "/feed.xml")
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if r.StatusCode != 200 || r.Header.Get("Content-Type") != RSSType {
		t.Errorf("HEAD: %d %q", r.StatusCode, r.Header.Get("Content-Type"))
	}
	r, err = http.Post(srv.URL+"/feed.xml", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if r.StatusCode != 405 || r.Header.Get("Allow") != "GET, HEAD" {
		t.Errorf("POST: %d allow %q", r.StatusCode, r.Header.Get("Allow"))
	}
}

func TestLifecycleDetail(t *testing.T) {
	for _, tt := range []struct {
		routes []apitype.RouteRule
		want   string
	}{
		{[]apitype.RouteRule{{Host: "a.test"}, {HostSuffix: ".b.test", PathPrefix: "/api"}, {Host: "a.test"}},
			"serving at https://a.test, https://*.b.test/api"},
		{[]apitype.RouteRule{{PathPrefix: "/x"}, {Host: "old.test", Redirect: &apitype.RouteRedirect{To: "https://new.test"}}},
			"a vm deployment with no public routes"},
		{nil, "a vm deployment with no public routes"},
	} {
		if got := LifecycleDetail(apitype.KindVM, tt.routes); got != tt.want {
			t.Errorf("%+v: %q, want %q", tt.routes, got, tt.want)
		}
	}
}
