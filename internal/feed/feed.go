// Package feed keeps each namespace's event feed (app-lb.md §3.9): a
// bounded ring of lifecycle events (deployed, updated, removed) and
// operational issues (cold-start timeouts, replica create and boot
// failures, boot timeouts, upstream health flips), read as RSS 2.0 or as
// the contract's FeedEvent[].
//
// Repeats of the same issue of a deployment fold into one entry: its count
// grows and last_ts moves, ts stays the first time. A lifecycle event of
// the deployment closes its open issues, so the same issue after a
// redeploy is news again. Each namespace keeps its Size most recently
// active entries; the least recently active is dropped first.
//
// Publishing never blocks on storage: it updates the rings in memory and
// the entries it changed are written to the store (Options.Store) by Run,
// in the background, a burst of publishes in one transaction. So a feed
// survives a restart, and a thousand requests timing out at once cost a
// fold each, not a database write each. Publish may be called under other
// packages' locks: it takes only the feed's own.
//
// Which deployments publish is their spec's business (feed.announce,
// feed.issues): the callers check it; this package records what it is
// handed.
package feed

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/gorilla/feeds"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/store"
)

// DefaultSize is how many entries a namespace's feed keeps by default.
const DefaultSize = 200

// Bounds on what an entry carries (a boot timeout's detail holds the
// replica's last output).
const (
	maxTitle  = 512
	maxDetail = 4096
)

// Store is the persistence a feed needs (implemented by *store.Store).
type Store interface {
	FeedEvents(ctx context.Context) ([]store.FeedEvent, error)
	SaveFeedEvents(ctx context.Context, put []store.FeedEvent, drop []int64) error
}

// Options configure a Feed.
type Options struct {
	// Store keeps the rings across restarts; nil: in memory only.
	Store Store
	// Size is the entries kept per namespace; default DefaultSize.
	Size int
	Now  func() time.Time
	Log  *slog.Logger
}

// Feed is every namespace's ring. Safe for concurrent use.
type Feed struct {
	o Options

	mu     sync.Mutex
	rings  map[string][]*store.FeedEvent // by namespace, least recently active first
	nextID int64
	// nextSeq orders the entries by their last activity (store.FeedEvent.Seq).
	nextSeq int64
	dirty   map[int64]store.FeedEvent // changed since the last save
	drop    map[int64]bool            // dropped since the last save
	kick    chan struct{}
}

// Open returns the feed, with the events the store kept.
func Open(ctx context.Context, o Options) (*Feed, error) {
	if o.Size <= 0 {
		o.Size = DefaultSize
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	f := &Feed{o: o, rings: map[string][]*store.FeedEvent{}, nextID: 1, nextSeq: 1,
		dirty: map[int64]store.FeedEvent{}, drop: map[int64]bool{}, kick: make(chan struct{}, 1)}
	if o.Store == nil {
		return f, nil
	}
	evs, err := o.Store.FeedEvents(ctx)
	if err != nil {
		return nil, fmt.Errorf("feed: %w", err)
	}
	// Least recently active first (by Seq), as the rings keep them.
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].Seq < evs[j].Seq })
	for i := range evs {
		e := evs[i]
		f.rings[e.Namespace] = append(f.rings[e.Namespace], &e)
		f.nextID = max(f.nextID, e.ID+1)
		f.nextSeq = max(f.nextSeq, e.Seq+1)
	}
	for ns := range f.rings {
		f.trimLocked(ns) // a smaller Size than the last run's
	}
	return f, nil
}

// Lifecycle records a lifecycle event (deployed, updated, removed) of
// deployment dep in namespace ns. It closes the deployment's open issues.
func (f *Feed) Lifecycle(ns, dep string, kind apitype.FeedEventKind, detail string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, e := range f.rings[ns] {
		if e.Deployment == dep && e.Fold != "" {
			e.Fold = ""
			f.touchLocked(e)
		}
	}
	f.addLocked(&store.FeedEvent{Namespace: ns, Deployment: dep, Kind: string(kind),
		Title: dep + ": " + string(kind), Detail: detail})
}

