package notify_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/netguard"
	"github.com/berth-dev/berth/internal/notify"
	"github.com/berth-dev/berth/internal/secrets"
	"github.com/berth-dev/berth/internal/store"
	"github.com/berth-dev/berth/internal/web"
)

// The tests run the notifier over a real SQLite store, delivering to real
// HTTP receivers on loopback. No test waits on the clock: backoffs go
// through a sleeper that records them and returns at once, and outcomes are
// awaited with Flush.

var key = secrets.Key{7, 7, 7}

func openStore(t *testing.T, dir string) *store.Store {
	t.Helper()
	st, err := store.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// sleeper records the backoffs asked for and does not wait.
type sleeper struct {
	mu sync.Mutex
	ds []time.Duration
}

func (s *sleeper) sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.ds = append(s.ds, d)
	s.mu.Unlock()
	return ctx.Err()
}

func (s *sleeper) waits() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration(nil), s.ds...)
}

func newNotifier(t *testing.T, st notify.DB, o notify.Options) (*notify.Notifier, *sleeper) {
	t.Helper()
	sl := &sleeper{}
	o.Store, o.Key = st, key
	if o.Sleep == nil {
		o.Sleep = sl.sleep
	}
	n, err := notify.New(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n, sl
}

// delivery is one request a receiver got.
type delivery struct {
	header http.Header
	body   []byte
}

// receiver is a webhook endpoint on loopback answering with status(i) its
// i-th request (0-based).
type receiver struct {
	*httptest.Server
	mu   sync.Mutex
	got  []delivery
	hits chan struct{} // one send per request, when buffered room allows
}

func newReceiver(t *testing.T, status func(i int) int) *receiver {
	t.Helper()
	r := &receiver{hits: make(chan struct{}, 64)}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		i := len(r.got)
		r.got = append(r.got, delivery{req.Header.Clone(), body})
		r.mu.Unlock()
		select {
		case r.hits <- struct{}{}:
		default:
		}
		w.WriteHeader(status(i))
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) deliveries() []delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]delivery(nil), r.got...)
}

func always(code int) func(int) int { return func(int) int { return code } }

func flush(t *testing.T, n *notify.Notifier) {
	t.Helper()
	if err := n.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
}

