package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/certs"
	"github.com/berth-dev/berth/internal/certs/pebbletest"
	"github.com/berth-dev/berth/internal/certs/rfc2136/bindtest"
)

// httpsWorld is a berth whose TLS listeners are served by the certificate
// manager on pebble, with named resolving every name under example.test to
// 127.0.0.1, all on loopback.
type httpsWorld struct {
	*harness
	tlsPort  int
	issuing  *x509.Certificate // pebble's root, which issued certificates chain to
	rootFile string            // the same, PEM, for curl
}

// startHTTPS starts named, then pebble validating on two ports chosen
// free, then berth listening on those ports with ACME on pebble. With only
// "http-01" or "tls-alpn-01", pebble validates the other challenge on a
// port nothing listens on, so only that one can succeed.
func startHTTPS(t *testing.T, only string) *httpsWorld {
	t.Helper()
	pebbletest.Binary(t)
	dns := bindtest.Start(t, "example.test") // * IN A 127.0.0.1
	// pebble must know the ports before berth binds them
	plainPort, tlsPort := bindtest.FreePort(t), bindtest.FreePort(t)
	po := pebbletest.Options{HTTPPort: plainPort, TLSPort: tlsPort, DNS: dns.Addr}
	switch only {
	case "http-01":
		po.TLSPort = bindtest.FreePort(t)
	case "tls-alpn-01":
		po.HTTPPort = bindtest.FreePort(t)
	case "":
	default:
		t.Fatalf("startHTTPS: no challenge %q", only)
	}
	peb := pebbletest.Start(t, po)
	dir := t.TempDir()
	t.Cleanup(func() { stopReplicas(t, dir) }) // registered first: runs after the server stopped
	o := Options{
		ProxyAddr:    "127.0.0.1:" + strconv.Itoa(plainPort),
		ProxyTLSAddr: "127.0.0.1:" + strconv.Itoa(tlsPort),
		AdminAddr:    "127.0.0.1:0", DataDir: dir, EgressAddr: "off", DrainTimeout: 5 * time.Second,
		Certs: certs.Options{Email: "ops@example.test", Directory: peb.Directory, CARoots: peb.CARoots},
		Log:   slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	testOptions(&o)
	s := runWith(t, o)
	h := &harness{t: t, s: s, dir: dir, admin: "http://" + s.AdminAddr(), proxy: "http://" + s.ProxyAddr()}

	block, _ := pem.Decode(peb.IssuingPEM)
	root, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatalf("pebble's issuing root: %v", err)
	}
	rootFile := filepath.Join(t.TempDir(), "issuing.pem")
	if err := os.WriteFile(rootFile, peb.IssuingPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return &httpsWorld{harness: h, tlsPort: tlsPort, issuing: root, rootFile: rootFile}
}

// tlsAddr is berth's TLS listener, which every name under example.test
// resolves to.
func (w *httpsWorld) tlsAddr() string { return "127.0.0.1:" + strconv.Itoa(w.tlsPort) }

// url is https://host:port/path on berth's TLS port.
func (w *httpsWorld) url(host, path string) string {
	return "https://" + host + ":" + strconv.Itoa(w.tlsPort) + path
}

// certs is GET /certs.
func (w *httpsWorld) certs() []apitype.CertStatus {
	w.t.Helper()
	var out []apitype.CertStatus
	if r := w.do("GET", "/certs", "", ""); r.code != 200 || json.Unmarshal(r.body, &out) != nil {
		w.t.Fatalf("GET /certs: %d %s", r.code, r.body)
	}
	return out
}

// pending is GET /certs/pending.
func (w *httpsWorld) pending() []apitype.CertPending {
	w.t.Helper()
	var out []apitype.CertPending
	if r := w.do("GET", "/certs/pending", "", ""); r.code != 200 || json.Unmarshal(r.body, &out) != nil {
		w.t.Fatalf("GET /certs/pending: %d %s", r.code, r.body)
	}
	return out
}

// listed reports whether GET /certs has an entry for host.
func (w *httpsWorld) listed(host string) bool {
	return slices.ContainsFunc(w.certs(), func(c apitype.CertStatus) bool { return c.Host == host })
}

// client is an HTTPS client trusting pebble's issuing root only, dialing
// berth's TLS port whatever the URL's host (the URL's host is the SNI),
// over HTTP/2 or HTTP/1.1 only.
func (w *httpsWorld) client(t *testing.T, h2 bool, verify func(tls.ConnectionState) error) *http.Client {
	pool := x509.NewCertPool()
	pool.AddCert(w.issuing)
	tr := &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, VerifyConnection: verify},
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, w.tlsAddr())
		},
		Protocols: new(http.Protocols),
	}
	tr.Protocols.SetHTTP1(!h2)
	tr.Protocols.SetHTTP2(h2)
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

