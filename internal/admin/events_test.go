package admin

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/auth"
)

// TestEvents: GET /ui/events streams the caller's MetricsResponse as
// server-sent events, narrowed as GET /metrics is (a namespace token sees
// its namespace only); revoking the token ends the stream; a bad query is
// the 400 envelope; the streams open at once are bounded.
func TestEvents(t *testing.T) {
	r := newRig(t, auth.Confinement{})
	want(t, r.do("POST", "/deployments", operator, staticApp), http.StatusCreated)
	other := `{"id": "teamweb", "namespace": "team-a", "routes": [{"host": "teamweb.example"}], "upstreams": ["127.0.0.1:9"]}`
	want(t, r.do("POST", "/deployments", operator, other), http.StatusCreated)
	w := r.do("POST", "/tokens", operator, `{"name": "team-a", "admin": "view", "namespace": "team-a", "deployments": []}`)
	want(t, w, http.StatusCreated)
	minted := decode[map[string]any](t, w)
	team := "Bearer " + minted["token"].(string)

	srv := httptest.NewServer(r.api)
	t.Cleanup(srv.Close)
	// A hang guard, not a timing assertion: the stream must end after the
	// revocation below.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/ui/events", nil)
	req.Header.Set("Authorization", team)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" || resp.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("stream: %d %v", resp.StatusCode, resp.Header)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	events := 0
	revoked := false
	for sc.Scan() {
		line := sc.Text()
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		var m apitype.MetricsResponse
		if err := json.Unmarshal([]byte(data), &m); err != nil {
			t.Fatalf("event %q: %v", data, err)
		}
		if len(m.Deployments) != 1 || m.Deployments[0].ID != "teamweb" || m.TrackedDeployments != 1 || m.Host.Available {
			t.Fatalf("the team's event shows %s", data)
		}
		events++
		if events == 2 && !revoked {
			want(t, r.do("DELETE", "/tokens/"+minted["id"].(string), operator, ""), http.StatusNoContent)
			revoked = true
		}
	}
	if ctx.Err() != nil {
		t.Fatal("the stream outlived its token's revocation")
	}
	if events < 2 || !revoked {
		t.Errorf("%d events before the stream ended", events)
	}

	want(t, r.do("GET", "/ui/events?summary=maybe", operator, ""), http.StatusBadRequest, "summary")
	for range maxEventStreams {
		r.api.streams <- struct{}{}
	}
	want(t, r.do("GET", "/ui/events", operator, ""), http.StatusServiceUnavailable, "too many event streams")
}
