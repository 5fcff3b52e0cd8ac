package web

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestServeMux: a route the mux does not have is a 501 saying so (not a
// 404 "no route", which app-lb's clients take for a missing resource); a
// known path with another method keeps the mux's 405 and Allow.
func TestServeMux(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /deployments/{id}", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(r.PathValue("id")))
	})
	for _, tt := range []struct {
		method, path string
		code         int
		body, allow  string
	}{
		{"GET", "/deployments/x", 200, "x", ""},
		{"POST", "/deployments/x/pull", 501, `{"error":"POST /deployments/x/pull is not supported by this server"}` + "\n", ""},
		{"DELETE", "/deployments/x", 405, `{"error":"method DELETE is not allowed on /deployments/x; allowed: GET, HEAD"}` + "\n", "GET, HEAD"},
	} {
		w := httptest.NewRecorder()
		ServeMux(slog.New(slog.DiscardHandler), mux, w, httptest.NewRequest(tt.method, tt.path, nil))
		if w.Code != tt.code || w.Body.String() != tt.body || w.Header().Get("Allow") != tt.allow {
			t.Errorf("%s %s = %d %q Allow %q, want %d %q Allow %q", tt.method, tt.path, w.Code, strings.TrimSpace(w.Body.String()), w.Header().Get("Allow"), tt.code, tt.body, tt.allow)
		}
	}
}
