// Package siem is berth's detection engine: it watches finished data-plane
// requests and authentication outcomes for attacks (credential brute force,
// spraying and enumeration, injection and traversal signatures, scanners,
// request floods) and raises alerts that say what to check and which guard
// rule would stop it — app-lb's SIEM (§6.1, §6.2 of its reference), with
// its alerts kept in the store so that a restart does not lose them.
//
// # Pipeline
//
// The proxy and the auth code call ObserveRequest and ObserveAuth on their
// request paths; both only append a copy to a mutex-guarded slice (no
// channel handoff, no goroutine wake per call; a full queue drops the
// observation and counts it). Run's goroutine swaps the slice out every
// drainEvery, or as soon as it is half full, and analyses the batch; Flush
// does the same synchronously. New alerts and folds are written to the
// store once per batch, never per request.
//
// # Per-source state
//
// A source is an IPv4 address or an IPv6 /64 (an IPv4-mapped IPv6 address
// is its IPv4 address). Each has, over Config.Window in 12 buckets, counts
// of requests, authentication failures and client errors (401/403/404),
// and three 64-bit sketches (bit = keyed hash mod 64, distinct ≈ popcount)
// of the paths of client errors, the deployments of authentication
// failures, and the identities tried at sign-in gates. The table is capped
// at Config.MaxClients: a new source at capacity first prunes expired
// entries and is otherwise dropped, never evicting one being watched.
//
// # No feedback loop
//
// app-lb counts every 404 and every failed credential toward its scanner
// and brute-force rules, so a signed-in user with a broken bookmark page,
// or berth's own 404 for a host nobody serves, can get a real user blocked
// by an operator following the suggested action. berth does not:
//
//   - a Request with Credentialed set (it carried a valid credential for
//     its deployment) never counts toward traffic.scanner or auth.* for its
//     source; it is still scanned for web signatures, and counts toward
//     traffic.rate-spike;
//   - a Request with Unrouted set (berth's own 404: no deployment serves
//     the host) counts only toward the scanner rules — traffic.scanner and
//     web.secret-probe, both ATT&CK's active scanning — and not toward
//     rate-spike (nothing was served: the data plane's own rate limit is
//     the defence) nor the injection signatures (nothing could have been
//     injected into);
//   - a Request with Exempted set (an allow guard rule matched) is not
//     analysed at all.
//
// /.well-known/ and sign-in gate paths (/__applb/auth/, or a deployment's
// own base path, see Options.GatePath) are never flagged nor counted as
// probed paths, unless the path contains "..", which no such path needs.
//
// # Alerts
//
// An alert of the same rule, source and deployment within Config.Suppress
// of the previous one's last occurrence folds into it (count, last_ts);
// at most Config.MaxAlertsPerMinute new alerts are raised per minute of
// event time. Alerts are kept newest first up to Config.AlertCapacity,
// the oldest evicted; ids increase from 1 across restarts. An alert's path
// never carries the query, and of a query only a parameter's name is ever
// recorded.
package siem

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"time"
	"unsafe"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/store"
	"github.com/prometheus/client_golang/prometheus"
)

// Store is what the engine needs of package store.
type Store interface {
	SecurityAlerts(ctx context.Context) ([]store.SecurityAlert, int64, error)
	PutSecurityAlerts(ctx context.Context, alerts []store.SecurityAlert, keep int) error
}

// The rules.
const (
	RuleBruteForce  = "auth.brute-force"
	RuleSpray       = "auth.spray"
	RuleEnumeration = "auth.enumeration"
	RuleScopeDenied = "auth.scope-denied"
	RuleSigninState = "auth.signin-state"
	RuleRCE         = "web.rce"
	RuleTraversal   = "web.traversal"
	RuleSQLi        = "web.sqli"
	RuleXSS         = "web.xss"
	RuleSecretProbe = "web.secret-probe"
	RuleScanner     = "traffic.scanner"
	RuleRateSpike   = "traffic.rate-spike"
)

// Auth actions.
const (
	ActionAdminRejected  = "admin-rejected"
	ActionAdminScope     = "admin-scope"
	ActionGateToken      = "gate-token"
	ActionGateJWT        = "gate-jwt"
	ActionSigninState    = "signin-state"
	ActionSigninExchange = "signin-exchange"
	ActionSigninToken    = "signin-token"
	ActionSigninRefused  = "signin-refused"
)