func view(t *testing.T, n *notify.Notifier, id string) apitype.WebhookView {
	t.Helper()
	v, err := n.Get(id)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func alert(sev apitype.Severity, rule string) apitype.SecurityAlert {
	return apitype.SecurityAlert{
		ID: 42, Ts: 1_700_000_000_000, LastTs: 1_700_000_001_000, Rule: rule, Severity: sev,
		Title: "Brute force against /login", Client: "203.0.113.9", Deployment: "web", Path: "/login",
		Technique: "T1110", Count: 12,
		ECS:      map[string]json.RawMessage{"source.ip": json.RawMessage(`"203.0.113.9"`)},
		Response: apitype.AlertResponse{Investigate: []string{"check the logs"}, Actions: []apitype.SuggestedAction{}},
	}
}

func TestSignedDelivery(t *testing.T) {
	st := openStore(t, t.TempDir())
	now := time.Unix(1_800_000_000, 250_000_000)
	rcv := newReceiver(t, always(http.StatusNoContent))
	n, sl := newNotifier(t, st, notify.Options{Now: func() time.Time { return now }})
	v, err := n.Add(t.Context(), apitype.WebhookSpec{URL: rcv.URL + "/hook", Note: "pager"})
	if err != nil {
		t.Fatal(err)
	}
	if v.MinSeverity != apitype.SeverityHigh || !strings.HasPrefix(v.Secret, "whsec_") || !strings.HasPrefix(v.ID, "wh_") {
		t.Fatalf("Add = %+v: want min_severity high by default, a whsec_ secret and a wh_ id", v)
	}
	a := alert(apitype.SeverityCritical, "auth.brute-force")
	n.Alert(a)
	flush(t, n)

	got := rcv.deliveries()
	if len(got) != 1 {
		t.Fatalf("receiver got %d requests, want 1", len(got))
	}
	d := got[0]
	for h, want := range map[string]string{
		"Content-Type": "application/json", notify.HeaderEvent: "security.alert", notify.HeaderTimestamp: "1800000000",
	} {
		if g := d.header.Get(h); g != want {
			t.Errorf("%s: %q, want %q", h, g, want)
		}
	}
	if !strings.HasPrefix(d.header.Get(notify.HeaderDelivery), "dlv_") {
		t.Errorf("X-Berth-Delivery %q", d.header.Get(notify.HeaderDelivery))
	}
	sig, ts := d.header.Get(notify.HeaderSignature), d.header.Get(notify.HeaderTimestamp)
	if err := notify.VerifySignature(v.Secret, ts, d.body, sig); err != nil {
		t.Errorf("VerifySignature: %v", err)
	}
	// Any change — the body, the timestamp, the key — breaks it.
	tampered := bytes.Replace(d.body, []byte(`"critical"`), []byte(`"info"`), 1)
	for name, err := range map[string]error{
		"body":      notify.VerifySignature(v.Secret, ts, tampered, sig),
		"timestamp": notify.VerifySignature(v.Secret, "1800000001", d.body, sig),
		"secret":    notify.VerifySignature(v.Secret+"x", ts, d.body, sig),
		"header":    notify.VerifySignature(v.Secret, ts, d.body, strings.TrimPrefix(sig, "sha256=")),
	} {
		if !errors.Is(err, notify.ErrBadSignature) {
			t.Errorf("tampered %s: %v, want ErrBadSignature", name, err)
		}
	}
	var body apitype.WebhookDelivery
	if err := json.Unmarshal(d.body, &body); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(apitype.WebhookDelivery{SentAt: now.UnixMilli(), Alert: a}, body); d != "" {
		t.Errorf("body (-want +got):\n%s", d)
	}

	v = view(t, n, v.ID)
	if v.Delivered != 1 || v.Failed != 0 || v.DeadLettered != 0 || v.LastError != "" ||
		v.LastDeliveryAt == nil || *v.LastDeliveryAt != now.Unix() || v.Secret != "" {
		t.Errorf("after delivery: %+v", v)
	}
	if w := sl.waits(); len(w) != 0 {
		t.Errorf("waited %v on a delivery that succeeded at once", w)
	}
	want := map[string]float64{v.ID + "/delivered": 1, v.ID + "/failed": 0, v.ID + "/dead_lettered": 0}
	if d := cmp.Diff(want, gather(t, n)); d != "" {
		t.Errorf("berth_webhook_deliveries_total (-want +got):\n%s", d)
	}
}

// gather reads berth_webhook_deliveries_total as "webhook/outcome" → value.
func gather(t *testing.T, c prometheus.Collector) map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		if f.GetName() != "berth_webhook_deliveries_total" {
			t.Errorf("unexpected metric %s", f.GetName())
			continue
		}
		for _, m := range f.Metric {
			l := map[string]string{}
			for _, lp := range m.Label {
				l[lp.GetName()] = lp.GetValue()
			}
			out[l["webhook"]+"/"+l["outcome"]] = m.GetCounter().GetValue()
		}
	}
	return out
}