// Issue records an operational issue of deployment dep in namespace ns:
// what is its short name ("cold start timed out"), which with the
// deployment makes the title and the key repeats fold by; detail replaces
// the entry's detail on a repeat (the latest error is the one to read).
func (f *Feed) Issue(ns, dep, what, detail string) {
	title := clip(dep+": "+what, maxTitle)
	key := dep + "\x00" + title
	now := f.o.Now().Unix()
	f.mu.Lock()
	defer f.mu.Unlock()
	ring := f.rings[ns]
	for i, e := range ring {
		if e.Fold == key {
			e.Count++
			e.LastTs = max(e.LastTs, now)
			e.Detail = clip(detail, maxDetail)
			e.Seq = f.nextSeq
			f.nextSeq++
			// Now the most recently active.
			copy(ring[i:], ring[i+1:])
			ring[len(ring)-1] = e
			f.touchLocked(e)
			return
		}
	}
	f.addLocked(&store.FeedEvent{Namespace: ns, Deployment: dep, Kind: string(apitype.FeedIssue),
		Title: title, Detail: detail, Fold: key})
}

func (f *Feed) addLocked(e *store.FeedEvent) {
	now := f.o.Now().Unix()
	e.ID, e.Seq, e.Ts, e.LastTs, e.Count = f.nextID, f.nextSeq, now, now, 1
	e.Title, e.Detail = clip(e.Title, maxTitle), clip(e.Detail, maxDetail)
	f.nextID++
	f.nextSeq++
	f.rings[e.Namespace] = append(f.rings[e.Namespace], e)
	f.touchLocked(e)
	f.trimLocked(e.Namespace)
}

// trimLocked drops a namespace's least recently active entries beyond Size.
func (f *Feed) trimLocked(ns string) {
	ring := f.rings[ns]
	n := len(ring) - f.o.Size
	if n <= 0 {
		return
	}
	for _, e := range ring[:n] {
		if f.o.Store != nil {
			delete(f.dirty, e.ID)
			f.drop[e.ID] = true
		}
	}
	f.rings[ns] = slices.Clone(ring[n:])
	f.kickLocked()
}

// touchLocked marks e for the next save.
func (f *Feed) touchLocked(e *store.FeedEvent) {
	if f.o.Store == nil {
		return
	}
	f.dirty[e.ID] = *e
	f.kickLocked()
}

