package notify

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/netguard"
	"github.com/berth-dev/berth/internal/secrets"
	"github.com/berth-dev/berth/internal/store"
)

// DB is the persistence the notifier needs (implemented by *store.Store).
type DB interface {
	Webhooks(ctx context.Context) ([]store.Webhook, error)
	PutWebhook(ctx context.Context, w store.Webhook) error
	DeleteWebhook(ctx context.Context, id string) error
	AddWebhookCounts(ctx context.Context, deltas map[string]store.WebhookCounts) error
}

// Defaults of Options.
const (
	DefaultQueueSize   = 256
	DefaultAttempts    = 8
	DefaultBackoff     = time.Second
	DefaultMaxBackoff  = 5 * time.Minute
	DefaultTimeout     = 10 * time.Second
	DefaultMinSeverity = apitype.SeverityHigh
)

// Options configure a Notifier. Store is required; the zero value of every
// other field is its default.
type Options struct {
	Store DB
	// Key seals each webhook's URL and secret at rest: the secret store's key.
	Key secrets.Key
	// Self is berth's own listeners, which a webhook must not reach; it may be
	// filled after New. Nil refuses none.
	Self *netguard.Self
	// AllowLinkLocal lets webhooks reach link-local and cloud metadata
	// addresses (the operator's BERTH_ALLOW_LINK_LOCAL_UPSTREAMS).
	AllowLinkLocal bool

	Now func() time.Time // default time.Now
	// Sleep waits out a backoff, returning early with ctx's error when ctx is
	// done. Default: a timer. Tests pass one that does not wait.
	Sleep func(ctx context.Context, d time.Duration) error
	Log   *slog.Logger

	QueueSize  int           // alerts waiting per webhook; default 256
	Attempts   int           // per alert, the first included; default 8
	Backoff    time.Duration // the first retry's wait, doubling; default 1 s
	MaxBackoff time.Duration // default 5 min
	Timeout    time.Duration // of each request, answer included; default 10 s
}

// Errors of the notifier.
var (
	// ErrNotFound: no webhook of that id.
	ErrNotFound = errors.New("notify: no such webhook")
	// ErrQueueFull: the webhook's queue has no room (Test).
	ErrQueueFull = errors.New("notify: the webhook's queue is full")
	// ErrClosed: the notifier was closed.
	ErrClosed = errors.New("notify: the notifier is closed")
)

// Notifier delivers security alerts to the configured webhooks. Safe for
// concurrent use. Create it with New and stop it with Close.
type Notifier struct {
	o      Options
	client *http.Client
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // senders and the count writer

	smu    sync.Mutex // serialises Add and Delete (store and memory) with Reload
	mu     sync.Mutex
	hooks  map[string]*hook
	closed bool
	busy   int           // alerts queued or being sent, over all webhooks
	idle   chan struct{} // closed while busy == 0

	cmu     sync.Mutex
	pending map[string]store.WebhookCounts // counts not yet in the store
	kick    chan struct{}                  // wakes the count writer
	wmu     sync.Mutex                     // one store write of counts at a time
}

type hook struct {
	id, url     string
	secret      []byte
	min         apitype.Severity
	note        string
	createdAt   time.Time
	q           chan job
	ctx         context.Context
	cancel      context.CancelFunc
	full        atomic.Bool // the last alert found the queue full (logged once per run)
	delivered   atomic.Int64
	failed      atomic.Int64
	deadLetters atomic.Int64

	mu           sync.Mutex
	lastError    string
	lastDelivery time.Time
}

type job struct {
	delivery string
	alert    apitype.SecurityAlert
	test     bool
}

// sealed is what is sealed of a webhook.
type sealed struct {
	URL    string `json:"url"`
	Secret string `json:"secret"`
}

func aad(id string) []byte { return []byte("berth-webhook-v1\x00" + id) }