// Config sets the engine's thresholds. Zero fields take app-lb's defaults.
type Config struct {
	// Disabled turns detection off: observations return at once.
	Disabled bool
	// QueueCapacity bounds the observations waiting for analysis (4096).
	QueueCapacity int
	// AlertCapacity bounds the alerts kept (512); the oldest are evicted.
	AlertCapacity int
	// Window is what the windowed rules count over, in 12 buckets (60s).
	Window time.Duration
	// AuthThreshold: authentication failures in a window (8).
	AuthThreshold int
	// ScanThreshold: client errors (401/403/404) in a window (30), with at
	// least ScanDistinctPaths distinct paths among them (8, at most 64).
	ScanThreshold     int
	ScanDistinctPaths int
	// RateThreshold: requests in a window (600).
	RateThreshold int
	// SpreadDistinct: distinct deployments of a source's failures for
	// auth.spray, distinct identities for auth.enumeration (4, at most 64).
	SpreadDistinct int
	// Suppress folds a repeat of an alert into it (300s).
	Suppress time.Duration
	// MaxAlertsPerMinute bounds new alerts (60).
	MaxAlertsPerMinute int
	// MaxClients bounds the sources tracked (16384).
	MaxClients int
	// NoQueryScan turns off the scanning of query values.
	NoQueryScan bool
}

// The defaults (app-lb's).
const (
	DefaultQueueCapacity      = 4096
	DefaultAlertCapacity      = 512
	DefaultWindow             = 60 * time.Second
	DefaultAuthThreshold      = 8
	DefaultScanThreshold      = 30
	DefaultScanDistinctPaths  = 8
	DefaultRateThreshold      = 600
	DefaultSpreadDistinct     = 4
	DefaultSuppress           = 300 * time.Second
	DefaultMaxAlertsPerMinute = 60
	DefaultMaxClients         = 16384
	// DefaultGatePath is the sign-in gates' default base path.
	DefaultGatePath = "/__applb/auth"

	buckets    = 12
	drainEvery = 20 * time.Millisecond
)

// Options configure an Engine.
type Options struct {
	Config
	// Store keeps the alerts across restarts; nil keeps them in memory.
	Store Store
	Now   func() time.Time
	Log   *slog.Logger
	// OnAlert is called for each new alert (not for folds), from the
	// analyser, after the alert is stored.
	OnAlert func(apitype.SecurityAlert)
	// GatePath returns a deployment's sign-in gate base path when it is not
	// DefaultGatePath; nil or "" means the default. Requests under it are
	// never flagged.
	GatePath func(deployment string) string
}

// Request is one finished data-plane request (a proxy completion).
type Request struct {
	Time time.Time
	// Client is the socket peer (or a trusted proxy's forwarded client),
	// never a forwarded header from anyone.
	Client netip.Addr
	// Path is the request's path as received (escaped or not: the
	// signatures match both forms), without the query.
	Method, Host, Path, RawQuery, UserAgent string
	Status                                  int
	Duration                                time.Duration
	Bytes                                   int64
	Deployment, Namespace                   string
	// Unrouted: no deployment routes the host (berth's own 404).
	Unrouted bool
	// Credentialed: carried a valid credential for its deployment
	// (session, JWT, app-token).
	Credentialed bool
	// Exempted: an allow guard rule matched; no detection at all.
	Exempted bool
	// Scheme is the authorization scheme: basic, bearer or none.
	Scheme string
}

// Auth is an authentication or authorization failure: of the admin API
// (no Deployment) or of a deployment's sign-in gate.
type Auth struct {
	Time   time.Time
	Client netip.Addr
	// Action is one of the Action constants. ActionSigninExchange (the
	// identity provider failed the code exchange) is not an attempt of the
	// client's: it is counted as analysed and toward nothing else.
	// ActionSigninState raises auth.signin-state at once and also counts
	// as a failure.
	Action                                                     string
	Deployment, Namespace, Host, Path, Subject, Scheme, Reason string
}

// Engine is the detection engine. Safe for concurrent use.
type Engine struct {
	o        Options
	disabled bool

	// The queue (the request path takes only qmu).
	qmu      sync.Mutex
	reqs     []Request
	auths    []Auth
	arena    []byte // the queued strings' bytes (keep)
	observed uint64
	dropped  uint64
	closed   bool
	wake     chan struct{}

	// step serializes analysis and persistence (Run, Flush, Close).
	step       sync.Mutex
	spareReqs  []Request
	spareAuths []Auth

	// mu guards the analysis state below (a.go) and what readers see.
	mu      sync.Mutex
	st      state
	lastPut time.Time // when alerts were last written (guarded by mu)
}