// h3Client is the same over HTTP/3.
func (w *httpsWorld) h3Client(t *testing.T) *http.Client {
	pool := x509.NewCertPool()
	pool.AddCert(w.issuing)
	tr := &http3.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool},
		Dial: func(ctx context.Context, _ string, tlsCfg *tls.Config, cfg *quic.Config) (*quic.Conn, error) {
			return quic.DialAddrEarly(ctx, w.tlsAddr(), tlsCfg, cfg)
		},
	}
	t.Cleanup(func() { tr.Close() })
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

// checkLeaf checks a connection's certificate is host's alone and chains
// to pebble's issuing root.
func (w *httpsWorld) checkLeaf(t *testing.T, what, host string, cs *tls.ConnectionState) {
	t.Helper()
	if cs == nil || len(cs.PeerCertificates) == 0 || len(cs.VerifiedChains) == 0 {
		t.Errorf("%s: no verified TLS connection state", what)
		return
	}
	if leaf := cs.PeerCertificates[0]; !slices.Equal(leaf.DNSNames, []string{host}) {
		t.Errorf("%s: the leaf names %v, want [%s]", what, leaf.DNSNames, host)
	}
	chain := cs.VerifiedChains[0]
	if !chain[len(chain)-1].Equal(w.issuing) {
		t.Errorf("%s: the chain ends at %q, not pebble's root %q", what, chain[len(chain)-1].Subject, w.issuing.Subject)
	}
}

// handshake handshakes with berth's TLS listener for name, trusting
// pebble's root, and returns the leaf or the error.
func (w *httpsWorld) handshake(name string) (*x509.Certificate, error) {
	pool := x509.NewCertPool()
	pool.AddCert(w.issuing)
	d := &net.Dialer{Timeout: 10 * time.Second}
	c, err := tls.DialWithDialer(d, "tcp", w.tlsAddr(), &tls.Config{ServerName: name, RootCAs: pool, NextProtos: []string{"h2", "http/1.1"}})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0], nil
}

// echoUpstream answers "static <X-Forwarded-Proto>", and echoes a
// websocket's messages.
func echoUpstream(t *testing.T) string {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") == "" {
			fmt.Fprintf(w, "static %s", r.Header.Get("X-Forwarded-Proto"))
			return
		}
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		for {
			typ, msg, err := c.Read(r.Context())
			if err != nil || c.Write(r.Context(), typ, msg) != nil {
				return
			}
		}
	}))
	t.Cleanup(up.Close)
	return addr(up)
}