func TestMinSeverity(t *testing.T) {
	st := openStore(t, t.TempDir())
	rcv := newReceiver(t, always(http.StatusOK))
	n, _ := newNotifier(t, st, notify.Options{})
	v, err := n.Add(t.Context(), apitype.WebhookSpec{URL: rcv.URL, MinSeverity: apitype.SeverityMedium})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []apitype.Severity{"info", "low", "medium", "high", "critical", "severe"} {
		n.Alert(alert(s, "rule."+string(s)))
	}
	flush(t, n)
	var rules []string
	for _, d := range rcv.deliveries() {
		var body apitype.WebhookDelivery
		if err := json.Unmarshal(d.body, &body); err != nil {
			t.Fatal(err)
		}
		rules = append(rules, body.Alert.Rule)
	}
	// In the order raised; an unknown severity is sent, as if critical.
	if d := cmp.Diff([]string{"rule.medium", "rule.high", "rule.critical", "rule.severe"}, rules); d != "" {
		t.Errorf("delivered (-want +got):\n%s", d)
	}
	if v := view(t, n, v.ID); v.Delivered != 4 {
		t.Errorf("delivered %d, want 4", v.Delivered)
	}
	// Test sends an info alert whatever the least severity.
	id, err := n.Test(v.ID)
	if err != nil {
		t.Fatal(err)
	}
	flush(t, n)
	got := rcv.deliveries()
	last := got[len(got)-1]
	var body apitype.WebhookDelivery
	if err := json.Unmarshal(last.body, &body); err != nil {
		t.Fatal(err)
	}
	if len(got) != 5 || !body.Test || body.Alert.Severity != apitype.SeverityInfo || last.header.Get(notify.HeaderDelivery) != id {
		t.Errorf("test delivery: %d requests, last %s (delivery %q, want %q)", len(got), last.body, last.header.Get(notify.HeaderDelivery), id)
	}
}

// checkBackoff checks each wait against its step: within [step/2, step].
func checkBackoff(t *testing.T, waits, steps []time.Duration) {
	t.Helper()
	if len(waits) != len(steps) {
		t.Fatalf("waited %v, want %d waits", waits, len(steps))
	}
	for i, w := range waits {
		if w < steps[i]/2 || w > steps[i] {
			t.Errorf("wait %d: %v, want within [%v, %v]", i+1, w, steps[i]/2, steps[i])
		}
	}
}

func TestRetryThenSuccess(t *testing.T) {
	st := openStore(t, t.TempDir())
	rcv := newReceiver(t, func(i int) int {
		if i < 2 {
			return http.StatusServiceUnavailable
		}
		return http.StatusAccepted
	})
	n, sl := newNotifier(t, st, notify.Options{})
	v, err := n.Add(t.Context(), apitype.WebhookSpec{URL: rcv.URL})
	if err != nil {
		t.Fatal(err)
	}
	n.Alert(alert(apitype.SeverityHigh, "web.sqli"))
	flush(t, n)
	got := rcv.deliveries()
	if len(got) != 3 {
		t.Fatalf("receiver got %d requests, want 3 (two failures, then the delivery)", len(got))
	}
	for _, d := range got[1:] {
		if d.header.Get(notify.HeaderDelivery) != got[0].header.Get(notify.HeaderDelivery) {
			t.Errorf("a retry changed X-Berth-Delivery: %q then %q", got[0].header.Get(notify.HeaderDelivery), d.header.Get(notify.HeaderDelivery))
		}
		if err := notify.VerifySignature(v.Secret, d.header.Get(notify.HeaderTimestamp), d.body, d.header.Get(notify.HeaderSignature)); err != nil {
			t.Errorf("retry's signature: %v", err)
		}
	}
	checkBackoff(t, sl.waits(), []time.Duration{time.Second, 2 * time.Second})
	v = view(t, n, v.ID)
	if v.Delivered != 1 || v.Failed != 2 || v.DeadLettered != 0 || v.LastError != "" {
		t.Errorf("after two failures and a delivery: %+v (the delivery clears last_error)", v)
	}
}

func TestDeadLetter(t *testing.T) {
	dir := t.TempDir()
	st := openStore(t, dir)
	rcv := newReceiver(t, always(http.StatusInternalServerError))
	// A first wait of a minute reaches the 5 min cap within the 8 attempts.
	n, sl := newNotifier(t, st, notify.Options{Backoff: time.Minute})
	v, err := n.Add(t.Context(), apitype.WebhookSpec{URL: rcv.URL, MinSeverity: apitype.SeverityLow})
	if err != nil {
		t.Fatal(err)
	}
	n.Alert(alert(apitype.SeverityLow, "traffic.scanner"))
	flush(t, n)
	if got := len(rcv.deliveries()); got != notify.DefaultAttempts {
		t.Fatalf("receiver got %d requests, want %d attempts", got, notify.DefaultAttempts)
	}
	m := time.Minute
	checkBackoff(t, sl.waits(), []time.Duration{m, 2 * m, 4 * m, 5 * m, 5 * m, 5 * m, 5 * m})
	v = view(t, n, v.ID)
	if v.Delivered != 0 || v.Failed != 8 || v.DeadLettered != 1 || !strings.Contains(v.LastError, "500") || v.LastDeliveryAt != nil {
		t.Errorf("after every attempt failed: %+v", v)
	}
	want := map[string]float64{v.ID + "/delivered": 0, v.ID + "/failed": 8, v.ID + "/dead_lettered": 1}
	if d := cmp.Diff(want, gather(t, n)); d != "" {
		t.Errorf("berth_webhook_deliveries_total (-want +got):\n%s", d)
	}
	// Flush wrote the counts: a fresh store over the same file reads them.
	rows, err := openStore(t, dir).Webhooks(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].Failed != 8 || rows[0].DeadLettered != 1 || !strings.Contains(rows[0].LastError, "500") {
		t.Errorf("stored: %+v", rows)
	}
}

