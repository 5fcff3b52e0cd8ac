package admin

import (
	"net/http"
	"strings"
	"testing"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/auth"
)

// TestRateLimitRoutes: a deployment's rate limit is put (normalized,
// durable, published to the data plane), read, replaced and deleted; the
// missing cases are 404s.
func TestRateLimitRoutes(t *testing.T) {
	r := newRig(t, auth.Confinement{})
	want(t, r.do("POST", "/deployments", operator, staticApp), http.StatusCreated)

	want(t, r.do("GET", "/deployments/web/rate-limit", operator, ""), http.StatusNotFound, `"web" has no rate limit`)
	want(t, r.do("DELETE", "/deployments/web/rate-limit", operator, ""), http.StatusNotFound, `"web" has no rate limit`)
	want(t, r.do("PUT", "/deployments/nothing/rate-limit", operator, `{"requests_per_sec": 1}`), http.StatusNotFound, `no deployment "nothing"`)
	want(t, r.do("GET", "/deployments/nothing/rate-limit", operator, ""), http.StatusNotFound, `no deployment "nothing"`)

	w := r.do("PUT", "/deployments/web/rate-limit", operator, `{"requests_per_sec": 2.5, "concurrent_per_client": 4}`)
	want(t, w, http.StatusOK)
	stored := apitype.RateLimit{RequestsPerSec: 2.5, Burst: 3, ConcurrentPerClient: 4, MaxClients: 65536}
	if got := decode[apitype.RateLimit](t, w); got != stored {
		t.Errorf("PUT answered %+v, want %+v", got, stored)
	}
	if got := decode[apitype.RateLimit](t, r.do("GET", "/deployments/web/rate-limit", operator, "")); got != stored {
		t.Errorf("GET answered %+v, want %+v", got, stored)
	}
	if r.rl.Limiter("web") == nil {
		t.Fatal("the Manager has no Limiter for the limit put")
	}
	if e, _ := r.reg.Get("web"); e == nil {
		t.Fatal("the deployment is gone")
	}

	// Replaced whole.
	w = r.do("PUT", "/deployments/web/rate-limit", operator, `{"concurrent_per_client": 1, "max_clients": 10}`)
	want(t, w, http.StatusOK)
	if got := decode[apitype.RateLimit](t, w); got != (apitype.RateLimit{ConcurrentPerClient: 1, MaxClients: 10}) {
		t.Errorf("replace answered %+v", got)
	}

	want(t, r.do("DELETE", "/deployments/web/rate-limit", operator, ""), http.StatusNoContent)
	want(t, r.do("GET", "/deployments/web/rate-limit", operator, ""), http.StatusNotFound)

	// A deleted deployment takes its limit along.
	want(t, r.do("PUT", "/deployments/web/rate-limit", operator, `{"requests_per_sec": 1}`), http.StatusOK)
	want(t, r.do("DELETE", "/deployments/web", operator, ""), http.StatusNoContent)
	want(t, r.do("POST", "/deployments", operator, staticApp), http.StatusCreated)
	want(t, r.do("GET", "/deployments/web/rate-limit", operator, ""), http.StatusNotFound, "no rate limit")
}

// TestRateLimitErrors: a bad body is refused naming the field at fault.
func TestRateLimitErrors(t *testing.T) {
	r := newRig(t, auth.Confinement{})
	want(t, r.do("POST", "/deployments", operator, staticApp), http.StatusCreated)
	for _, tt := range []struct {
		name, body string
		status     int
		msgs       []string
	}{
		{"empty object", `{}`, 400, []string{"requests_per_sec:", "concurrent_per_client"}},
		{"negative rate", `{"requests_per_sec": -1}`, 400, []string{"requests_per_sec:"}},
		{"rate too high", `{"requests_per_sec": 1000001}`, 400, []string{"requests_per_sec:", "at most"}},
		{"burst too high", `{"requests_per_sec": 1, "burst": 1000001}`, 400, []string{"burst:"}},
		{"burst alone", `{"burst": 5, "concurrent_per_client": 1}`, 400, []string{"burst:", "requests_per_sec"}},
		{"concurrency too high", `{"concurrent_per_client": 100001}`, 400, []string{"concurrent_per_client:"}},
		{"max_clients too high", `{"requests_per_sec": 1, "max_clients": 1000001}`, 400, []string{"max_clients:"}},
		{"unknown key", `{"requests_per_second": 5}`, 400, []string{"requests_per_second:", "requests_per_second: unknown field"}},
		{"wrong type", `{"burst": "lots"}`, 422, []string{"burst"}},
		{"fractional burst", `{"requests_per_sec": 1, "burst": 1.5}`, 422, []string{"burst"}},
		{"not an object", `[1]`, 422, nil},
		{"malformed", `{"requests_per_sec":`, 400, []string{"malformed"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			want(t, r.do("PUT", "/deployments/web/rate-limit", operator, tt.body), tt.status, tt.msgs...)
		})
	}
	w := r.do("PUT", "/deployments/web/rate-limit", operator, "", "Content-Type", "text/plain")
	want(t, w, http.StatusUnsupportedMediaType)
	if _, ok := r.rl.Get("web"); ok {
		t.Error("a refused body was stored")
	}
}

