package cli

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
)

// TestDrainTimeout runs drain against an upstream that never goes idle, in
// a synctest bubble so the five-minute default timeout and the one-second
// poll take no real time.
func TestDrainTimeout(t *testing.T) {
	srv := newFakeServer(t) // outside the bubble: it is real network I/O
	srv.upstream = "10.0.0.4:8080"
	srv.inFlight = []int{4}
	synctest.Test(t, func(t *testing.T) {
		var out, errb bytes.Buffer
		e := &env{
			stdout: &out, stderr: &errb,
			server:       srv.URL,
			pollInterval: defaultPollInterval,
			// No idle connections outlive a request, so the bubble's
			// goroutines all block on the poll timer between requests
			// and fake time can advance.
			httpClient: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}},
		}
		code := e.run(context.Background(), []string{"drain", "legacy", "10.0.0.4:8080"})
		if code != 1 {
			t.Errorf("exit = %d, want 1", code)
		}
		want := "error: timed out after 5m0s waiting for upstream 10.0.0.4:8080 of deployment/legacy to drain (4 still in flight)\n"
		if errb.String() != want {
			t.Errorf("stderr = %q, want %q", errb.String(), want)
		}
	})
	var gets int
	for _, r := range srv.requests() {
		if r.Method == "GET" && strings.HasPrefix(r.URI, "/deployments/legacy") {
			gets++
		}
	}
	// One poll a second for five minutes; the last may be cut short by
	// the deadline.
	if gets < 299 || gets > 300 {
		t.Errorf("drain polled %d times in 5m at 1s intervals, want 299 or 300", gets)
	}
}
