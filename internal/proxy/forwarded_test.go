package proxy_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/berth-dev/berth/internal/proxy"
)

// TestForwardedNotForwardedAgain: a Forwarded deployment (its pool is
// another fleet host's hop listener) forwards a public request, but
// answers one that came over the hop (X-Berth-Hop) 503 with Retry-After
// and its Unavailable line, without reaching the backend.
func TestForwardedNotForwardedAgain(t *testing.T) {
	var hits atomic.Int64
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		fmt.Fprint(w, "from the other host")
	}))
	t.Cleanup(app.Close)
	d := static("app", proxy.NewBackend("hop", strings.TrimPrefix(app.URL, "http://"), false))
	d.Forwarded, d.Unavailable = true, "deployment app is moving between fleet hosts; retry shortly"
	h := proxy.New(proxy.Options{})
	h.Swap(table(entry{d, catchAll}))
	base := startProxy(t, h)
	c := newClient(t)
	if resp, body := get(t, c, base+"/", "app.test"); resp.StatusCode != 200 || body != "from the other host" {
		t.Fatalf("a public request: %d %q, want it forwarded", resp.StatusCode, body)
	}
	resp, body := send(t, c, "GET", base+"/", "app.test", nil, http.Header{"X-Berth-Hop": {"beta"}})
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "5" || body != d.Unavailable+"\n" {
		t.Fatalf("a hopped request: %d (Retry-After %q) %q, want 503", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	if n := hits.Load(); n != 1 {
		t.Fatalf("the backend saw %d requests, want 1 (the hopped one is not forwarded)", n)
	}
}