// New makes an engine and loads the stored alerts; it starts nothing.
func New(o Options) (*Engine, error) {
	c := &o.Config
	for _, f := range []struct {
		name string
		v    *int
		def  int
		max  int
	}{
		{"QueueCapacity", &c.QueueCapacity, DefaultQueueCapacity, 0},
		{"AlertCapacity", &c.AlertCapacity, DefaultAlertCapacity, 0},
		{"AuthThreshold", &c.AuthThreshold, DefaultAuthThreshold, 0},
		{"ScanThreshold", &c.ScanThreshold, DefaultScanThreshold, 0},
		{"ScanDistinctPaths", &c.ScanDistinctPaths, DefaultScanDistinctPaths, 64},
		{"RateThreshold", &c.RateThreshold, DefaultRateThreshold, 0},
		{"SpreadDistinct", &c.SpreadDistinct, DefaultSpreadDistinct, 64},
		{"MaxAlertsPerMinute", &c.MaxAlertsPerMinute, DefaultMaxAlertsPerMinute, 0},
		{"MaxClients", &c.MaxClients, DefaultMaxClients, 0},
	} {
		if *f.v < 0 || f.max > 0 && *f.v > f.max {
			return nil, fmt.Errorf("siem: %s %d out of range", f.name, *f.v)
		}
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	if c.Window < 0 || c.Suppress < 0 {
		return nil, errors.New("siem: Window and Suppress must not be negative")
	}
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	if c.Window < buckets*time.Millisecond {
		return nil, fmt.Errorf("siem: Window %v too short", c.Window)
	}
	if c.Suppress == 0 {
		c.Suppress = DefaultSuppress
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	e := &Engine{o: o, disabled: c.Disabled, wake: make(chan struct{}, 1)}
	e.st.init(&e.o)
	var key [8]byte
	rand.Read(key[:])
	e.st.hashKey = binary.LittleEndian.Uint64(key[:])
	if c.Disabled {
		return e, nil
	}
	e.reqs = make([]Request, 0, c.QueueCapacity)
	e.spareReqs = make([]Request, 0, c.QueueCapacity)
	if o.Store != nil {
		rows, last, err := o.Store.SecurityAlerts(context.Background())
		if err != nil {
			return nil, fmt.Errorf("siem: load alerts: %w", err)
		}
		if err := e.st.load(rows, last); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// Enabled reports whether detection is on.
func (e *Engine) Enabled() bool { return !e.disabled }

// ObserveRequest queues a copy of r for analysis. It never blocks: with
// the queue full the observation is dropped and counted.
func (e *Engine) ObserveRequest(r *Request) {
	if e.disabled {
		return
	}
	var now time.Time
	if r.Time.IsZero() {
		now = e.o.Now()
	}
	n, ok := e.admit()
	if !ok {
		return
	}
	e.reqs = append(e.reqs, *r)
	q := &e.reqs[len(e.reqs)-1]
	if !now.IsZero() {
		q.Time = now
	}
	for _, p := range []*string{&q.Method, &q.Host, &q.Path, &q.RawQuery, &q.UserAgent, &q.Deployment, &q.Namespace, &q.Scheme} {
		*p = e.keep(*p)
	}
	e.queued(n)
}

// keep copies s into the queue's arena (under qmu). The request path hands
// over strings that live only as long as the request (the proxy's front
// end reuses its buffers), and copying each into an allocation of its own
// would cost the request path several allocations; an arena costs one per
// arenaChunk bytes. A chunk is never written again once a string is in it
// (a full one is left to the garbage collector, which frees it once the
// batch holding its strings is analysed), so the strings stay valid; what
// outlives a batch (an alert's fields) is cloned out of it (state.raise).
func (e *Engine) keep(s string) string {
	if s == "" {
		return ""
	}
	if cap(e.arena)-len(e.arena) < len(s) {
		e.arena = make([]byte, 0, max(arenaChunk, len(s)))
	}
	at := len(e.arena)
	e.arena = append(e.arena, s...)
	return unsafe.String(&e.arena[at], len(s))
}

// arenaChunk is the size of the queue's string arena's chunks.
const arenaChunk = 64 << 10

// ObserveAuth queues a for analysis; like ObserveRequest it never blocks.
func (e *Engine) ObserveAuth(a Auth) {
	if e.disabled {
		return
	}
	if a.Time.IsZero() {
		a.Time = e.o.Now()
	}
	n, ok := e.admit()
	if !ok {
		return
	}
	for _, p := range []*string{&a.Action, &a.Deployment, &a.Namespace, &a.Host, &a.Path, &a.Subject, &a.Scheme, &a.Reason} {
		*p = e.keep(*p)
	}
	e.auths = append(e.auths, a)
	e.queued(n)
}

// admit counts an observation and finds it room in the queue: with room it
// returns with qmu held and n, the queue's length before it, for the caller
// to queue it and call queued(n); with the queue full (or the engine
// closed) it counts the observation dropped and returns !ok, qmu released.
// One lock acquisition an observation.
func (e *Engine) admit() (n int, ok bool) {
	e.qmu.Lock()
	e.observed++
	n = len(e.reqs) + len(e.auths)
	if n >= e.o.QueueCapacity || e.closed {
		e.dropped++
		e.qmu.Unlock()
		return n, false
	}
	return n, true
}

// queued ends an observation admit let in: it releases qmu and wakes Run
// when the observation made the queue half full.
func (e *Engine) queued(n int) {
	e.qmu.Unlock()
	if n == 0 || n+1 == e.o.QueueCapacity/2 {
		// The first observation of a batch starts Run's wait; half full
		// ends it early. Nothing else wakes a goroutine.
		e.kick()
	}
}

func (e *Engine) kick() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// Run analyses what is queued until ctx ends, and then once more. An idle
// engine sleeps: the first observation into an empty queue wakes it, and
// it analyses drainEvery later (at once when the queue is half full) —
// batches, not a goroutine wake per request. Folds not yet written are
// written when due even without new traffic.
func (e *Engine) Run(ctx context.Context) {
	if e.disabled {
		<-ctx.Done()
		return
	}
	batch := time.NewTimer(drainEvery)
	batch.Stop()
	folds := time.NewTimer(foldStoreEvery)
	folds.Stop()
	defer batch.Stop()
	defer folds.Stop()
	for {
		select {
		case <-ctx.Done():
			e.Flush()
			return
		case <-folds.C:
		case <-e.wake:
			// A batch has begun: let it gather, unless it fills first.
			batch.Reset(drainEvery)
			select {
			case <-ctx.Done():
				e.Flush()
				return
			case <-batch.C:
			case <-e.wake:
				batch.Stop()
			}
		}
		e.flush(false)
		if e.foldsPending() {
			folds.Reset(foldStoreEvery)
		}
	}
}

// foldsPending reports alerts changed but not yet written (folds wait for
// foldStoreEvery).
func (e *Engine) foldsPending() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.st.dirty) > 0
}

// foldStoreEvery is how often, at most, alerts that only grew (a fold:
// count and last_ts) are written while no new alert is raised: a source
// hammering away folds into its alert every batch, and writing each batch
// would make an attack a stream of disk syncs. New alerts are written in
// the batch that raises them.
const foldStoreEvery = 5 * time.Second

// Flush analyses everything queued now and stores every alert changed.
func (e *Engine) Flush() { e.flush(true) }

// flush is a batch: analysis, then the store write of what changed — at
// once for new alerts (or when all), folds at most every foldStoreEvery.
func (e *Engine) flush(all bool) {
	if e.disabled {
		return
	}
	e.step.Lock()
	defer e.step.Unlock()
	e.qmu.Lock()
	reqs, auths := e.reqs, e.auths
	e.reqs, e.auths = e.spareReqs, e.spareAuths
	e.qmu.Unlock()

	now := e.o.Now()
	e.mu.Lock()
	e.st.analyse(reqs, auths, now)
	var rows []store.SecurityAlert
	var fresh []apitype.SecurityAlert
	if all || len(e.st.fresh) > 0 || now.Sub(e.lastPut) >= foldStoreEvery {
		rows, fresh = e.st.takeDirty()
		if len(rows) > 0 {
			e.lastPut = now
		}
	}
	e.mu.Unlock()

	clear(reqs)
	clear(auths)
	e.spareReqs, e.spareAuths = reqs[:0], auths[:0]

	if len(rows) > 0 && e.o.Store != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := e.o.Store.PutSecurityAlerts(ctx, rows, e.o.AlertCapacity)
		cancel()
		if err != nil {
			e.o.Log.Error("siem: storing alerts failed; will retry", "alerts", len(rows), "err", err)
			e.mu.Lock()
			e.st.redirty(rows)
			e.mu.Unlock()
		}
	}
	for _, a := range fresh {
		e.o.Log.Warn("security alert", "id", a.ID, "rule", a.Rule, "severity", a.Severity,
			"client", a.Client, "deployment", a.Deployment, "title", a.Title)
		if e.o.OnAlert != nil {
			e.o.OnAlert(a)
		}
	}
}

// Close analyses what is queued, stores it, and refuses further
// observations (they count as dropped).
func (e *Engine) Close() error {
	if e.disabled {
		return nil
	}
	e.Flush()
	e.qmu.Lock()
	e.closed = true
	e.qmu.Unlock()
	e.Flush() // anything that slipped in between
	e.mu.Lock()
	pending := len(e.st.dirty)
	e.mu.Unlock()
	if pending > 0 {
		return fmt.Errorf("siem: %d alerts could not be stored", pending)
	}
	return nil
}

// Filter selects alerts.
type Filter struct {
	// MinSeverity is a floor; "" or an unknown severity is none.
	MinSeverity apitype.Severity
	// Rule and Deployment, when set, must equal the alert's.
	Rule, Deployment string
	// Namespaces confines the caller: nil sees every alert; otherwise only
	// alerts of deployments in these namespaces (never an alert without a
	// deployment: admin-plane, unrouted and spray findings).
	Namespaces []string
	// Visible, when set, must accept an alert's deployment and namespace
	// (a caller that reaches only some deployments); an alert without a
	// deployment is offered with "".
	Visible func(deployment, namespace string) bool
	// Limit bounds the alerts returned: default 200, at most 1000.
	Limit int
}

// Alerts returns the alerts f selects, newest first, and the totals by
// severity of the alerts f's Rule, Deployment and Namespaces select
// (before the severity floor and the limit).
func (e *Engine) Alerts(f Filter) ([]apitype.SecurityAlert, apitype.SeverityTotals) {
	limit := f.Limit
	if limit <= 0 {
		limit = 200
	}
	limit = min(limit, 1000)
	floor := severityRank(f.MinSeverity)
	var ns map[string]bool
	if f.Namespaces != nil {
		ns = make(map[string]bool, len(f.Namespaces))
		for _, n := range f.Namespaces {
			ns[n] = true
		}
	}
	var out []apitype.SecurityAlert
	var tot apitype.SeverityTotals
	e.mu.Lock()
	defer e.mu.Unlock()
	ring := e.st.ring
	for i := len(ring) - 1; i >= 0; i-- {
		a := ring[i]
		if f.Rule != "" && a.a.Rule != f.Rule || f.Deployment != "" && a.a.Deployment != f.Deployment {
			continue
		}
		if ns != nil && (a.a.Deployment == "" || !ns[a.namespace]) {
			continue
		}
		if f.Visible != nil && !f.Visible(a.a.Deployment, a.namespace) {
			continue
		}
		addTotal(&tot, a.a.Severity)
		if severityRank(a.a.Severity) < floor || len(out) >= limit {
			continue
		}
		out = append(out, a.a)
	}
	return out, tot
}

func addTotal(t *apitype.SeverityTotals, s apitype.Severity) {
	switch s {
	case apitype.SeverityInfo:
		t.Info++
	case apitype.SeverityLow:
		t.Low++
	case apitype.SeverityMedium:
		t.Medium++
	case apitype.SeverityHigh:
		t.High++
	case apitype.SeverityCritical:
		t.Critical++
	}
}

// severityRank orders severities info < low < medium < high < critical;
// an unknown one ranks 0, below info.
func severityRank(s apitype.Severity) int {
	switch s {
	case apitype.SeverityInfo:
		return 1
	case apitype.SeverityLow:
		return 2
	case apitype.SeverityMedium:
		return 3
	case apitype.SeverityHigh:
		return 4
	case apitype.SeverityCritical:
		return 5
	}
	return 0
}

// Stats reports the pipeline's counters.
func (e *Engine) Stats() apitype.SiemStats {
	e.qmu.Lock()
	observed, dropped := e.observed, e.dropped
	e.qmu.Unlock()
	e.mu.Lock()
	defer e.mu.Unlock()
	return apitype.SiemStats{
		Observed: int(observed), Dropped: int(dropped), Analyzed: int(e.st.analyzed),
		Raised: int(e.st.raised), Suppressed: int(e.st.suppressed),
		TrackedClients: len(e.st.sources), ClientsAtCapacity: e.st.atCapacity(),
	}
}

// Summary is what MetricsResponse.security carries: alerts held, how many
// are high or critical, observations dropped, and whether the source table
// is full.
func (e *Engine) Summary() (open, urgent int, dropped uint64, atCapacity bool) {
	e.qmu.Lock()
	dropped = e.dropped
	e.qmu.Unlock()
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, a := range e.st.ring {
		if severityRank(a.a.Severity) >= severityRank(apitype.SeverityHigh) {
			urgent++
		}
	}
	return len(e.st.ring), urgent, dropped, e.st.atCapacity()
}

// WindowSecs is the window the rate-based rules count over, for
// SecurityResponse.window_secs.
func (e *Engine) WindowSecs() int { return int(e.o.Window / time.Second) }

// Collector exposes the engine's counters to Prometheus.
func (e *Engine) Collector() prometheus.Collector { return collector{e} }