// TestHTTPSWithPebble is HTTPS end to end: berth orders certificates from
// pebble (validated over HTTP-01 or TLS-ALPN-01 on berth's own listeners,
// pebble resolving the names with named) for the hosts a static
// deployment, a site and a vm deployment route, lists them on GET /certs
// with nothing pending, and serves each host over HTTP/1.1, HTTP/2 and
// HTTP/3, to Go's clients and to curl, with a certificate for that host
// alone that chains to pebble's root. A websocket through berth outlives
// the replacement of its host's certificate. A handshake for a name no
// deployment routes fails, and one for a deleted deployment's host fails
// the same way.
func TestHTTPSWithPebble(t *testing.T) {
	w := startHTTPS(t, "")
	up := echoUpstream(t)
	root := filepath.Join(w.dir, "sites", "default", "site") // the managed root of site "site"
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(root, "index.html"), []byte("<h1>site</h1>"), 0o644)

	// host → what its deployment answers GET / with: the body, or (vm) its
	// prefix and suffix around the replica's host name
	type want struct{ prefix, suffix string }
	hosts := map[string]want{
		"static.example.test": {"static https", ""},
		"ws.example.test":     {"static https", ""},
		"site.example.test":   {"<h1>site</h1>", ""},
		"vm.example.test":     {"app ", " / hi"},
	}
	start := time.Now()
	for _, spec := range []string{
		`{"id":"static","routes":[{"host":"static.example.test"}],"upstreams":["` + up + `"]}`,
		`{"id":"ws","routes":[{"host":"ws.example.test"}],"upstreams":["` + up + `"]}`,
		`{"id":"site","routes":[{"host":"site.example.test"}],"site":{"root":""}}`,
		`{"id":"vm","routes":[{"host":"vm.example.test"}],"vm":{"driver":"process","port":8080,"start_command":` +
			jsonString(appCommand()) + `,"env_vars":{"GREETING":"hi"}},"scaling":{"min_replicas":1}}`,
	} {
		if r := w.json("POST", "/deployments", spec); r.code != http.StatusCreated {
			t.Fatalf("POST %s: %d %s", spec, r.code, r.body)
		}
	}
	waitFor(t, "GET /certs to list every routed host", func() bool {
		for h := range hosts {
			if !w.listed(h) {
				return false
			}
		}
		return true
	})
	t.Logf("4 certificates issued by pebble in %v", time.Since(start).Round(time.Millisecond))
	if p := w.pending(); len(p) != 0 {
		t.Errorf("GET /certs/pending with every certificate issued: %+v", p)
	}
	for _, c := range w.certs() {
		if _, ok := hosts[c.Host]; !ok {
			t.Errorf("GET /certs lists %q, which no deployment routes", c.Host)
		}
		if na, err := time.Parse(time.RFC3339, c.NotAfter); err != nil || !na.After(time.Now()) {
			t.Errorf("%s: not_after %q is not a future RFC 3339 time (%v)", c.Host, c.NotAfter, err)
		}
		if !strings.Contains(c.Issuer, "Pebble") || c.NeedsRenewal {
			t.Errorf("%s: issuer %q, needs_renewal %v; want pebble's, false", c.Host, c.Issuer, c.NeedsRenewal)
		}
	}

	clients := []struct {
		proto int
		c     *http.Client
	}{{1, w.client(t, false, nil)}, {2, w.client(t, true, nil)}, {3, w.h3Client(t)}}
	for host, body := range hosts {
		for _, c := range clients {
			what := fmt.Sprintf("%s over HTTP/%d", host, c.proto)
			resp, err := c.c.Get(w.url(host, "/"))
			if err != nil {
				t.Errorf("%s: %v", what, err)
				continue
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || resp.ProtoMajor != c.proto || !strings.HasPrefix(string(b), body.prefix) || !strings.HasSuffix(string(b), body.suffix) {
				t.Errorf("%s: %s %d %q, want %q…%q", what, resp.Proto, resp.StatusCode, b, body.prefix, body.suffix)
			}
			w.checkLeaf(t, what, host, resp.TLS)
		}
	}
	w.curl(t, "static.example.test", "static https")
	w.curl(t, "site.example.test", "<h1>site</h1>")

	// (not a subtest: w's admin calls fail the test that made w)
	w.websocketAcrossReplacement(t, "ws.example.test", up)

	// No certificate for a name nothing routes, and none for a host whose
	// deployment is gone, with the same failure: SNI tells nothing about
	// which hosts were once routed.
	_, errNever := w.handshake("never.example.test")
	if errNever == nil {
		t.Fatal("a handshake for a name no deployment routes succeeded")
	}
	t.Logf("a name nothing routes: %v", errNever)
	if r := w.do("DELETE", "/deployments/vm", "", ""); r.code != http.StatusNoContent {
		t.Fatalf("DELETE /deployments/vm: %d %s", r.code, r.body)
	}
	var errGone error
	waitFor(t, "the deleted deployment's host to get no certificate", func() bool {
		_, errGone = w.handshake("vm.example.test")
		return errGone != nil
	})
	if errGone.Error() != errNever.Error() {
		t.Errorf("a deleted deployment's host fails with %q, a never-routed name with %q: an existence oracle", errGone, errNever)
	}
	waitFor(t, "GET /certs to drop the deleted deployment's host", func() bool { return !w.listed("vm.example.test") })
}

