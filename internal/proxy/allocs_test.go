package proxy_test

import (
	"crypto/tls"
	"net/netip"
	"sync/atomic"
	"testing"

	"github.com/berth-dev/berth/internal/proxy"
	"github.com/berth-dev/berth/internal/proxy/proxytest"
)

// TestKeepAliveGETAllocs pins the data plane's fast path at zero
// allocations: a keep-alive GET through the front end, forwarded over a
// pooled upstream connection, answered with a small body.
func TestKeepAliveGETAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("measures allocations over many requests")
	}
	if frontEnd == "h1-watch" {
		t.Skip("every request is watched for a hang-up: the slow path")
	}
	addr := proxytest.RawUpstream(t, 100)
	h := proxy.New(proxy.Options{})
	h.Swap(table(entry{static("bench", proxy.NewBackend("bench-1", addr, false)), catchAll}))
	paddr, _ := startH1(t, h, proxy.H1Options{})
	q := proxytest.NewQuietClient(t, paddr, "GET /bench?q=1 HTTP/1.1\r\nHost: bench.test\r\nUser-Agent: bench\r\nAccept: */*\r\n\r\n")
	allocs := proxytest.AllocsPerRequest(t, q, 2000, 200, 100)
	if allocs != 0 {
		t.Errorf("%v allocations per keep-alive GET, want 0", allocs)
	}
}

// TestTLSKeepAliveGETAllocs pins the same exchange over TLS (HTTP/1.1
// through the front end): the handshake and the connection state are the
// connection's, and the front end adds nothing per request. What is left
// is crypto/tls's: each record read allocates the reader it fills its
// buffer with (Conn.readFromUntil's atLeastReader, which escapes through
// bytes.Buffer.ReadFrom), one for the request on the server and one for
// the response on the client, which AllocsPerRun counts too (it counts the
// process).
func TestTLSKeepAliveGETAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("measures allocations over many requests")
	}
	if frontEnd == "h1-watch" {
		t.Skip("every request is watched for a hang-up: the slow path")
	}
	if raceEnabled {
		t.Skip("crypto/tls's record buffers come from a sync.Pool, which the race detector makes drop items")
	}
	addr := proxytest.RawUpstream(t, 100)
	h := proxy.New(proxy.Options{})
	h.Swap(table(entry{static("bench", proxy.NewBackend("bench-1", addr, false)), catchAll}))
	f := startTLSFront(t, h, proxy.H1Options{})
	q := proxytest.NewQuietTLSClient(t, f.addr, "GET /bench?q=1 HTTP/1.1\r\nHost: bench.test\r\nUser-Agent: bench\r\nAccept: */*\r\n\r\n",
		&tls.Config{RootCAs: f.roots, NextProtos: []string{"http/1.1"}})
	allocs := proxytest.AllocsPerRequest(t, q, 2000, 200, 100)
	if allocs > 2 {
		t.Errorf("%v allocations per keep-alive GET over TLS, want at most 2 (crypto/tls's, one a side)", allocs)
	}
}

// TestObservedKeepAliveGETAllocs is the same exchange with a guard and an
// observer installed (the SIEM's hooks): neither costs an allocation.
func TestObservedKeepAliveGETAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("measures allocations over many requests")
	}
	if frontEnd == "h1-watch" {
		t.Skip("every request is watched for a hang-up: the slow path")
	}
	addr := proxytest.RawUpstream(t, 100)
	var seen, bytes atomic.Int64
	h := proxy.New(proxy.Options{
		Guard: func(netip.Addr, string, string, string, string, string) proxy.GuardVerdict { return proxy.GuardPass },
		Observe: func(c *proxy.Completion) {
			seen.Add(1)
			bytes.Add(c.Bytes)
		},
	})
	h.Swap(table(entry{static("bench", proxy.NewBackend("bench-1", addr, false)), catchAll}))
	paddr, _ := startH1(t, h, proxy.H1Options{})
	q := proxytest.NewQuietClient(t, paddr, "GET /bench?q=1 HTTP/1.1\r\nHost: bench.test\r\nUser-Agent: bench\r\nAccept: */*\r\n\r\n")
	allocs := proxytest.AllocsPerRequest(t, q, 2000, 200, 100)
	if allocs != 0 {
		t.Errorf("%v allocations per observed keep-alive GET, want 0", allocs)
	}
	if n, b := seen.Load(), bytes.Load(); n == 0 || b != n*100 {
		t.Errorf("observed %d requests with %d body bytes, want 100 bytes each", n, b)
	}
}