func TestQueueFullNeverBlocks(t *testing.T) {
	st := openStore(t, t.TempDir())
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	started := make(chan struct{}, 1)
	var count int
	var mu sync.Mutex
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		mu.Lock()
		count++
		first := count == 1
		mu.Unlock()
		if first {
			started <- struct{}{}
			<-release // the first delivery hangs until released
		}
	}))
	t.Cleanup(rcv.Close)
	t.Cleanup(free) // before the receiver closes: it waits for its handlers
	n, _ := newNotifier(t, st, notify.Options{QueueSize: 2})
	v, err := n.Add(t.Context(), apitype.WebhookSpec{URL: rcv.URL})
	if err != nil {
		t.Fatal(err)
	}
	n.Alert(alert(apitype.SeverityHigh, "a1"))
	<-started // the sender is stuck in the first delivery
	for range 9 {
		n.Alert(alert(apitype.SeverityHigh, "more")) // two fit the queue; seven find it full
	}
	if _, err := n.Test(v.ID); !errors.Is(err, notify.ErrQueueFull) {
		t.Errorf("Test with the queue full: %v, want ErrQueueFull", err)
	}
	if v := view(t, n, v.ID); v.DeadLettered != 7 || v.Delivered != 0 {
		t.Errorf("with the queue full: %+v, want 7 dead-lettered (the refused test is not counted)", v)
	}
	free()
	flush(t, n)
	if v := view(t, n, v.ID); v.Delivered != 3 || v.DeadLettered != 7 {
		t.Errorf("after release: %+v, want 3 delivered", v)
	}
}

// TestGuard: a webhook never reaches berth's own listeners, nor a
// link-local or metadata address unless allowed — refused when created if
// the URL names the address, and at dial time, after resolution, when a
// name leads there.
func TestGuard(t *testing.T) {
	dir := t.TempDir()
	st := openStore(t, dir)
	rcv := newReceiver(t, always(http.StatusOK))
	port := rcv.Listener.Addr().(*net.TCPAddr).Port
	self := new(netguard.Self)
	self.Add(rcv.Listener.Addr())
	self.AddAddrPort(netip.AddrPortFrom(netip.IPv6Loopback(), uint16(port)))

	// The link-local webhook is created by a notifier that allows them…
	allowing, _ := newNotifier(t, st, notify.Options{AllowLinkLocal: true})
	meta, err := allowing.Add(t.Context(), apitype.WebhookSpec{URL: "https://169.254.169.254/latest/"})
	if err != nil {
		t.Fatal(err)
	}
	allowing.Close()

	// …and sent by one that does not, over the same store.
	n, _ := newNotifier(t, st, notify.Options{Self: self, Attempts: 2})
	if got := n.List(); len(got) != 1 || got[0].URL != "https://169.254.169.254/latest/" {
		t.Fatalf("List over the same store: %+v", got)
	}
	for _, u := range []string{rcv.URL, "https://169.254.169.254/", "https://[fe80::1]:8443/", "https://100.100.100.200/"} {
		var fe *web.FieldError
		if _, err := n.Add(t.Context(), apitype.WebhookSpec{URL: u}); !errors.As(err, &fe) || fe.Field != "url" {
			t.Errorf("Add(%s): %v, want a url field error", u, err)
		}
	}
	// localhost resolves to the receiver's address, which is berth's own.
	own, err := n.Add(t.Context(), apitype.WebhookSpec{URL: "http://localhost:" + rcv.URL[strings.LastIndex(rcv.URL, ":")+1:] + "/x"})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{own.ID, meta.ID} {
		if _, err := n.Test(id); err != nil {
			t.Fatal(err)
		}
	}
	flush(t, n)
	if got := len(rcv.deliveries()); got != 0 {
		t.Errorf("berth's own listener got %d requests", got)
	}
	for id, want := range map[string]string{own.ID: "one of berth's own listeners", meta.ID: "a cloud metadata address"} {
		v := view(t, n, id)
		if v.Failed != 2 || v.DeadLettered != 1 || !strings.Contains(v.LastError, want) {
			t.Errorf("%s: %+v, want last_error naming %q", v.URL, v, want)
		}
	}
}

