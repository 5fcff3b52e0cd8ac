package proxy_test

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/berth-dev/berth/internal/netguard"
	"github.com/berth-dev/berth/internal/proxy"
	"github.com/berth-dev/berth/internal/route"
)

// counting wraps h, counting the requests it serves.
func counting(h http.Handler) (http.Handler, *atomic.Int64) {
	var n atomic.Int64
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		h.ServeHTTP(w, r)
	}), &n
}

// TestDialRefusesOwnListeners points deployments at berth's own listeners
// (an admin API stand-in, by address and by a DNS name that resolves to it,
// and the proxy itself) and at a metadata address: each request is refused
// at dial time with 502, and nothing reaches the listener.
func TestDialRefusesOwnListeners(t *testing.T) {
	admin := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent) // DELETE /deployments/… on an ungated admin
	}))
	adminConns := countConns(admin)
	admin.Start()
	t.Cleanup(admin.Close)
	adminAddr := strings.TrimPrefix(admin.URL, "http://")
	_, port, _ := net.SplitHostPort(adminAddr)

	self := new(netguard.Self)
	h := proxy.New(proxy.Options{Self: self})
	served, n := counting(h)
	base := startProxy(t, served)
	proxyAddr := strings.TrimPrefix(base, "http://")
	// Filled after the listeners are bound, as the server does.
	self.Add(admin.Listener.Addr())
	if ap, err := net.ResolveTCPAddr("tcp", proxyAddr); err == nil {
		self.Add(ap)
	}

	_, okAddr := startBackend(t, echoHandler())
	h.Swap(table(
		entry{static("admin", proxy.NewBackend("admin", adminAddr, false)), hostRule("admin.test")},
		entry{static("by-name", proxy.NewBackend("by-name", "localhost:"+port, false)), hostRule("by-name.test")},
		entry{static("self", proxy.NewBackend("self", proxyAddr, false)), hostRule("self.test")},
		entry{static("metadata", proxy.NewBackend("metadata", "169.254.169.254:80", false)), hostRule("metadata.test")},
		entry{static("metadata-v6", proxy.NewBackend("metadata-v6", "[fd00:ec2::254]:80", false)), hostRule("metadata-v6.test")},
		entry{static("ok", proxy.NewBackend("ok", okAddr, false)), hostRule("ok.test")},
	))
	c := newClient(t)
	for _, host := range []string{"admin.test", "by-name.test", "self.test", "metadata.test", "metadata-v6.test"} {
		for _, upgrade := range []bool{false, true} {
			var hdr http.Header
			if upgrade { // through ReverseProxy and http.Transport
				hdr = http.Header{"Connection": {"Upgrade"}, "Upgrade": {"websocket"}}
			}
			before := n.Load()
			resp, body := send(t, c, http.MethodDelete, base+"/deployments/x", host, nil, hdr)
			if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "not allowed") {
				t.Errorf("%s (upgrade %v): %d %q, want 502 refusing the address", host, upgrade, resp.StatusCode, body)
			}
			if d := n.Load() - before; d != 1 {
				t.Errorf("%s (upgrade %v): the proxy served %d requests for one, want 1", host, upgrade, d)
			}
		}
	}
	if got := adminConns.Load(); got != 0 {
		t.Errorf("the admin listener accepted %d connections through the proxy", got)
	}
	if resp, body := get(t, c, base+"/", "ok.test"); resp.StatusCode != http.StatusOK {
		t.Errorf("an ordinary upstream: %d %q", resp.StatusCode, body)
	}
}

// TestLoopCut points a deployment at the proxy's own address when the proxy
// does not know it as its own (as through a port forward), and two proxies
// at each other: the hop count berth adds ends the loop with 508 after a
// bounded number of trips.
func TestLoopCut(t *testing.T) {
	t.Run("self", func(t *testing.T) {
		h := proxy.New(proxy.Options{})
		served, n := counting(h)
		base := startProxy(t, served)
		h.Swap(table(entry{static("loop", proxy.NewBackend("loop", strings.TrimPrefix(base, "http://"), false)), catchAll}))
		resp, body := get(t, newClient(t), base+"/", "loop.test")
		if resp.StatusCode != http.StatusLoopDetected {
			t.Errorf("self-loop: %d %q, want 508", resp.StatusCode, body)
		}
		if got := n.Load(); got != 4 {
			t.Errorf("self-loop: the proxy served %d requests, want 4 (the client's and 3 hops)", got)
		}
	})
	t.Run("two berths", func(t *testing.T) {
		a, b := proxy.New(proxy.Options{}), proxy.New(proxy.Options{})
		sa, na := counting(a)
		sb, nb := counting(b)
		baseA, baseB := startProxy(t, sa), startProxy(t, sb)
		a.Swap(table(entry{static("to-b", proxy.NewBackend("b", strings.TrimPrefix(baseB, "http://"), false)), catchAll}))
		b.Swap(table(entry{static("to-a", proxy.NewBackend("a", strings.TrimPrefix(baseA, "http://"), false)), catchAll}))
		resp, body := get(t, newClient(t), baseA+"/", "ping.test")
		if resp.StatusCode != http.StatusLoopDetected {
			t.Errorf("A↔B loop: %d %q, want 508", resp.StatusCode, body)
		}
		if got := na.Load() + nb.Load(); got != 4 {
			t.Errorf("A↔B loop: %d requests served, want 4", got)
		}
	})
	t.Run("chain", func(t *testing.T) {
		// berth behind berth behind berth is fine, and the backend sees
		// the count; a client cannot lower it.
		_, up := startBackend(t, echoHandler())
		next := up
		var front string
		for range 3 {
			h := proxy.New(proxy.Options{})
			h.Swap(table(entry{static("chain", proxy.NewBackend("next", next, false)), catchAll}))
			front = startProxy(t, h)
			next = strings.TrimPrefix(front, "http://")
		}
		resp, body := get(t, newClient(t), front+"/", "chain.test")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("a chain of 3: %d %q", resp.StatusCode, body)
		}
		if got := decodeEcho(t, body).Header.Get("X-Berth-Hops"); got != "3" {
			t.Errorf("the backend saw X-Berth-Hops %q, want 3", got)
		}
		resp, body = send(t, newClient(t), http.MethodGet, front+"/", "chain.test", nil, http.Header{"X-Berth-Hops": {"0"}})
		if resp.StatusCode != http.StatusOK || decodeEcho(t, body).Header.Get("X-Berth-Hops") != "3" {
			t.Errorf("hops 0 from the client: %d %q", resp.StatusCode, body)
		}
		// A value berth would not have written is not taken as small.
		for _, forged := range []string{"-5", "x", "1, 0", "1"} {
			resp, body = send(t, newClient(t), http.MethodGet, front+"/", "chain.test", nil, http.Header{"X-Berth-Hops": {forged}})
			if resp.StatusCode != http.StatusLoopDetected {
				t.Errorf("hops %q from the client: %d %q, want 508", forged, resp.StatusCode, body)
			}
		}
	})
}

func hostRule(host string) []route.Rule { return []route.Rule{{Host: host}} }
