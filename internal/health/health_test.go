package health

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestProbe(t *testing.T) {
	status := 200
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.UserAgent() != "berth/health" {
			t.Errorf("user agent %q", r.UserAgent())
		}
		w.WriteHeader(status)
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	ctx := context.Background()
	for _, tt := range []struct {
		status int
		ok     bool
	}{{200, true}, {404, true}, {499, true}, {500, false}, {503, false}} {
		status = tt.status
		err := Probe(ctx, Check{Addr: addr, Path: "/healthz", Timeout: 5 * time.Second})
		if (err == nil) != tt.ok {
			t.Errorf("status %d: err %v, want ok=%v", tt.status, err, tt.ok)
		}
	}
	// TCP-only probes ignore the HTTP status.
	if err := Probe(ctx, Check{Addr: addr, Timeout: 5 * time.Second}); err != nil {
		t.Errorf("tcp probe: %v", err)
	}
}

// garbageServer answers every connection with a line that is no status
// line, and closes it.
func garbageServer(t *testing.T) (net.Listener, string) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("garbage\r\n"))
			c.Close()
		}
	}()
	return ln, ln.Addr().String()
}

func TestProbeFailures(t *testing.T) {
	ln, addr := garbageServer(t)
	if err := Probe(context.Background(), Check{Addr: addr, Path: "/", Timeout: 5 * time.Second}); err == nil {
		t.Error("garbage status line counted as healthy")
	}
	ln.Close()
	if err := Probe(context.Background(), Check{Addr: addr, Timeout: 5 * time.Second}); err == nil {
		t.Error("closed port counted as healthy")
	}
	if err := Probe(context.Background(), Check{Addr: addr, Path: "/a b"}); err == nil {
		t.Error("bad path accepted")
	}
}

func TestStatusCode(t *testing.T) {
	for line, want := range map[string]int{"HTTP/1.1 204 No Content": 204, "HTTP/1.0 500": 500, "HTTP/2 200": 0, "junk": 0, "HTTP/1.1 2x0 OK": 0} {
		got, _ := statusCode(line)
		if got != want {
			t.Errorf("statusCode(%q) = %d, want %d", line, got, want)
		}
	}
}

// TestProbeExpectedHeader: with an expected header, only a 2xx carrying
// the exact header value is healthy.
func TestProbeExpectedHeader(t *testing.T) {
	status, value := 200, "rev-b"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if value != "" {
			w.Header().Set("X-Heyo-Revision", value)
		}
		w.WriteHeader(status)
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	for _, tt := range []struct {
		status int
		value  string
		ok     bool
	}{{200, "rev-b", true}, {204, "rev-b", true}, {200, "rev-a", false}, {200, "", false}, {404, "rev-b", false}, {302, "rev-b", false}, {500, "rev-b", false}} {
		status, value = tt.status, tt.value
		err := Probe(context.Background(), Check{Addr: addr, Path: "/", Timeout: 5 * time.Second, ExpectHeader: "x-heyo-revision", ExpectValue: "rev-b"})
		if (err == nil) != tt.ok {
			t.Errorf("status %d header %q: err %v, want ok=%v", tt.status, tt.value, err, tt.ok)
		}
	}
}