func TestValidation(t *testing.T) {
	st := openStore(t, t.TempDir())
	n, _ := newNotifier(t, st, notify.Options{})
	for _, tt := range []struct {
		spec  apitype.WebhookSpec
		field string
		msg   string
	}{
		{apitype.WebhookSpec{}, "url", "required"},
		{apitype.WebhookSpec{URL: "ftp://example.com/"}, "url", "https"},
		{apitype.WebhookSpec{URL: "http://example.com/hook"}, "url", "loopback"},
		{apitype.WebhookSpec{URL: "https://user:pw@example.com/"}, "url", "user info"},
		{apitype.WebhookSpec{URL: "https:///path"}, "url", "no host"},
		{apitype.WebhookSpec{URL: "https://example.com:99999/"}, "url", "port"},
		{apitype.WebhookSpec{URL: "https://example.com/", MinSeverity: "urgent"}, "min_severity", "not a severity"},
		{apitype.WebhookSpec{URL: "https://example.com/", Note: strings.Repeat("n", 1025)}, "note", "longer"},
	} {
		var fe *web.FieldError
		_, err := n.Add(t.Context(), tt.spec)
		if !errors.As(err, &fe) || fe.Field != tt.field || !strings.Contains(fe.Msg, tt.msg) {
			t.Errorf("Add(%+v): %v, want %s: …%s…", tt.spec, err, tt.field, tt.msg)
		}
	}
	if got := n.List(); len(got) != 0 {
		t.Errorf("refused webhooks were added: %+v", got)
	}
	for _, u := range []string{"https://example.com/hook", "http://127.0.0.1:9/", "http://[::1]:9/", "http://LOCALHOST:9/"} {
		if _, err := n.Add(t.Context(), apitype.WebhookSpec{URL: u}); err != nil {
			t.Errorf("Add(%s): %v", u, err)
		}
	}
}

