package admin

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/auth"
	"github.com/berth-dev/berth/internal/notify"
	"github.com/berth-dev/berth/internal/secrets"
	"github.com/berth-dev/berth/internal/store"
)

// TestWebhooks drives /security/webhooks over a real notifier and store,
// delivering to a receiver on loopback: operator only, a closed body whose
// errors name the field, the secret shown once, a test delivery signed
// with it.
func TestWebhooks(t *testing.T) {
	r := newRig(t, auth.Confinement{})
	want(t, r.do("GET", "/security/webhooks", operator, ""), http.StatusServiceUnavailable, "webhooks are not enabled")

	var mu sync.Mutex
	var got []*http.Request
	var bodies [][]byte
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		mu.Lock()
		got, bodies = append(got, req), append(bodies, b)
		mu.Unlock()
	}))
	t.Cleanup(rcv.Close)
	st, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	n, err := notify.New(t.Context(), notify.Options{Store: st, Key: secrets.Key{5}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	r.api.o.Webhooks = n

	w := r.do("GET", "/security/webhooks", operator, "")
	want(t, w, http.StatusOK)
	if strings.TrimSpace(w.Body.String()) != "[]" {
		t.Errorf("GET /security/webhooks with none = %s, want []", w.Body)
	}
	for _, tt := range []struct {
		body   string
		status int
		msg    string
	}{
		{`{"url": "https://example.com/", "secret": "mine"}`, 400, "secret: not a field of a webhook: berth generates"},
		{`{"url": "https://example.com/", "min_sevrity": "low"}`, 400, "min_sevrity: not a field"},
		{`{"url": "http://example.com/"}`, 400, "url: must be https"},
		{`{"url": "https://example.com/", "min_severity": "urgent"}`, 400, "min_severity:"},
		{`{"url": 7}`, 422, "url"},
		{`{}`, 400, "url: required"},
	} {
		want(t, r.do("POST", "/security/webhooks", operator, tt.body), tt.status, tt.msg)
	}

	w = r.do("POST", "/security/webhooks", operator, `{"url": "`+rcv.URL+`/in", "min_severity": "critical", "note": "pager"}`)
	want(t, w, http.StatusCreated)
	created := decode[apitype.WebhookView](t, w)
	if created.Secret == "" || created.MinSeverity != "critical" || created.Note != "pager" || created.URL != rcv.URL+"/in" {
		t.Fatalf("POST = %s", w.Body)
	}
	w = r.do("GET", "/security/webhooks", operator, "")
	want(t, w, http.StatusOK)
	list := decode[[]map[string]any](t, w)
	if len(list) != 1 || list[0]["id"] != created.ID || list[0]["secret"] != nil || list[0]["delivered"] != 0.0 {
		t.Errorf("GET = %s: want the webhook, without its secret", w.Body)
	}

	// A test alert goes out whatever min_severity, signed with the secret.
	w = r.do("POST", "/security/webhooks/"+created.ID+"/test", operator, "")
	want(t, w, http.StatusAccepted)
	dlv := decode[apitype.WebhookTest](t, w).Delivery
	if err := n.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if len(got) != 1 {
		t.Fatalf("receiver got %d requests, want 1", len(got))
	}
	req, body := got[0], bodies[0]
	mu.Unlock()
	var d apitype.WebhookDelivery
	if err := json.Unmarshal(body, &d); err != nil || !d.Test || d.Alert.Severity != apitype.SeverityInfo || req.URL.Path != "/in" ||
		req.Header.Get(notify.HeaderDelivery) != dlv {
		t.Errorf("test delivery %s %s (delivery %q, want %q): %v", req.URL.Path, body, req.Header.Get(notify.HeaderDelivery), dlv, err)
	}
	if err := notify.VerifySignature(created.Secret, req.Header.Get(notify.HeaderTimestamp), body, req.Header.Get(notify.HeaderSignature)); err != nil {
		t.Errorf("VerifySignature: %v", err)
	}
	if v := decode[[]apitype.WebhookView](t, r.do("GET", "/security/webhooks", operator, "")); len(v) != 1 || v[0].Delivered != 1 {
		t.Errorf("after the test: %+v", v)
	}

	// Operator only: a namespace's admin token and a view token are refused.
	team := r.mint(`{"name": "team-a", "admin": "admin", "namespace": "team-a", "deployments": []}`)
	view := r.mint(`{"name": "viewer", "admin": "view", "deployments": []}`)
	for _, cred := range []string{team, view, ""} {
		for _, c := range [][2]string{{"GET", "/security/webhooks"}, {"POST", "/security/webhooks"},
			{"DELETE", "/security/webhooks/" + created.ID}, {"POST", "/security/webhooks/" + created.ID + "/test"}} {
			body := ""
			if c[0] == "POST" && !strings.HasSuffix(c[1], "/test") {
				body = `{"url": "https://example.com/"}`
			}
			if w := r.do(c[0], c[1], cred, body); w.Code != http.StatusForbidden && w.Code != http.StatusUnauthorized {
				t.Errorf("%s %s as %.12q: %d %s, want 401/403", c[0], c[1], cred, w.Code, w.Body)
			}
		}
	}

	want(t, r.do("DELETE", "/security/webhooks/"+created.ID, operator, ""), http.StatusNoContent)
	want(t, r.do("DELETE", "/security/webhooks/"+created.ID, operator, ""), http.StatusNotFound, "no webhook")
	want(t, r.do("POST", "/security/webhooks/"+created.ID+"/test", operator, ""), http.StatusNotFound, "no webhook")
	if w := r.do("GET", "/security/webhooks", operator, ""); strings.TrimSpace(w.Body.String()) != "[]" {
		t.Errorf("GET after delete = %s", w.Body)
	}
}
