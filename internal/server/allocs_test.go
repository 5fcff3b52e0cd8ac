package server

import (
	"fmt"
	"testing"

	"github.com/berth-dev/berth/internal/proxy/proxytest"
)

// TestProxyKeepAliveAllocs pins a keep-alive GET through the whole server —
// its front end, routing table, metrics and the forwarder to a static
// upstream — at zero allocations per request (the proxy package pins the
// data plane alone; this catches what the server wires around it).
func TestProxyKeepAliveAllocs(t *testing.T) {
	skipShort(t, "measures allocations over many requests")
	h := start(t, "")
	up := proxytest.RawUpstream(t, 100)
	if r := h.json("POST", "/deployments", fmt.Sprintf(`{"id":"fast","routes":[{"host":"fast.test"}],"upstreams":[%q]}`, up)); r.code != 201 {
		t.Fatalf("creating the deployment: %d %s", r.code, r.body)
	}
	q := proxytest.NewQuietClient(t, h.s.ProxyAddr(), "GET /x HTTP/1.1\r\nHost: fast.test\r\nUser-Agent: bench\r\nAccept: */*\r\n\r\n")
	allocs := proxytest.AllocsPerRequest(t, q, 2000, 200, 100)
	if allocs != 0 {
		t.Errorf("%v allocations per keep-alive GET through the server, want 0", allocs)
	}
}
