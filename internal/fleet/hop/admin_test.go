package hop

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestAdminOverHop: a request ForwardAdmin sends reaches the peer's admin
// handler with the original client's address; a request carrying the
// admin marker any other way (relayed by the data plane's Forward, with
// the data plane's X-Berth-Hops, or naming a host that is not the
// authenticated peer) reaches the data plane's handler with the marker
// stripped. A peer that does not answer is a 503 with Retry-After.
func TestAdminOverHop(t *testing.T) {
	f := newFleet(t, "a", "b")
	echo := func(kind string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, admin := r.Header[AdminHeader]
			_, client := r.Header[ClientHeader]
			if admin || client {
				kind += " marked"
			}
			if Admin(r.Context()) {
				kind += " ctx-admin"
			}
			io.WriteString(w, kind+" "+r.RemoteAddr)
		})
	}
	s, err := NewServer(ServerConfig{Config: f.cfg["b"], Handler: echo("data"), Admin: echo("admin")})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(l) }()
	t.Cleanup(func() {
		s.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("hop server: %v", err)
		}
	})
	bAddr := l.Addr().String()
	tr := f.transport(t, "a", nil)
	af := NewAdminForwarder(tr, "a", 0, nil)
	fw := NewForwarder(tr, nil)

	adminFront := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.RemoteAddr = "192.0.2.7:4242"
		af.ForwardAdmin(w, r, "b", bAddr)
	}))
	t.Cleanup(adminFront.Close)
	dataFront := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fw.Forward(w, r, "b", bAddr)
	}))
	t.Cleanup(dataFront.Close)

	get := func(url string, hdr map[string]string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", url, nil)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get(adminFront.URL+"/computers", nil); code != 200 || body != "admin ctx-admin 192.0.2.7:4242" {
		t.Errorf("ForwardAdmin: %d %q; want the admin handler with the client's address", code, body)
	}
	if code, body := get(dataFront.URL+"/computers", map[string]string{AdminHeader: "a", ClientHeader: "192.0.2.9:1"}); code != 200 || !strings.HasPrefix(body, "data 127.0.0.1:") {
		t.Errorf("the marker through Forward: %d %q; want the data plane, unmarked", code, body)
	}

	// Straight over the hop from a, as a data plane's proxy would send it
	// (X-Berth-Hops), or naming another host than the peer.
	hc := &http.Client{Transport: tr}
	for _, hdr := range []map[string]string{
		{AdminHeader: "a", "X-Berth-Hops": "1"},
		{AdminHeader: "a", "Via": "1.1 berth"},
		{AdminHeader: "c"},
	} {
		req, _ := http.NewRequestWithContext(WithPeer(context.Background(), "b"), "GET", "https://"+bAddr+"/computers", nil)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.HasPrefix(string(b), "data 127.0.0.1:") {
			t.Errorf("%v over the hop: %q; want the data plane, unmarked", hdr, b)
		}
	}

	// A host that does not answer.
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close()
	deadFront := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		af.ForwardAdmin(w, r, "b", deadAddr)
	}))
	t.Cleanup(deadFront.Close)
	resp, err := http.Get(deadFront.URL + "/computers/x")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(b), "unreachable") {
		t.Errorf("a dead host: %d Retry-After %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), b)
	}
}
