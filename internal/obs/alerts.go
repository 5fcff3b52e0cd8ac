package obs

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/notify"
	"github.com/berth-dev/berth/internal/store"
	"github.com/berth-dev/berth/internal/web"
)

// MetricErrors is the one metric an alert watches: the deployment's error
// responses (5xx, or no answer) over the trailing minute.
const MetricErrors = "errors"

// Trailing is the span an alert's metric is counted over.
const Trailing = time.Minute

func aad(id string) []byte { return []byte("berth-obs-alert-v1\x00" + id) }

func newTLSConfig(roots *x509.CertPool) *tls.Config {
	return &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
}

func (h *Handler) unseal(r store.ObsAlert) (apitype.ObsAlert, error) {
	plain, err := h.o.Key.Open(r.Sealed, aad(r.ID))
	if err != nil {
		return apitype.ObsAlert{}, fmt.Errorf("obs: alert %q does not open with the secret key (%v): start berth with the key it was created under", r.ID, err)
	}
	ns := r.Namespace
	return apitype.ObsAlert{ID: r.ID, Deployment: r.Deployment, Namespace: &ns, Metric: r.Metric, Threshold: r.Threshold, WebhookURL: string(plain)}, nil
}

// alertSpec is POST /api/alerts's body.
type alertSpec struct {
	Deployment string   `json:"deployment"`
	Threshold  *float64 `json:"threshold"`
	WebhookURL string   `json:"webhook_url"`
	Metric     string   `json:"metric"`
}

// listAlerts is GET /api/alerts: the namespace's rules on deployments the
// caller sees, oldest first.
func (h *Handler) listAlerts(w http.ResponseWriter, r *http.Request) error {
	ns, err := namespaceOf(r)
	if err != nil {
		return err
	}
	out := []apitype.ObsAlert{}
	for _, a := range h.rulesOf(ns) {
		if h.o.Visible(r, ns, a.Deployment) {
			out = append(out, a)
		}
	}
	web.WriteJSON(w, http.StatusOK, out)
	return nil
}

// rulesOf returns namespace ns's rules, by id.
func (h *Handler) rulesOf(ns string) []apitype.ObsAlert {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []apitype.ObsAlert
	for _, r := range h.rules {
		if *r.Namespace == ns {
			out = append(out, r.ObsAlert)
		}
	}
	slices.SortFunc(out, func(a, b apitype.ObsAlert) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// postAlert is POST /api/alerts.
func (h *Handler) postAlert(w http.ResponseWriter, r *http.Request) error {
	ns, err := namespaceOf(r)
	if err != nil {
		return err
	}
	r.Body = http.MaxBytesReader(w, r.Body, MaxBody)
	raw, err := web.ReadBody(w, r)
	if err != nil {
		return err
	}
	var spec alertSpec
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&spec); err != nil {
		if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			return web.Invalid(strings.Trim(f, `"`), "unknown field (the body is {deployment, threshold, webhook_url, metric})")
		}
		return web.DecodeJSON(raw, &spec) // the usual envelope for malformed JSON
	}
	switch {
	case spec.Deployment == "":
		return web.Invalid("deployment", "required")
	case !h.o.Visible(r, ns, spec.Deployment):
		return web.Invalid("deployment", "no deployment %q in namespace %q", spec.Deployment, ns)
	case spec.Threshold == nil:
		return web.Invalid("threshold", "required")
	case *spec.Threshold < 0 || math.IsNaN(*spec.Threshold) || math.IsInf(*spec.Threshold, 0):
		return web.Invalid("threshold", "must be a non-negative number")
	case spec.Metric != "" && spec.Metric != MetricErrors:
		return web.Invalid("metric", "only %q (errors over the trailing minute) is supported, got %q", MetricErrors, spec.Metric)
	case spec.WebhookURL == "":
		return web.Invalid("webhook_url", "required")
	}
	if err := notify.CheckURL(spec.WebhookURL, h.o.Self, h.o.AllowLinkLocal, false); err != nil {
		return web.Invalid("webhook_url", "%v", err)
	}
	if len(h.rulesOf(ns)) >= MaxAlerts {
		return web.Errorf(http.StatusConflict, "namespace %q has %d alert rules, the most it may have; delete one first", ns, MaxAlerts)
	}
	id := newID()
	h.wmu.Lock()
	defer h.wmu.Unlock()
	a := apitype.ObsAlert{ID: id, Deployment: spec.Deployment, Namespace: &ns, Metric: MetricErrors, Threshold: *spec.Threshold, WebhookURL: spec.WebhookURL}
	err = h.o.Store.PutObsAlert(r.Context(), store.ObsAlert{ID: id, Namespace: ns, Deployment: a.Deployment, Metric: a.Metric,
		Threshold: a.Threshold, Sealed: h.o.Key.Seal([]byte(a.WebhookURL), aad(id)), CreatedAt: h.o.Now()})
	if err != nil {
		return &web.Error{Status: http.StatusInternalServerError, Message: "the alert rule was not saved", Err: err}
	}
	h.mu.Lock()
	h.rules[id] = &rule{ObsAlert: a}
	h.mu.Unlock()
	web.WriteJSON(w, http.StatusCreated, a)
	return nil
}

