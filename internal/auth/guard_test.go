package auth

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestGuard pins the Host and Origin rules case by case (the server's
// TestHostOriginGuard runs them over a real listener).
func TestGuard(t *testing.T) {
	h := Guard(GuardConfig{Hosts: []string{"Berth.Example.", "ops.example:8443", "[2001:db8::5]"}}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	local := &net.TCPAddr{IP: net.ParseIP("192.0.2.10"), Port: 9090}
	tests := []struct {
		host, origin, via string
		want              int
	}{
		{"127.0.0.1:9090", "", "", 200},
		{"127.9.9.9", "", "", 200},
		{"localhost.", "", "", 200},
		{"[::1]:9090", "", "", 200},
		{"192.0.2.10:9090", "", "", 200}, // the address the request arrived on
		{"192.0.2.11:9090", "", "", 421},
		{"berth.example:9090", "", "", 200},
		{"BERTH.EXAMPLE", "", "", 200},
		{"x.berth.example", "", "", 421},
		{"ops.example:8443", "", "", 200},
		{"ops.example", "", "", 421},
		{"[2001:db8::5]:9090", "", "", 200},
		{"evil.example:9090", "", "", 421},
		{"localhost.evil.example", "", "", 421},
		{"", "", "", 421},
		{"127.0.0.1:9090", "http://127.0.0.1:9090", "", 200},
		{"localhost", "http://localhost", "", 200},
		{"localhost", "http://localhost:80", "", 200},
		{"localhost:9090", "http://localhost:9091", "", 403},
		{"localhost:9090", "http://127.0.0.1:9090", "", 403}, // another origin, though the same server
		{"localhost:9090", "http://evil.example:9090", "", 403},
		{"localhost:9090", "http://localhost:9090/path", "", 403},
		{"localhost:9090", "http://user@localhost:9090", "", 403},
		{"localhost:9090", "ftp://localhost:9090", "", 403},
		{"localhost:9090", "null", "", 403},
		{"berth.example", "https://berth.example", "", 200},
		{"127.0.0.1:9090", "", "1.1 berth", 403},
		{"127.0.0.1:9090", "", "1.0 other, 1.1 BERTH-proxy", 403},
		{"127.0.0.1:9090", "", "1.1 varnish", 200},
	}
	for _, tt := range tests {
		r := httptest.NewRequest("POST", "/deployments", nil)
		r.Host = tt.host
		if tt.origin != "" {
			r.Header.Set("Origin", tt.origin)
		}
		if tt.via != "" {
			r.Header.Set("Via", tt.via)
		}
		r = r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, net.Addr(local)))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != tt.want {
			t.Errorf("Host %q Origin %q Via %q: %d %s, want %d", tt.host, tt.origin, tt.via, w.Code, w.Body, tt.want)
		}
	}
}

// TestGuardHopHeader: a request carrying the data plane's hop header
// (package proxy adds X-Berth-Hops to everything it forwards) is refused,
// whatever its socket peer.
func TestGuardHopHeader(t *testing.T) {
	h := Guard(GuardConfig{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	r := httptest.NewRequest("DELETE", "/deployments/x", nil)
	r.Host = "127.0.0.1:9090"
	r.Header.Set("X-Berth-Hops", "1")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusForbidden {
		t.Fatalf("X-Berth-Hops request: %d %s, want 403", w.Code, w.Body)
	}
}
