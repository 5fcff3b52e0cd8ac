package server

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
)

// freePort finds a loopback port nobody listens on (process sandboxes share
// the host's network, so a port inside the Computer is a host port).
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestComputerPortThroughGateway: a port exposed inside a Computer is
// reachable through the data plane at <port>-<id>.localhost; a private
// one needs a grant for that Computer, which is not passed to the app.
func TestComputerPortThroughGateway(t *testing.T) {
	h := start(t, "")
	if r := h.json("POST", "/computers", `{"id":"box","backings":[{"kind":"process"}]}`); r.code != 201 {
		t.Fatalf("create: %d %s", r.code, r.body)
	}
	pub, priv := freePort(t), freePort(t)
	for _, p := range []int{pub, priv} {
		body := fmt.Sprintf(`{"argv":["/bin/sh","-c",%q],"env":{"PORT":"%d"}}`, appCommand(), p)
		if r := h.json("POST", "/computers/box/processes", body); r.code != 201 && r.code != 200 {
			t.Fatalf("process start: %d %s", r.code, r.body)
		}
	}
	if r := h.json("POST", "/computers/box/ports", fmt.Sprintf(`{"port":%d,"public":true}`, pub)); r.code >= 300 {
		t.Fatalf("expose: %d %s", r.code, r.body)
	}
	if r := h.json("POST", "/computers/box/ports", fmt.Sprintf(`{"port":%d}`, priv)); r.code >= 300 {
		t.Fatalf("expose: %d %s", r.code, r.body)
	}
	host := func(p int) string { return fmt.Sprintf("%d-box.localhost", p) }
	waitFor(t, "the public port to answer through the gateway", func() bool {
		return get(t, h.proxy+"/x", host(pub)).code == 200
	})
	if r := get(t, h.proxy+"/x", host(pub)); !strings.HasPrefix(string(r.body), "app ") {
		t.Errorf("public port: %d %q", r.code, r.body)
	}
	if r := get(t, h.proxy+"/x", host(priv)); r.code != http.StatusUnauthorized {
		t.Errorf("private port without a grant: %d %q", r.code, r.body)
	}
	gr := h.json("POST", "/computers/box/grants", `{"actions":["listPorts"],"expiresInSecs":600}`)
	var g struct{ Token string }
	if err := json.Unmarshal(gr.body, &g); err != nil || g.Token == "" {
		t.Fatalf("grant: %d %s", gr.code, gr.body)
	}
	withGrant := func() int {
		req, _ := http.NewRequest("GET", h.proxy+"/x", nil)
		req.Host = host(priv)
		req.Header.Set("Authorization", "Bearer "+g.Token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	// The private app may still be starting (502 until it listens).
	waitFor(t, "the private port to answer with a grant", func() bool { return withGrant() == 200 })
	// Ports not exposed, and unknown Computers, are the ordinary 404.
	for _, hh := range []string{fmt.Sprintf("%d-box.localhost", freePort(t)), fmt.Sprintf("%d-nobox.localhost", pub)} {
		if r := get(t, h.proxy+"/", hh); r.code != 404 {
			t.Errorf("%s: %d", hh, r.code)
		}
	}
	h.do("DELETE", "/computers/box", "", "")
}