// TestReopenAndSealed: the webhooks, their counts and their secrets survive
// reopening the store, and neither the secret nor the URL is in the
// database file in plaintext.
func TestReopenAndSealed(t *testing.T) {
	dir := t.TempDir()
	st := openStore(t, dir)
	rcv := newReceiver(t, always(http.StatusOK))
	const pathToken = "T0-B0-a-path-that-is-a-credential"
	n, _ := newNotifier(t, st, notify.Options{})
	v, err := n.Add(t.Context(), apitype.WebhookSpec{URL: rcv.URL + "/services/" + pathToken, Note: "plaintext-note", MinSeverity: "low"})
	if err != nil {
		t.Fatal(err)
	}
	n.Alert(alert(apitype.SeverityMedium, "one"))
	flush(t, n)
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	before := n.List()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	var db []byte
	files, _ := filepath.Glob(filepath.Join(dir, store.FileName+"*"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		db = append(db, b...)
	}
	if !bytes.Contains(db, []byte("plaintext-note")) {
		t.Fatal("the note is not in the database files: the search reads the wrong bytes")
	}
	for _, s := range []string{v.Secret, strings.TrimPrefix(v.Secret, "whsec_"), pathToken} {
		if bytes.Contains(db, []byte(s)) {
			t.Errorf("%q is in the database file in plaintext", s)
		}
	}

	// A wrong key does not open them…
	st = openStore(t, dir)
	if _, err := notify.New(t.Context(), notify.Options{Store: st, Key: secrets.Key{9}}); err == nil {
		t.Error("New with another key succeeded")
	}
	// …the right one does, with the counts and the same secret.
	n, _ = newNotifier(t, st, notify.Options{})
	after := n.List()
	if d := cmp.Diff(before, after); d != "" || len(after) != 1 || after[0].Delivered != 1 {
		t.Errorf("after reopening (-before +after):\n%s\n%+v", d, after)
	}
	n.Alert(alert(apitype.SeverityLow, "two"))
	flush(t, n)
	got := rcv.deliveries()
	if len(got) != 2 {
		t.Fatalf("receiver got %d requests, want 2", len(got))
	}
	d := got[1]
	if err := notify.VerifySignature(v.Secret, d.header.Get(notify.HeaderTimestamp), d.body, d.header.Get(notify.HeaderSignature)); err != nil {
		t.Errorf("signature after reopening: %v", err)
	}
}

func TestDelete(t *testing.T) {
	st := openStore(t, t.TempDir())
	rcv := newReceiver(t, always(http.StatusOK))
	n, _ := newNotifier(t, st, notify.Options{})
	v, err := n.Add(t.Context(), apitype.WebhookSpec{URL: rcv.URL})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Delete(t.Context(), v.ID); err != nil {
		t.Fatal(err)
	}
	if err := n.Delete(t.Context(), v.ID); !errors.Is(err, notify.ErrNotFound) {
		t.Errorf("Delete again: %v, want ErrNotFound", err)
	}
	if _, err := n.Test(v.ID); !errors.Is(err, notify.ErrNotFound) {
		t.Errorf("Test of a deleted webhook: %v, want ErrNotFound", err)
	}
	n.Alert(alert(apitype.SeverityCritical, "after"))
	flush(t, n)
	if got := len(rcv.deliveries()); got != 0 {
		t.Errorf("a deleted webhook got %d requests", got)
	}
	if rows, _ := st.Webhooks(t.Context()); len(rows) != 0 || len(n.List()) != 0 {
		t.Errorf("after delete: stored %+v, listed %+v", rows, n.List())
	}
	if len(gather(t, n)) != 0 {
		t.Error("a deleted webhook is still exported")
	}
}

// TestClose: Close gives up on what is in flight and queued — counted as
// dead-lettered and written to the store — and the notifier takes nothing
// after it.
func TestClose(t *testing.T) {
	dir := t.TempDir()
	st := openStore(t, dir)
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case started <- struct{}{}:
		default:
		}
		<-release
	}))
	t.Cleanup(rcv.Close)
	t.Cleanup(func() { close(release) })
	n, _ := newNotifier(t, st, notify.Options{})
	v, err := n.Add(t.Context(), apitype.WebhookSpec{URL: rcv.URL})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		n.Alert(alert(apitype.SeverityCritical, "x"))
	}
	<-started // one in flight, two queued
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if v := view(t, n, v.ID); v.DeadLettered != 3 || v.Failed != 0 {
		t.Errorf("after Close: %+v, want the 3 alerts dead-lettered and no attempt counted failed", v)
	}
	if rows, err := st.Webhooks(t.Context()); err != nil || len(rows) != 1 || rows[0].DeadLettered != 3 {
		t.Errorf("stored after Close: %+v, %v", rows, err)
	}
	n.Alert(alert(apitype.SeverityCritical, "late")) // dropped, and does not block
	if _, err := n.Add(t.Context(), apitype.WebhookSpec{URL: rcv.URL}); !errors.Is(err, notify.ErrClosed) {
		t.Errorf("Add after Close: %v, want ErrClosed", err)
	}
	if _, err := n.Test(v.ID); !errors.Is(err, notify.ErrClosed) {
		t.Errorf("Test after Close: %v, want ErrClosed", err)
	}
}