func (f *Feed) kickLocked() {
	if f.o.Store == nil {
		return
	}
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

// Run saves what changed until ctx ends, and once more then.
func (f *Feed) Run(ctx context.Context) error {
	if f.o.Store == nil {
		<-ctx.Done()
		return nil
	}
	for {
		select {
		case <-ctx.Done():
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			return f.Save(sctx)
		case <-f.kick:
			if err := f.Save(ctx); err != nil && ctx.Err() == nil {
				f.o.Log.Warn("could not save the event feed; retrying with the next event", "err", err)
			}
		}
	}
}

// Save writes what changed since the last save to the store now. What a
// failed save did not write is written by the next one.
func (f *Feed) Save(ctx context.Context) error {
	if f.o.Store == nil {
		return nil
	}
	f.mu.Lock()
	put := make([]store.FeedEvent, 0, len(f.dirty))
	for _, e := range f.dirty {
		put = append(put, e)
	}
	drop := make([]int64, 0, len(f.drop))
	for id := range f.drop {
		drop = append(drop, id)
	}
	clear(f.dirty)
	clear(f.drop)
	f.mu.Unlock()
	err := f.o.Store.SaveFeedEvents(ctx, put, drop)
	if err != nil {
		f.mu.Lock()
		for _, e := range put {
			if _, newer := f.dirty[e.ID]; !newer && !f.drop[e.ID] {
				f.dirty[e.ID] = e
			}
		}
		for _, id := range drop {
			delete(f.dirty, id)
			f.drop[id] = true
		}
		f.mu.Unlock()
	}
	return err
}

// Events returns namespace ns's entries, most recently active first.
func (f *Feed) Events(ns string) []apitype.FeedEvent {
	f.mu.Lock()
	defer f.mu.Unlock()
	ring := f.rings[ns]
	out := make([]apitype.FeedEvent, 0, len(ring))
	for i := len(ring) - 1; i >= 0; i-- {
		e := ring[i]
		out = append(out, apitype.FeedEvent{ID: e.ID, Ts: e.Ts, LastTs: e.LastTs, Count: e.Count, Namespace: e.Namespace,
			Deployment: e.Deployment, Kind: apitype.FeedEventKind(e.Kind), Title: e.Title, Detail: e.Detail})
	}
	return out
}

// Index lists the namespaces that have events, by name, those for which
// reaches is true (nil: all).
func (f *Feed) Index(reaches func(ns string) bool) []apitype.FeedIndexEntry {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := []apitype.FeedIndexEntry{}
	for ns, ring := range f.rings {
		if len(ring) > 0 && (reaches == nil || reaches(ns)) {
			out = append(out, apitype.FeedIndexEntry{Namespace: ns, Events: len(ring)})
		}
	}
	slices.SortFunc(out, func(a, b apitype.FeedIndexEntry) int { return strings.Compare(a.Namespace, b.Namespace) })
	return out
}

// RSSType is the content type of an RSS answer.
const RSSType = "application/rss+xml; charset=utf-8"

// WriteRSS answers namespace ns's feed as an RSS 2.0 document whose
// channel link is link (where it is read); each item's guid is its event
// id.
func (f *Feed) WriteRSS(w http.ResponseWriter, ns, link string) error {
	evs := f.Events(ns)
	doc := &feeds.Feed{
		Title:       "berth: events of namespace " + ns,
		Link:        &feeds.Link{Href: link},
		Description: "Deployments and issues of the " + ns + " namespace, most recent first.",
	}
	if len(evs) > 0 {
		doc.Updated = time.Unix(evs[0].LastTs, 0).UTC()
	}
	for _, e := range evs {
		desc := e.Detail
		if e.Count > 1 {
			desc += fmt.Sprintf(" (%d times, last at %s)", e.Count, time.Unix(e.LastTs, 0).UTC().Format(time.RFC1123Z))
		}
		doc.Items = append(doc.Items, &feeds.Item{
			Title: e.Title, Description: desc, Id: strconv.FormatInt(e.ID, 10), IsPermaLink: "false",
			Created: time.Unix(e.Ts, 0).UTC(), Updated: time.Unix(e.LastTs, 0).UTC(),
		})
	}
	w.Header().Set("Content-Type", RSSType)
	return doc.WriteRss(w)
}

// Exposed returns the handler a deployment's feed.expose path is answered
// by: namespace ns's feed as RSS, cacheable for five minutes (app-lb.md
// §3.1), to GET and HEAD; other methods are refused with 405.
func (f *Feed) Exposed(ns string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(http.StatusMethodNotAllowed)
			w.Write([]byte("this path serves the namespace's event feed (RSS): GET it\n"))
			return
		}
		w.Header().Set("Cache-Control", "public, max-age=300")
		if r.Method == http.MethodHead {
			w.Header().Set("Content-Type", RSSType)
			w.WriteHeader(http.StatusOK)
			return
		}
		scheme := "http"
		if r.TLS != nil {
			scheme = "https"
		}
		if err := f.WriteRSS(w, ns, scheme+"://"+r.Host+r.URL.Path); err != nil {
			f.o.Log.Debug("could not write a feed", "namespace", ns, "err", err)
		}
	})
}

// LifecycleDetail is a lifecycle event's detail (as app-lb words it):
// "serving at <urls>" for the hosts a deployment's routes name, or "a
// <kind> deployment with no public routes".
func LifecycleDetail(kind apitype.DeploymentKind, routes []apitype.RouteRule) string {
	var urls []string
	for _, r := range routes {
		host := r.Host
		if host == "" && r.HostSuffix != "" {
			host = "*." + strings.TrimPrefix(r.HostSuffix, ".")
		}
		if host == "" || r.Redirect != nil {
			continue
		}
		u := "https://" + host + r.PathPrefix
		if !slices.Contains(urls, u) {
			urls = append(urls, u)
		}
	}
	if len(urls) == 0 {
		return fmt.Sprintf("a %s deployment with no public routes", kind)
	}
	return "serving at " + strings.Join(urls, ", ")
}

// clip cuts s to at most n bytes, on a rune boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
