package admin

import (
	"net/http"
	"strings"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/auth"
	"github.com/berth-dev/berth/internal/feed"
	"github.com/berth-dev/berth/internal/registry"
	"github.com/berth-dev/berth/internal/spec"
	"github.com/berth-dev/berth/internal/web"
)

// routeFeeds registers the namespaces' event feeds (app-lb.md §2.3, §3.9).
// Both narrow to what the caller reaches: a namespace-confined caller
// sees its own namespace's feed and nothing of another's.
func (a *API) routeFeeds() {
	a.handle("GET /feeds", tierView, wallNarrow, a.feedIndex)
	a.handle("GET /feeds/{ns}", tierView, wallNarrow, a.namespaceFeed)
}

func (a *API) feedIndex(w http.ResponseWriter, r *http.Request) error {
	if a.o.Feed == nil {
		return unavailable("event feeds")
	}
	web.WriteJSON(w, http.StatusOK, a.o.Feed.Index(caller(r).Reaches))
	return nil
}

// namespaceFeed is GET /feeds/{ns}[.xml][?format=json]: RSS 2.0 unless
// ?format=json asks for FeedEvent[], newest first. A namespace the caller
// does not reach is answered as one no deployment ever published to
// would be if it could not be read either: 404, whether it exists or not.
func (a *API) namespaceFeed(w http.ResponseWriter, r *http.Request) error {
	if a.o.Feed == nil {
		return unavailable("event feeds")
	}
	ns, xml := strings.CutSuffix(r.PathValue("ns"), ".xml")
	format := r.URL.Query().Get("format")
	switch {
	case format != "" && format != "json" && format != "rss":
		return web.Invalid("format", "%q is neither json nor rss", format)
	case xml && format == "json":
		return web.Invalid("format", "/feeds/%s.xml is the RSS document; GET /feeds/%s?format=json for JSON", ns, ns)
	}
	if ns == "" || !caller(r).Reaches(ns) {
		return web.Errorf(http.StatusNotFound, "no feed for namespace %q that this credential can read", ns)
	}
	if format == "json" {
		web.WriteJSON(w, http.StatusOK, a.o.Feed.Events(ns))
		return nil
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return a.o.Feed.WriteRSS(w, ns, scheme+"://"+r.Host+r.URL.Path)
}

// announce publishes a lifecycle event of e to its namespace's feed, if
// its spec asks for that (feed.announce).
func (a *API) announce(e *registry.Entry, kind apitype.FeedEventKind) {
	f := e.Spec.Feed
	if a.o.Feed == nil || f == nil || f.Announce == nil || !*f.Announce {
		return
	}
	detail := feed.LifecycleDetail(e.Kind, e.Spec.Routes)
	if kind == apitype.FeedRemoved {
		if rest, ok := strings.CutPrefix(detail, "serving at "); ok {
			detail = "no longer serving at " + rest
		}
	}
	a.o.Feed.Lifecycle(spec.Namespace(&e.Spec), e.Spec.ID, kind, detail)
}

// mayExpose refuses a feed.expose by a caller who could not read the
// namespace's feed itself (a token scoped to deployments, which reaches no
// namespace): serving it on a route would read it for them.
func mayExpose(p *auth.Principal, s *apitype.DeploymentSpec) error {
	if f := s.Feed; f == nil || f.Expose == "" || p.Reaches(spec.Namespace(s)) {
		return nil
	}
	return web.Errorf(http.StatusForbidden, "feed.expose: this credential cannot read the %q namespace's feed, so it cannot serve it on a route", spec.Namespace(s))
}
