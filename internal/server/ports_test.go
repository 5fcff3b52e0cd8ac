package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/oidc/oidctest"
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

// TestComputerPortSignIn: a private port exposed with a sign_in admits a
// browser that signs in with that auth provider of the Computer's
// namespace — the app sees who — while a program still needs a grant; a
// sign_in naming no provider, or on a public port, is refused naming it.
func TestComputerPortSignIn(t *testing.T) {
	op := oidctest.Start(t)
	h := start(t, "")
	declareCorp(t, h, op)
	if r := h.json("POST", "/computers", `{"id":"ide","backings":[{"kind":"process"}]}`); r.code != 201 {
		t.Fatalf("create: %d %s", r.code, r.body)
	}
	p := freePort(t)
	if r := h.json("POST", "/computers/ide/processes", fmt.Sprintf(`{"argv":["/bin/sh","-c",%q],"env":{"PORT":"%d"}}`, appCommand(), p)); r.code >= 300 {
		t.Fatalf("process start: %d %s", r.code, r.body)
	}
	for _, bad := range []string{fmt.Sprintf(`{"port":%d,"sign_in":"nope"}`, p), fmt.Sprintf(`{"port":%d,"public":true,"sign_in":"corp"}`, p)} {
		if r := h.json("POST", "/computers/ide/ports", bad); r.code != 400 || !strings.Contains(string(r.body), "sign_in") {
			t.Errorf("expose %s: %d %s, want 400 naming sign_in", bad, r.code, r.body)
		}
	}
	if r := h.json("POST", "/computers/ide/ports", fmt.Sprintf(`{"port":%d,"sign_in":"corp"}`, p)); r.code != 201 || !strings.Contains(string(r.body), `"sign_in":"corp"`) {
		t.Fatalf("expose: %d %s", r.code, r.body)
	}
	proxyAddr := strings.TrimPrefix(h.proxy, "http://")
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if host, _, _ := net.SplitHostPort(addr); strings.HasSuffix(host, ".localhost") {
				addr = proxyAddr
			}
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		}}}
	port := proxyAddr[strings.LastIndexByte(proxyAddr, ':')+1:]
	app := fmt.Sprintf("http://%d-ide.localhost:%s", p, port)

	// A program without a credential is told how to sign in, not served.
	req, _ := http.NewRequest("GET", app+"/x", nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Errorf("a program without a credential: %d", resp.StatusCode)
	}
	// A browser signs in and reaches the app, which sees who.
	op.QueueUser(oidctest.User{Subject: "alice-id", Email: "alice@corp.test", EmailVerified: true, Name: "Alice"})
	var b string
	waitFor(t, "the signed-in browser to reach the app", func() bool {
		resp, b = browse(t, c, app+"/code")
		resp, b = followSignIn(t, c, resp, b)
		return resp.StatusCode == 200 // the app may still be starting (502)
	})
	if !strings.HasPrefix(b, "app ") || !strings.Contains(b, "/code") || !strings.Contains(b, "user=alice-id") {
		t.Errorf("the app answered %q", b)
	}
	// A program with a grant still gets in, and presents no identity.
	gr := h.json("POST", "/computers/ide/grants", `{"actions":["listPorts"],"expiresInSecs":600}`)
	var g struct{ Token string }
	if err := json.Unmarshal(gr.body, &g); err != nil || g.Token == "" {
		t.Fatalf("grant: %d %s", gr.code, gr.body)
	}
	req, _ = http.NewRequest("GET", app+"/api", nil)
	req.Header.Set("Authorization", "Bearer "+g.Token)
	req.Header.Set("X-Auth-Request-User", "mallory")
	resp, err = c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || strings.Contains(string(body), "mallory") {
		t.Errorf("with a grant: %d %q", resp.StatusCode, body)
	}
	// The provider cannot be deleted while a port signs in with it.
	if r := h.do("DELETE", "/auth-providers/default/corp", "", ""); r.code != 409 || !strings.Contains(string(r.body), fmt.Sprintf("ide:%d", p)) {
		t.Errorf("deleting the provider a port signs in with: %d %s", r.code, r.body)
	}
	if r := h.do("DELETE", fmt.Sprintf("/computers/ide/ports/%d", p), "", ""); r.code >= 300 {
		t.Fatalf("unexpose: %d %s", r.code, r.body)
	}
	if r := h.do("DELETE", "/auth-providers/default/corp", "", ""); r.code != 204 {
		t.Errorf("deleting the provider once no port uses it: %d %s", r.code, r.body)
	}
	h.do("DELETE", "/computers/ide", "", "")
}