// TestRateLimitWalls: a namespace token reaches the limits of its own
// deployments only, and is refused another namespace's deployment exactly as
// one that does not exist (no existence oracle); a view token may not touch
// them.
func TestRateLimitWalls(t *testing.T) {
	r := newRig(t, auth.Confinement{})
	want(t, r.do("POST", "/deployments", operator, `{"id": "theirs", "namespace": "team-b", "routes": [{"host": "theirs.example"}], "upstreams": ["127.0.0.1:9"]}`), http.StatusCreated)
	want(t, r.do("PUT", "/deployments/theirs/rate-limit", operator, `{"requests_per_sec": 9}`), http.StatusOK)
	team := r.mint(`{"name": "team-a", "admin": "admin", "namespace": "team-a", "deployments": []}`)
	want(t, r.do("POST", "/deployments", team, `{"id": "mine", "routes": [{"host": "mine.apps.test"}], "upstreams": ["127.0.0.1:9"]}`), http.StatusCreated)

	want(t, r.do("PUT", "/deployments/mine/rate-limit", team, `{"concurrent_per_client": 2}`), http.StatusOK)
	want(t, r.do("GET", "/deployments/mine/rate-limit", team, ""), http.StatusOK)
	// A namespace may not make berth remember more clients than the default.
	want(t, r.do("PUT", "/deployments/mine/rate-limit", team, `{"concurrent_per_client": 2, "max_clients": 1000000}`), http.StatusBadRequest, "max_clients")
	want(t, r.do("PUT", "/deployments/theirs/rate-limit", operator, `{"requests_per_sec": 9, "max_clients": 1000000}`), http.StatusOK)

	for _, m := range []string{"GET", "PUT", "DELETE"} {
		body := ""
		if m == "PUT" {
			body = `{"requests_per_sec": 1000}`
		}
		foreign := r.do(m, "/deployments/theirs/rate-limit", team, body)
		missing := r.do(m, "/deployments/nothing/rate-limit", team, body)
		want(t, foreign, http.StatusForbidden, `"theirs"`)
		want(t, missing, http.StatusForbidden, `"nothing"`)
		if strings.Replace(foreign.Body.String(), "theirs", "nothing", 1) != missing.Body.String() {
			t.Errorf("%s: a foreign and a missing deployment answer differently: %s vs %s", m, foreign.Body, missing.Body)
		}
	}
	if rl, _ := r.rl.Get("theirs"); rl.RequestsPerSec != 9 {
		t.Errorf("a namespace token changed another namespace's limit: %+v", rl)
	}

	view := r.mint(`{"name": "viewer", "admin": "view", "namespace": "team-a", "deployments": []}`)
	want(t, r.do("GET", "/deployments/mine/rate-limit", view, ""), http.StatusForbidden)
	want(t, r.do("DELETE", "/deployments/mine/rate-limit", view, ""), http.StatusForbidden)
	want(t, r.do("DELETE", "/deployments/mine/rate-limit", team, ""), http.StatusNoContent)
}

// TestRateLimitsDisabled: without a Manager the routes say so.
func TestRateLimitsDisabled(t *testing.T) {
	r := newRig(t, auth.Confinement{})
	want(t, r.do("POST", "/deployments", operator, staticApp), http.StatusCreated)
	r.api = New(Options{Registry: r.reg})
	for _, m := range []string{"GET", "PUT", "DELETE"} {
		body := ""
		if m == "PUT" {
			body = `{"requests_per_sec": 1}`
		}
		want(t, r.do(m, "/deployments/web/rate-limit", "", body), http.StatusServiceUnavailable, "rate limits are not enabled on this server")
	}
}
