package server

import (
	"net"
	"net/http"
	"net/netip"
	"testing"
)

// TestUpstreamsCannotReachBerth points deployments at berth's own admin and
// proxy listeners (by address and by a name resolving to them) and sends an
// admin request through the proxy: the proxy refuses the dial (502), and the
// admin API never sees the request. Should the spec be refused when written
// (400), the wall holds there instead.
func TestUpstreamsCannotReachBerth(t *testing.T) {
	h := start(t, "")
	for _, ln := range []string{h.s.AdminAddr(), h.s.ProxyAddr()} {
		if !h.s.self.Contains(netip.MustParseAddrPort(ln)) {
			t.Errorf("the proxy does not know %s as berth's own", ln)
		}
	}
	_, adminPort, _ := net.SplitHostPort(h.s.AdminAddr())
	for id, up := range map[string]string{
		"to-admin":       h.s.AdminAddr(),
		"to-admin-named": "localhost:" + adminPort,
		"to-proxy":       h.s.ProxyAddr(),
	} {
		r := h.json("POST", "/deployments", `{"id":"`+id+`","routes":[{"host":"`+id+`.test"}],"upstreams":["`+up+`"]}`)
		if r.code == http.StatusBadRequest {
			t.Logf("%s: refused at write time: %s", id, r.body)
			continue
		}
		if r.code != http.StatusCreated {
			t.Fatalf("POST %s: %d %s", id, r.code, r.body)
		}
		req, _ := http.NewRequest(http.MethodDelete, h.proxy+"/deployments/"+id, nil)
		req.Host = id + ".test"
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadGateway {
			t.Errorf("DELETE /deployments/%s through the proxy: %d, want 502", id, resp.StatusCode)
		}
		if r := h.json("GET", "/deployments/"+id, ""); r.code != http.StatusOK {
			t.Errorf("after the DELETE through the proxy, GET /deployments/%s: %d %s", id, r.code, r.body)
		}
	}
}