// TestACMEChallengesThroughBerth: HTTP-01 answered on berth's plaintext
// listener, and TLS-ALPN-01 on its TLS listener, each gets a certificate
// issued alone: pebble validates the other challenge on a port nothing
// listens on, which fails, and certmagic retries with the one that works
// (TestHTTPSWithPebble takes whichever certmagic prefers).
func TestACMEChallengesThroughBerth(t *testing.T) {
	for _, only := range []string{"http-01", "tls-alpn-01"} {
		t.Run(only, func(t *testing.T) {
			w := startHTTPS(t, only)
			const host = "app.example.test"
			if r := w.json("POST", "/deployments", `{"id":"app","routes":[{"host":"`+host+`"}],"upstreams":["`+echoUpstream(t)+`"]}`); r.code != http.StatusCreated {
				t.Fatalf("POST /deployments: %d %s", r.code, r.body)
			}
			waitFor(t, "GET /certs to list "+host, func() bool { return w.listed(host) })
			resp, err := w.client(t, true, nil).Get(w.url(host, "/"))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || string(b) != "static https" {
				t.Errorf("GET %s: %d %q", host, resp.StatusCode, b)
			}
			w.checkLeaf(t, host, host, resp.TLS)
		})
	}
}

// curl asks curl for https://host:port/ over HTTP/2, trusting pebble's
// issuing root only, and checks the body.
func (w *httpsWorld) curl(t *testing.T, host, body string) {
	t.Helper()
	curl, err := exec.LookPath("curl")
	if err != nil {
		if os.Geteuid() == 0 {
			t.Errorf("no curl (scripts/test installs it)")
		} else {
			t.Logf("no curl: not asked")
		}
		return
	}
	port := strconv.Itoa(w.tlsPort)
	out, err := exec.Command(curl, "-sS", "--http2", "--max-time", "20", "--cacert", w.rootFile,
		"--resolve", host+":"+port+":127.0.0.1", "-w", "\n%{http_version} %{http_code}", w.url(host, "/")).CombinedOutput()
	if want := body + "\n2 200"; err != nil || string(out) != want {
		t.Errorf("curl --http2 %s: %q, %v; want %q", host, out, err, want)
	}
}

// websocketAcrossReplacement holds a websocket over TLS to host (a static
// deployment "ws" on upstream up) open while
// berth replaces host's certificate with a new one from pebble, and checks
// it still echoes. certs renews on its own clock, which only its package's
// tests move; from here a replacement is made by unrouting the host (the
// deployment keeps a route by path only, so no host; the manager drops the
// host's certificate from its cache), deleting the stored certificate, and
// routing the host again, so berth orders a new one.
func (w *httpsWorld) websocketAcrossReplacement(t *testing.T, host, up string) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var serial string
	c := w.client(t, false, func(cs tls.ConnectionState) error {
		serial = cs.PeerCertificates[0].SerialNumber.String()
		return nil
	})
	ws, _, err := websocket.Dial(ctx, "wss://"+host+":"+strconv.Itoa(w.tlsPort)+"/ws", &websocket.DialOptions{HTTPClient: c})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	echo := func(msg string) {
		t.Helper()
		if err := ws.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
			t.Fatalf("websocket write: %v", err)
		}
		if _, got, err := ws.Read(ctx); err != nil || string(got) != msg {
			t.Fatalf("echo of %q: %q, %v", msg, got, err)
		}
	}
	echo("before")
	old := serial
	if old == "" {
		t.Fatal("the websocket's handshake recorded no certificate")
	}

	spec := func(routes string) string { return `{"routes":` + routes + `,"upstreams":["` + up + `"]}` }
	if r := w.json("PUT", "/deployments/ws", spec(`[{"path_prefix":"/parked"}]`)); r.code != 200 {
		t.Fatalf("PUT /deployments/ws unrouted: %d %s", r.code, r.body)
	}
	waitFor(t, "GET /certs to drop "+host, func() bool { return !w.listed(host) })
	stored, _ := filepath.Glob(filepath.Join(w.dir, "acme", "certificates", "*", host))
	if len(stored) == 0 {
		t.Fatalf("no stored certificate for %s under %s", host, filepath.Join(w.dir, "acme", "certificates"))
	}
	for _, d := range stored {
		if err := os.RemoveAll(d); err != nil {
			t.Fatal(err)
		}
	}
	if r := w.json("PUT", "/deployments/ws", spec(`[{"host":"`+host+`"}]`)); r.code != 200 {
		t.Fatalf("PUT /deployments/ws routed again: %d %s", r.code, r.body)
	}
	waitFor(t, "GET /certs to list "+host+" again", func() bool { return w.listed(host) })
	leaf, err := w.handshake(host)
	if err != nil {
		t.Fatalf("a handshake for %s after the replacement: %v", host, err)
	}
	if leaf.SerialNumber.String() == old {
		t.Fatalf("%s still has certificate %s: nothing was replaced", host, old)
	}
	echo("after the replacement")
	ws.Close(websocket.StatusNormalClosure, "")
}