// New loads the stored webhooks and starts their senders. A stored webhook
// that does not open with o.Key is an error: the key is not the one it was
// sealed with.
func New(ctx context.Context, o Options) (*Notifier, error) {
	if o.Store == nil {
		return nil, errors.New("notify: Options.Store is required")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Sleep == nil {
		o.Sleep = sleep
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.QueueSize <= 0 {
		o.QueueSize = DefaultQueueSize
	}
	if o.Attempts <= 0 {
		o.Attempts = DefaultAttempts
	}
	if o.Backoff <= 0 {
		o.Backoff = DefaultBackoff
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = DefaultMaxBackoff
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	rows, err := o.Store.Webhooks(ctx)
	if err != nil {
		return nil, err
	}
	n := &Notifier{
		o: o, client: guardedClient(o.Self, o.AllowLinkLocal, o.Timeout),
		hooks: map[string]*hook{}, idle: make(chan struct{}),
		pending: map[string]store.WebhookCounts{}, kick: make(chan struct{}, 1),
	}
	close(n.idle)
	var hs []*hook
	for _, r := range rows {
		h, err := n.decode(r)
		if err != nil {
			return nil, err
		}
		hs = append(hs, h)
	}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	for _, h := range hs {
		n.start(h) // not closed yet: cannot fail
	}
	n.wg.Go(n.writeCounts)
	return n, nil
}

// decode opens a stored webhook.
func (n *Notifier) decode(r store.Webhook) (*hook, error) {
	plain, err := n.o.Key.Open(r.Sealed, aad(r.ID))
	if err != nil {
		return nil, fmt.Errorf("notify: webhook %q does not open with the secret key (%v): start berth with the key it was created under", r.ID, err)
	}
	var s sealed
	if err := json.Unmarshal(plain, &s); err != nil {
		return nil, fmt.Errorf("notify: webhook %q is corrupt: %w", r.ID, err)
	}
	h := &hook{id: r.ID, url: s.URL, secret: []byte(s.Secret), min: apitype.Severity(r.MinSeverity),
		note: r.Note, createdAt: r.CreatedAt, lastError: r.LastError, lastDelivery: r.LastDeliveryAt}
	h.delivered.Store(r.Delivered)
	h.failed.Store(r.Failed)
	h.deadLetters.Store(r.DeadLettered)
	return h, nil
}

// Reload brings the webhooks in line with the store, without writing it:
// on a store several hosts share, the webhooks another host added (they
// start here too) or deleted (their queued alerts are dropped). A webhook
// this host has keeps its sender and counts. A stored webhook that does
// not open is logged and skipped. It serialises with this host's Add and
// Delete.
func (n *Notifier) Reload(ctx context.Context) error {
	n.smu.Lock()
	defer n.smu.Unlock()
	rows, err := n.o.Store.Webhooks(ctx)
	if err != nil {
		return fmt.Errorf("notify: reload webhooks: %w", err)
	}
	stored := make(map[string]bool, len(rows))
	for _, r := range rows {
		stored[r.ID] = true
		n.mu.Lock()
		_, have := n.hooks[r.ID]
		n.mu.Unlock()
		if have {
			continue
		}
		h, err := n.decode(r)
		if err != nil {
			n.o.Log.Error("skipping a stored webhook", "webhook", r.ID, "err", err)
			continue
		}
		if err := n.start(h); err != nil {
			return err
		}
	}
	n.mu.Lock()
	var gone []*hook
	for id, h := range n.hooks {
		if !stored[id] {
			delete(n.hooks, id)
			gone = append(gone, h)
		}
	}
	n.mu.Unlock()
	for _, h := range gone {
		h.cancel()
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// start registers h and starts its sender, unless the notifier is closed.
// The caller holds no lock.
func (n *Notifier) start(h *hook) error {
	h.q = make(chan job, n.o.QueueSize)
	h.ctx, h.cancel = context.WithCancel(n.ctx)
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed { // Close may be waiting on the senders already
		h.cancel()
		return ErrClosed
	}
	n.hooks[h.id] = h
	n.wg.Go(func() { n.send(h) })
	return nil
}

// Add creates a webhook. The view returned carries its secret, which is
// never shown again. A spec that does not validate is a *web.FieldError.
func (n *Notifier) Add(ctx context.Context, spec apitype.WebhookSpec) (apitype.WebhookView, error) {
	if err := checkSpec(&spec, n.o.Self, n.o.AllowLinkLocal); err != nil {
		return apitype.WebhookView{}, err
	}
	n.mu.Lock()
	closed := n.closed
	n.mu.Unlock()
	if closed {
		return apitype.WebhookView{}, ErrClosed
	}
	secret := "whsec_" + base64.RawURLEncoding.EncodeToString(randomBytes(32))
	h := &hook{id: "wh_" + hex.EncodeToString(randomBytes(8)), url: spec.URL, secret: []byte(secret),
		min: spec.MinSeverity, note: spec.Note, createdAt: n.o.Now().UTC().Truncate(time.Second)}
	plain, err := json.Marshal(sealed{URL: h.url, Secret: secret})
	if err != nil {
		return apitype.WebhookView{}, err
	}
	n.smu.Lock()
	defer n.smu.Unlock()
	err = n.o.Store.PutWebhook(ctx, store.Webhook{ID: h.id, Sealed: n.o.Key.Seal(plain, aad(h.id)),
		MinSeverity: string(h.min), Note: h.note, CreatedAt: h.createdAt})
	if err != nil {
		return apitype.WebhookView{}, fmt.Errorf("the webhook was not saved: %w", err)
	}
	if err := n.start(h); err != nil {
		return apitype.WebhookView{}, err // saved: it runs from the next start
	}
	v := h.view()
	v.Secret = secret
	return v, nil
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

// Delete removes a webhook; alerts still queued for it are dropped.
func (n *Notifier) Delete(ctx context.Context, id string) error {
	n.smu.Lock()
	defer n.smu.Unlock()
	n.mu.Lock()
	_, ok := n.hooks[id]
	n.mu.Unlock()
	if !ok {
		return fmt.Errorf("%w: %q", ErrNotFound, id)
	}
	err := n.o.Store.DeleteWebhook(ctx, id)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	n.mu.Lock()
	h, ok := n.hooks[id]
	delete(n.hooks, id)
	n.mu.Unlock()
	if !ok {
		return fmt.Errorf("%w: %q", ErrNotFound, id) // a concurrent Delete won
	}
	// No Alert enqueues for h from here on (they look it up under n.mu),
	// so its sender drains everything queued before it exits.
	h.cancel()
	return nil
}

// List returns every webhook, oldest first, without secrets.
func (n *Notifier) List() []apitype.WebhookView {
	n.mu.Lock()
	hs := make([]*hook, 0, len(n.hooks))
	for _, h := range n.hooks {
		hs = append(hs, h)
	}
	n.mu.Unlock()
	sortHooks(hs)
	out := make([]apitype.WebhookView, len(hs))
	for i, h := range hs {
		out[i] = h.view()
	}
	return out
}

// Get returns one webhook, without its secret.
func (n *Notifier) Get(id string) (apitype.WebhookView, error) {
	n.mu.Lock()
	h, ok := n.hooks[id]
	n.mu.Unlock()
	if !ok {
		return apitype.WebhookView{}, fmt.Errorf("%w: %q", ErrNotFound, id)
	}
	return h.view(), nil
}

func sortHooks(hs []*hook) {
	slices.SortFunc(hs, func(a, b *hook) int {
		if c := a.createdAt.Compare(b.createdAt); c != 0 {
			return c
		}
		return compareStrings(a.id, b.id)
	})
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (h *hook) view() apitype.WebhookView {
	v := apitype.WebhookView{
		ID: h.id, URL: h.url, MinSeverity: h.min, Note: h.note, CreatedAt: h.createdAt.Unix(),
		Delivered: h.delivered.Load(), Failed: h.failed.Load(), DeadLettered: h.deadLetters.Load(),
	}
	h.mu.Lock()
	v.LastError = h.lastError
	if !h.lastDelivery.IsZero() {
		at := h.lastDelivery.Unix()
		v.LastDeliveryAt = &at
	}
	h.mu.Unlock()
	return v
}

// Alert queues a for every webhook whose least severity it reaches. It never
// blocks: a webhook whose queue is full dead-letters a at once. A severity
// the notifier does not know is sent to every webhook, as if critical —
// better a surprising alert than a missed one.
func (n *Notifier) Alert(a apitype.SecurityAlert) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return
	}
	for _, h := range n.hooks {
		if rank(a.Severity) < rank(h.min) {
			continue
		}
		n.enqueue(h, job{delivery: deliveryID(), alert: a})
	}
}

// Test queues a synthetic info alert for webhook id, whatever its least
// severity, and returns the delivery's id.
func (n *Notifier) Test(id string) (string, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return "", ErrClosed
	}
	h, ok := n.hooks[id]
	if !ok {
		return "", fmt.Errorf("%w: %q", ErrNotFound, id)
	}
	now := n.o.Now()
	j := job{delivery: deliveryID(), test: true, alert: apitype.SecurityAlert{
		Ts: now.UnixMilli(), LastTs: now.UnixMilli(), Rule: "berth.webhook-test", Severity: apitype.SeverityInfo,
		Title: "Test alert from berth: this webhook receives berth's security alerts", Count: 1,
		Response: apitype.AlertResponse{Investigate: []string{}, Actions: []apitype.SuggestedAction{}},
	}}
	if !n.enqueue(h, j) {
		return "", fmt.Errorf("%w: %q", ErrQueueFull, id)
	}
	return j.delivery, nil
}

func deliveryID() string { return "dlv_" + hex.EncodeToString(randomBytes(12)) }

// enqueue hands j to h's sender without blocking, or dead-letters it (a
// test alert is refused instead: its caller hears of it). The caller holds
// n.mu.
func (n *Notifier) enqueue(h *hook, j job) bool {
	select {
	case h.q <- j:
		if n.busy == 0 {
			n.idle = make(chan struct{})
		}
		n.busy++
		h.full.Store(false)
		return true
	default:
	}
	if j.test {
		return false
	}
	if !h.full.Swap(true) {
		n.o.Log.Warn("webhook queue full: alert dead-lettered (further ones are counted, not logged, until it has room)",
			"webhook", h.id, "delivery", j.delivery, "rule", j.alert.Rule, "severity", j.alert.Severity)
	}
	n.deadLetter(h)
	return false
}

// done marks one queued alert finished.
func (n *Notifier) done() {
	n.mu.Lock()
	n.busy--
	if n.busy == 0 {
		close(n.idle)
	}
	n.mu.Unlock()
}

// Flush waits until no alert is queued or being sent (retries included),
// then writes the counts to the store.
func (n *Notifier) Flush(ctx context.Context) error {
	for {
		n.mu.Lock()
		idle, busy := n.idle, n.busy
		n.mu.Unlock()
		if busy == 0 {
			return n.persist(ctx)
		}
		select {
		case <-idle:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Close stops the senders — alerts still queued or awaiting a retry are
// dead-lettered — and writes the counts to the store. Alerts raised after
// Close are dropped.
func (n *Notifier) Close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	n.mu.Unlock()
	n.cancel()
	n.wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return n.persist(ctx)
}

// rank orders severities; an unknown one ranks above critical.
func rank(s apitype.Severity) int {
	switch s {
	case apitype.SeverityInfo:
		return 0
	case apitype.SeverityLow:
		return 1
	case apitype.SeverityMedium:
		return 2
	case apitype.SeverityHigh:
		return 3
	case apitype.SeverityCritical:
		return 4
	}
	return 5
}

// count records one outcome in memory and queues it for the store.
func (n *Notifier) count(id string, f func(*store.WebhookCounts)) {
	n.cmu.Lock()
	c := n.pending[id]
	f(&c)
	n.pending[id] = c
	n.cmu.Unlock()
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

func (n *Notifier) delivered(h *hook, at time.Time) {
	h.delivered.Add(1)
	h.mu.Lock()
	h.lastError, h.lastDelivery = "", at
	h.mu.Unlock()
	n.count(h.id, func(c *store.WebhookCounts) {
		c.Delivered++
		c.LastError, c.ClearError, c.LastDeliveryAt = "", true, at
	})
}

func (n *Notifier) failedAttempt(h *hook, msg string) {
	h.failed.Add(1)
	h.mu.Lock()
	h.lastError = msg
	h.mu.Unlock()
	n.count(h.id, func(c *store.WebhookCounts) { c.Failed++; c.LastError, c.ClearError = msg, false })
}

// deadLetter counts an alert given up on.
func (n *Notifier) deadLetter(h *hook) {
	h.deadLetters.Add(1)
	n.count(h.id, func(c *store.WebhookCounts) { c.DeadLettered++ })
}

// writeCounts writes pending counts whenever there are some, until Close.
func (n *Notifier) writeCounts() {
	for {
		select {
		case <-n.kick:
		case <-n.ctx.Done():
			return
		}
		ctx, cancel := context.WithTimeout(n.ctx, 10*time.Second)
		if err := n.persist(ctx); err != nil && n.ctx.Err() == nil {
			n.o.Log.Warn("could not save the webhooks' delivery counts; will retry with the next", "err", err)
		}
		cancel()
	}
}

// persist writes the pending counts in one transaction; on failure they
// stay pending.
func (n *Notifier) persist(ctx context.Context) error {
	n.wmu.Lock()
	defer n.wmu.Unlock()
	n.cmu.Lock()
	batch := n.pending
	n.pending = map[string]store.WebhookCounts{}
	n.cmu.Unlock()
	if len(batch) == 0 {
		return nil
	}
	err := n.o.Store.AddWebhookCounts(ctx, batch)
	if err != nil {
		n.cmu.Lock()
		for id, b := range batch { // b happened before what is pending now
			c := n.pending[id]
			merged := b
			merged.Delivered += c.Delivered
			merged.Failed += c.Failed
			merged.DeadLettered += c.DeadLettered
			if c.LastError != "" || c.ClearError {
				merged.LastError, merged.ClearError = c.LastError, c.ClearError
			}
			if !c.LastDeliveryAt.IsZero() {
				merged.LastDeliveryAt = c.LastDeliveryAt
			}
			n.pending[id] = merged
		}
		n.cmu.Unlock()
	}
	return err
}
