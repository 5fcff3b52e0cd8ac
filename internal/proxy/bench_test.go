package proxy_test

import (
	"crypto/tls"
	"io"
	"net/http"
	"testing"

	"github.com/berth-dev/berth/internal/proxy"
	"github.com/berth-dev/berth/internal/proxy/proxytest"
)

// BenchmarkProxy forwards GETs over real loopback TCP: client → proxy server
// → backend server. Most of the cost is the two HTTP hops; allocations show
// what the proxy adds on top of them.
func BenchmarkProxy(b *testing.B) {
	payload := []byte("hello from the backend\n")
	_, addr := startBackend(b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write(payload)
	}))
	h := proxy.New(proxy.Options{})
	h.Swap(table(entry{static("bench", proxy.NewBackend("bench-1", addr, false)), catchAll}))
	base := startProxy(b, h)
	c := newClient(b)
	req, err := http.NewRequest(http.MethodGet, base+"/bench", nil)
	if err != nil {
		b.Fatal(err)
	}
	req.Host = "bench.test"
	b.ReportAllocs()
	for b.Loop() {
		resp, err := c.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		n, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || n != int64(len(payload)) {
			b.Fatalf("status %d, %d bytes, %v", resp.StatusCode, n, err)
		}
	}
}

// benchGET runs GETs of base+"/bench" with c, each answered with payload.
func benchGET(b *testing.B, c *http.Client, base string, payload []byte, proto int) {
	req, err := http.NewRequest(http.MethodGet, base+"/bench", nil)
	if err != nil {
		b.Fatal(err)
	}
	req.Host = "bench.test"
	b.ReportAllocs()
	for b.Loop() {
		resp, err := c.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		n, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || n != int64(len(payload)) || resp.ProtoMajor != proto {
			b.Fatalf("%s %d, %d bytes, %v", resp.Proto, resp.StatusCode, n, err)
		}
	}
}

// BenchmarkProxyTLS is BenchmarkProxy over TLS: HTTP/1.1 through the front
// end (h1), HTTP/2 through net/http behind it (h2), and HTTP/3 (h3), each
// on one kept-alive connection. The differences are what each protocol's
// server adds on loopback.
func BenchmarkProxyTLS(b *testing.B) {
	payload := []byte("hello from the backend\n")
	_, addr := startBackend(b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write(payload)
	}))
	h := proxy.New(proxy.Options{})
	h.Swap(table(entry{static("bench", proxy.NewBackend("bench-1", addr, false)), catchAll}))
	f := startTLSFront(b, h, proxy.H1Options{})
	b.Run("h1", func(b *testing.B) { benchGET(b, f.client(b, false), f.base, payload, 1) })
	b.Run("h2", func(b *testing.B) { benchGET(b, f.client(b, true), f.base, payload, 2) })
	h3addr := startH3(b, h, f)
	b.Run("h3", func(b *testing.B) { benchGET(b, h3Client(b, f), "https://"+h3addr, payload, 3) })
}

// BenchmarkFrontEndKeepAlive is the exchange TestKeepAliveGETAllocs and
// TestTLSKeepAliveGETAllocs pin, timed: raw keep-alive GETs through the
// front end, plaintext and over TLS, from a client and to an upstream that
// cost next to nothing, so the figures are the front end's, the
// forwarder's and (tls) crypto/tls's on both sides.
func BenchmarkFrontEndKeepAlive(b *testing.B) {
	const req = "GET /bench?q=1 HTTP/1.1\r\nHost: bench.test\r\nUser-Agent: bench\r\nAccept: */*\r\n\r\n"
	addr := proxytest.RawUpstream(b, 100)
	h := proxy.New(proxy.Options{})
	h.Swap(table(entry{static("bench", proxy.NewBackend("bench-1", addr, false)), catchAll}))
	run := func(b *testing.B, q *proxytest.QuietClient) {
		b.ReportAllocs()
		for b.Loop() {
			if st, n := q.Do(); st != http.StatusOK || n != 100 {
				b.Fatalf("status %d, %d bytes", st, n)
			}
		}
	}
	b.Run("plain", func(b *testing.B) {
		paddr, _ := startH1(b, h, proxy.H1Options{})
		run(b, proxytest.NewQuietClient(b, paddr, req))
	})
	b.Run("tls", func(b *testing.B) {
		f := startTLSFront(b, h, proxy.H1Options{})
		run(b, proxytest.NewQuietTLSClient(b, f.addr, req, &tls.Config{RootCAs: f.roots, NextProtos: []string{"http/1.1"}}))
	})
}