// deleteAlert is DELETE /api/alerts/{id}.
func (h *Handler) deleteAlert(w http.ResponseWriter, r *http.Request) error {
	ns, err := namespaceOf(r)
	if err != nil {
		return err
	}
	id := r.PathValue("id")
	h.mu.Lock()
	ru := h.rules[id]
	h.mu.Unlock()
	// Another namespace's rule, or one on a deployment the caller does not
	// see, answers as one that does not exist.
	if ru == nil || *ru.Namespace != ns || !h.o.Visible(r, ns, ru.Deployment) {
		return web.Errorf(http.StatusNotFound, "no alert rule %q in namespace %q", id, ns)
	}
	h.wmu.Lock()
	defer h.wmu.Unlock()
	if err := h.o.Store.DeleteObsAlert(r.Context(), ns, id); err != nil && !errors.Is(err, store.ErrNotFound) {
		return &web.Error{Status: http.StatusInternalServerError, Message: "the alert rule was not deleted", Err: err}
	}
	h.mu.Lock()
	delete(h.rules, id)
	h.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func newID() string {
	b := make([]byte, 8)
	rand.Read(b)
	return "oal_" + hex.EncodeToString(b)
}

// Run evaluates the rules every EvaluateEvery until ctx ends.
func (h *Handler) Run(ctx context.Context) {
	t := time.NewTicker(EvaluateEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			h.evaluate(ctx)
		}
	}
}

// Evaluate checks every rule once and waits for the webhooks it fired to
// be delivered (or to fail every attempt).
func (h *Handler) Evaluate(ctx context.Context) {
	h.evaluate(ctx)
	h.sends.Wait()
}

// evaluate checks every rule: one whose metric over the trailing minute
// is above its threshold, and was not at the last evaluation, fires.
func (h *Handler) evaluate(ctx context.Context) {
	now := h.o.Now()
	h.mu.Lock()
	rules := make([]*rule, 0, len(h.rules))
	for _, r := range h.rules {
		rules = append(rules, r)
	}
	h.mu.Unlock()
	for _, ru := range rules {
		n, err := h.o.Telemetry.Errors(ctx, *ru.Namespace, ru.Deployment, now.Add(-Trailing), now)
		if err != nil {
			h.o.Log.Warn("obs alert: the telemetry store could not be read", "alert", ru.ID, "err", err)
			continue
		}
		above := float64(n) > ru.Threshold
		h.mu.Lock()
		fire := above && !ru.firing
		ru.firing = above
		a := ru.ObsAlert
		h.mu.Unlock()
		if fire {
			h.sends.Go(func() { h.deliver(a, float64(n), now) })
		}
	}
}

// Delivery is the body POSTed to an alert's webhook (berth's own shape).
// The alert is given without its webhook URL, which may be a credential.
type Delivery struct {
	SentAt     int64            `json:"sent_at"` // epoch ms
	Alert      apitype.ObsAlert `json:"alert"`
	Value      float64          `json:"value"`       // the metric over the trailing span
	WindowSecs int              `json:"window_secs"` // the trailing span
	FiredAt    int64            `json:"fired_at"`    // epoch ms
}

// EventObsAlert is a delivery's X-Berth-Event.
const EventObsAlert = "obs.alert"

// deliver POSTs a firing to a's webhook, retrying with backoff.
func (h *Handler) deliver(a apitype.ObsAlert, value float64, at time.Time) {
	url := a.WebhookURL
	a.WebhookURL = ""
	delivery := newID()
	for attempt := 1; ; attempt++ {
		body, err := json.Marshal(Delivery{SentAt: h.o.Now().UnixMilli(), Alert: a, Value: value,
			WindowSecs: int(Trailing.Seconds()), FiredAt: at.UnixMilli()})
		if err == nil {
			err = notify.Post(h.ctx, h.client, url, "berth-obs/1", body, func(hd http.Header) {
				hd.Set(notify.HeaderEvent, EventObsAlert)
				hd.Set(notify.HeaderDelivery, delivery)
			})
		}
		if err == nil {
			return
		}
		if attempt >= h.o.Attempts || h.ctx.Err() != nil {
			h.o.Log.Warn("obs alert: every webhook attempt failed", "alert", a.ID, "deployment", a.Deployment, "attempts", attempt, "err", err)
			return
		}
		if h.o.Sleep(h.ctx, notify.Backoff(h.o.Backoff, h.o.MaxBackoff, attempt)) != nil {
			return
		}
	}
}

// Reload brings the alert rules in line with the store, without writing
// it: on a store several hosts share, the rules another host posted or
// deleted. A rule this host has keeps its state (firing or not). A stored
// rule that does not open is logged and skipped. It serialises with this
// host's posts and deletes.
func (h *Handler) Reload(ctx context.Context) error {
	h.wmu.Lock()
	defer h.wmu.Unlock()
	rows, err := h.o.Store.ObsAlerts(ctx)
	if err != nil {
		return fmt.Errorf("obs: reload alert rules: %w", err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	next := make(map[string]*rule, len(rows))
	for _, r := range rows {
		if old := h.rules[r.ID]; old != nil {
			next[r.ID] = old
			continue
		}
		a, err := h.unseal(r)
		if err != nil {
			h.o.Log.Error("obs: skipping a stored alert rule", "alert", r.ID, "err", err)
			continue
		}
		next[r.ID] = &rule{ObsAlert: a}
	}
	h.rules = next
	return nil
}
