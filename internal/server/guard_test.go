package server

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/client"
)

// rawAdmin sends one request with exactly the given Host and extra header
// lines over a fresh connection to the admin listener, and returns the
// status and body.
func rawAdmin(t *testing.T, n *node, method, path, host, extra, body string) (int, string) {
	t.Helper()
	c, err := net.Dial("tcp", n.s.AdminAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: %s\r\n%sContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", method, path, host, extra, len(body), body)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestHostOriginGuard: an ungated loopback admin is reachable by a page
// that rebinds its DNS name to 127.0.0.1 (same-origin with the admin as far
// as the browser knows), which could create a deployment whose
// start_command runs on the host. The admin answers only Host names it
// serves and refuses foreign Origins; berth's own client still works.
func TestHostOriginGuard(t *testing.T) {
	n := startNode(t, Options{AdminHosts: []string{"berth.internal", "ops.example:9999"}})
	_, port, _ := net.SplitHostPort(n.s.AdminAddr())
	spec := func(id string) string {
		return fmt.Sprintf(`{"id":%q,"routes":[{"host":"%s.test"}],"vm":{"driver":"process","start_command":"touch /tmp/pwned"}}`, id, id)
	}
	created := func(id string) bool {
		code, _ := rawAdmin(t, n, "GET", "/deployments/"+id, "127.0.0.1:"+port, "", "")
		return code == 200
	}

	refused := []struct {
		name, host, extra string
		want              int
		msg               string
	}{
		{"rebound name", "evil.example:" + port, "", 421, `does not answer to host \"evil.example:` + port + `\"`},
		{"rebound name without port", "evil.example", "", 421, "does not answer to host"},
		{"listed name on another port", "ops.example:" + port, "", 421, "does not answer to host"},
		{"loopback-looking name", "127.0.0.1.evil.example:" + port, "", 421, "does not answer to host"},
		{"foreign origin", "127.0.0.1:" + port, "Origin: http://evil.example\r\n", 403, "refuses requests from another origin"},
		{"rebound origin on an allowed host", "localhost:" + port, "Origin: http://evil.example:" + port + "\r\n", 403, "another origin"},
		{"another local origin", "localhost:" + port, "Origin: http://localhost:3000\r\n", 403, "another origin"},
		{"null origin", "localhost:" + port, "Origin: null\r\n", 403, "another origin"},
		{"through the data plane", "127.0.0.1:" + port, "Via: 1.1 berth\r\n", 403, "not reachable through berth's data plane"},
	}
	for i, tt := range refused {
		id := fmt.Sprintf("pwn%d", i)
		code, body := rawAdmin(t, n, "POST", "/deployments", tt.host, tt.extra, spec(id))
		if code != tt.want || !strings.HasPrefix(body, `{"error":`) || !strings.Contains(body, tt.msg) {
			t.Errorf("%s: POST /deployments = %d %s; want %d naming %q", tt.name, code, body, tt.want, tt.msg)
		}
		if created(id) {
			t.Errorf("%s: the deployment was created", tt.name)
		}
	}
	// A rebound name is refused on reads and the websocket too.
	if code, _ := rawAdmin(t, n, "GET", "/deployments", "evil.example:"+port, "", ""); code != 421 {
		t.Errorf("GET with a rebound Host = %d, want 421", code)
	}
	if code, _ := rawAdmin(t, n, "GET", "/deployments/x/shell", "127.0.0.1:"+port, "Origin: http://evil.example\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n", ""); code != 403 {
		t.Errorf("websocket from a foreign origin = %d, want 403", code)
	}

	allowed := []struct{ name, host, extra string }{
		{"loopback address", "127.0.0.1:" + port, ""},
		{"localhost", "LOCALHOST:" + port, ""},
		{"localhost without port", "localhost", ""},
		{"own origin", "127.0.0.1:" + port, "Origin: http://127.0.0.1:" + port + "\r\n"},
		{"listed name", "berth.internal:" + port, "Origin: http://berth.internal:" + port + "\r\n"},
		{"listed name and port", "ops.example:9999", ""},
		{"tls-terminated own origin", "berth.internal", "Origin: https://berth.internal\r\n"},
		{"ipv6 loopback", "[::1]:" + port, ""},
	}
	for i, tt := range allowed {
		id := fmt.Sprintf("ok%d", i)
		if code, body := rawAdmin(t, n, "POST", "/deployments", tt.host, tt.extra, staticSpec(id, "")); code != 201 {
			t.Errorf("%s: POST /deployments = %d %s, want 201", tt.name, code, body)
		}
	}

	// The berth client sends the Host it dials and no Origin.
	c, err := client.New(n.admin)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := c.Create(ctx, apitype.DeploymentSpec{ID: "by-client", Routes: []apitype.RouteRule{{Host: "by-client.test"}}, Upstreams: []string{"127.0.0.1:1"}}); err != nil {
		t.Errorf("client Create: %v", err)
	}
	if _, err := c.Deployments(ctx); err != nil {
		t.Errorf("client Deployments: %v", err)
	}
	lc, err := client.New("http://localhost:" + port)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lc.WhoAmI(ctx); err != nil {
		t.Errorf("client via localhost: %v", err)
	}
}
