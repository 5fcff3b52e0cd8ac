package proxy_test

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/quic-go/quic-go/http3"

	"github.com/berth-dev/berth/internal/proxy"
)

// testCert is a self-signed ECDSA P-256 certificate for 127.0.0.1, ::1,
// localhost and *.test, with the given serial number.
func testCert(t testing.TB, serial int64) (tls.Certificate, *x509.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(serial),
		Subject:               pkix.Name{CommonName: "berth test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		DNSNames:              []string{"localhost", "*.test"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, leaf
}

// certSwap is a GetCertificate whose certificate can be replaced.
type certSwap struct {
	cur atomic.Pointer[tls.Certificate]
}

func (s *certSwap) get(*tls.ClientHelloInfo) (*tls.Certificate, error) { return s.cur.Load(), nil }

// tlsFront is a TLS front end under test.
type tlsFront struct {
	addr  string // host:port
	base  string // https://host:port
	fe    *proxy.H1Server
	roots *x509.CertPool
	cert  *x509.Certificate
	swap  *certSwap
}

// startTLSFront serves h with the front end over TLS on loopback, with
// net/http's HTTP/2 behind it, and a certificate from GetCertificate.
func startTLSFront(t testing.TB, h *proxy.Handler, o proxy.H1Options) *tlsFront {
	t.Helper()
	cert, leaf := testCert(t, 1)
	sw := &certSwap{}
	sw.cur.Store(&cert)
	conf := &tls.Config{GetCertificate: sw.get, NextProtos: []string{"h2", "http/1.1"}}
	o.TLSConfig = conf
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetHTTP2(true)
	fe := h.NewH1Server(&http.Server{Handler: h, Protocols: p, TLSConfig: conf, ErrorLog: log.New(io.Discard, "", 0)}, o)
	served := make(chan error, 1)
	go func() { served <- fe.Serve(ln) }()
	t.Cleanup(func() {
		fe.Close()
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve returned %v, want http.ErrServerClosed", err)
		}
	})
	roots := x509.NewCertPool()
	roots.AddCert(leaf)
	return &tlsFront{addr: ln.Addr().String(), base: "https://" + ln.Addr().String(), fe: fe, roots: roots, cert: leaf, swap: sw}
}

// client returns a client trusting the front's certificate: HTTP/1.1 only,
// or HTTP/2 with h2.
func (f *tlsFront) client(t testing.TB, h2 bool) *http.Client {
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: f.roots}, ForceAttemptHTTP2: h2}
	if !h2 {
		p := new(http.Protocols)
		p.SetHTTP1(true)
		tr.Protocols = p
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// tlsSeen records, for the requests the Handler sees, whether r.TLS was set.
func tlsSeen(seen *atomic.Int32) func(http.ResponseWriter, *http.Request, string) (*proxy.Deployment, func(), bool) {
	return func(_ http.ResponseWriter, r *http.Request, _ string) (*proxy.Deployment, func(), bool) {
		if r.TLS != nil && r.TLS.HandshakeComplete {
			seen.Add(1)
		}
		return nil, nil, false
	}
}

// TestTLSFrontEndHTTP1 serves HTTP/1.1 over TLS through the front end: a
// keep-alive GET pair on one connection, a POST with a body and a chunked
// one, each reaching the backend with X-Forwarded-Proto https, and every
// request carrying r.TLS in the Handler.
func TestTLSFrontEndHTTP1(t *testing.T) {
	_, addr := startBackend(t, echoHandler())
	var seen atomic.Int32
	h := proxy.New(proxy.Options{Resolve: tlsSeen(&seen)})
	h.Swap(table(entry{static("app", proxy.NewBackend("app-1", addr, false)), catchAll}))
	f := startTLSFront(t, h, proxy.H1Options{})
	c := f.client(t, false)

	var conns atomic.Int32
	var reused atomic.Int32
	trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
		conns.Add(1)
		if i.Reused {
			reused.Add(1)
		}
	}}
	for i := range 2 {
		req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), "GET", f.base+"/get?i=1", nil)
		req.Host = "app.test"
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.TLS == nil || resp.ProtoMajor != 1 {
			t.Fatalf("GET %d: status %d, TLS %v, proto %s", i, resp.StatusCode, resp.TLS != nil, resp.Proto)
		}
		e := decodeEcho(t, string(b))
		if got := e.Header.Get("X-Forwarded-Proto"); got != "https" {
			t.Errorf("GET %d: X-Forwarded-Proto %q, want https", i, got)
		}
		if e.URI != "/get?i=1" {
			t.Errorf("GET %d: backend saw %q", i, e.URI)
		}
	}
	if reused.Load() != 1 {
		t.Errorf("%d of %d GETs reused the connection, want the second", reused.Load(), conns.Load())
	}

	resp, body := send(t, c, "POST", f.base+"/post", "app.test", strings.NewReader("hello body"), nil)
	if e := decodeEcho(t, body); resp.StatusCode != 200 || e.Body != "hello body" || e.Header.Get("X-Forwarded-Proto") != "https" {
		t.Errorf("POST: status %d, backend saw body %q proto %q", resp.StatusCode, e.Body, e.Header.Get("X-Forwarded-Proto"))
	}
	pr, pw := io.Pipe()
	go func() {
		pw.Write([]byte("chunk one, "))
		pw.Write([]byte("chunk two"))
		pw.Close()
	}()
	resp, body = send(t, c, "POST", f.base+"/chunked", "app.test", pr, nil)
	if e := decodeEcho(t, body); resp.StatusCode != 200 || e.Body != "chunk one, chunk two" {
		t.Errorf("chunked POST: status %d, backend saw body %q", resp.StatusCode, e.Body)
	}
	if n := seen.Load(); n != 4 {
		t.Errorf("the Handler saw r.TLS on %d of 4 requests", n)
	}
}

// TestTLSFrontEndHTTP2 negotiates h2 with ALPN and is served HTTP/2 by the
// fallback server, with r.TLS and X-Forwarded-Proto https, by Go's client
// and by curl.
func TestTLSFrontEndHTTP2(t *testing.T) {
	_, addr := startBackend(t, echoHandler())
	var seen atomic.Int32
	h := proxy.New(proxy.Options{Resolve: tlsSeen(&seen)})
	h.Swap(table(entry{static("app", proxy.NewBackend("app-1", addr, false)), catchAll}))
	f := startTLSFront(t, h, proxy.H1Options{})
	c := f.client(t, true)
	for _, path := range []string{"/a", "/b"} {
		resp, body := get(t, c, f.base+path, "app.test")
		if resp.ProtoMajor != 2 || resp.StatusCode != 200 {
			t.Fatalf("GET %s: %s %d, want HTTP/2 200", path, resp.Proto, resp.StatusCode)
		}
		if e := decodeEcho(t, body); e.Header.Get("X-Forwarded-Proto") != "https" || e.URI != path {
			t.Errorf("GET %s: backend saw %q, X-Forwarded-Proto %q", path, e.URI, e.Header.Get("X-Forwarded-Proto"))
		}
	}
	resp, body := send(t, c, "POST", f.base+"/post", "app.test", strings.NewReader("over h2"), nil)
	if e := decodeEcho(t, body); resp.ProtoMajor != 2 || e.Body != "over h2" {
		t.Errorf("POST over %s: backend saw body %q", resp.Proto, e.Body)
	}
	if n := seen.Load(); n != 3 {
		t.Errorf("the Handler saw r.TLS on %d of 3 requests", n)
	}

	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Skip("no curl")
	}
	out, err := exec.Command(curl, "--http2", "-k", "-sS", "--max-time", "10", "-H", "Host: app.test",
		"-o", os.DevNull, "-w", "%{http_version} %{http_code}", f.base+"/curl").CombinedOutput()
	if err != nil || string(out) != "2 200" {
		t.Errorf("curl --http2: %q, %v; want \"2 200\"", out, err)
	}
}

// TestTLSWebsocketAcrossCertSwap holds a websocket over TLS (handed to
// net/http by the front end) open while GetCertificate starts returning
// another certificate: new handshakes see the new one, the websocket still
// echoes, and the backend saw the upgrade as https.
func TestTLSWebsocketAcrossCertSwap(t *testing.T) {
	var proto atomic.Value
	_, addr := startBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		proto.Store(r.Header.Get("X-Forwarded-Proto"))
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		for {
			typ, msg, err := c.Read(r.Context())
			if err != nil {
				return
			}
			if c.Write(r.Context(), typ, msg) != nil {
				return
			}
		}
	}))
	h := proxy.New(proxy.Options{})
	h.Swap(table(entry{static("ws", proxy.NewBackend("ws-1", addr, false)), catchAll}))
	f := startTLSFront(t, h, proxy.H1Options{})
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()

	var serial atomic.Int64
	tr := &http.Transport{TLSClientConfig: &tls.Config{
		InsecureSkipVerify: true, // the certificate changes: VerifyConnection records which one
		VerifyConnection: func(cs tls.ConnectionState) error {
			serial.Store(cs.PeerCertificates[0].SerialNumber.Int64())
			return nil
		},
	}}
	t.Cleanup(tr.CloseIdleConnections)
	ws, _, err := websocket.Dial(ctx, "wss://"+f.addr+"/ws", &websocket.DialOptions{HTTPClient: &http.Client{Transport: tr}, Host: "ws.test"})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	echo := func(msg string) {
		t.Helper()
		if err := ws.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
			t.Fatal(err)
		}
		_, got, err := ws.Read(ctx)
		if err != nil || string(got) != msg {
			t.Fatalf("echo of %q: %q, %v", msg, got, err)
		}
	}
	echo("before")
	if serial.Load() != 1 || proto.Load() != "https" {
		t.Fatalf("websocket over certificate %d, backend saw X-Forwarded-Proto %v", serial.Load(), proto.Load())
	}

	next, _ := testCert(t, 2)
	f.swap.cur.Store(&next)
	tc, err := tls.Dial("tcp", f.addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	got := tc.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
	tc.Close()
	if got != 2 {
		t.Errorf("a handshake after the swap got certificate %d, want 2", got)
	}
	echo("after the swap")
	ws.Close(websocket.StatusNormalClosure, "")
}

// TestTLSEventStream relays a server-sent event stream over TLS as it
// comes, over HTTP/1.1, HTTP/2 and HTTP/3: the first event reaches the
// client before the backend sends the second.
func TestTLSEventStream(t *testing.T) {
	next := make(chan struct{})
	_, addr := startBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: one\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-next:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, "data: two\n\n")
	}))
	h := proxy.New(proxy.Options{})
	h.Swap(table(entry{static("sse", proxy.NewBackend("sse-1", addr, false)), catchAll}))
	f := startTLSFront(t, h, proxy.H1Options{})
	h3base := "https://" + startH3(t, h, f)
	for _, tc := range []struct {
		c    *http.Client
		base string
	}{{f.client(t, false), f.base}, {f.client(t, true), f.base}, {h3Client(t, f), h3base}} {
		c := tc.c
		ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
		req, _ := http.NewRequestWithContext(ctx, "GET", tc.base+"/events", nil)
		req.Host = "sse.test"
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(resp.Body)
		line, err := br.ReadString('\n')
		if err != nil || line != "data: one\n" {
			t.Fatalf("%s: first event %q, %v", resp.Proto, line, err)
		}
		select {
		case next <- struct{}{}: // the backend's second event
		case <-ctx.Done():
			t.Fatal("the backend did not wait for the second event")
		}
		rest, _ := io.ReadAll(br)
		if string(rest) != "\ndata: two\n\n" {
			t.Errorf("%s: rest of the stream %q", resp.Proto, rest)
		}
		resp.Body.Close()
		cancel()
	}
}

// TestTLSHandshakeTimeout closes a connection that never starts its
// handshake once the header timeout has passed, and one that speaks
// plaintext HTTP is told so.
func TestTLSHandshakeTimeout(t *testing.T) {
	h := proxy.New(proxy.Options{})
	f := startTLSFront(t, h, proxy.H1Options{ReadHeaderTimeout: 100 * time.Millisecond})
	c, err := net.Dial("tcp", f.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(hangGuard))
	n, err := c.Read(make([]byte, 1))
	if n != 0 || err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("a silent client read %d bytes, %v; want the connection closed", n, err)
	}

	p, err := net.Dial("tcp", f.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.SetDeadline(time.Now().Add(hangGuard))
	io.WriteString(p, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	b, _ := io.ReadAll(p)
	if !strings.HasPrefix(string(b), "HTTP/1.0 400 Bad Request") {
		t.Errorf("plaintext HTTP on the TLS port got %q", b)
	}
}

// TestTLSALPNChallengeCloses ends a connection whose handshake negotiated
// acme-tls/1 once the handshake is done: the certificate answered.
func TestTLSALPNChallengeCloses(t *testing.T) {
	h := proxy.New(proxy.Options{})
	cert, _ := testCert(t, 7)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	conf := &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1", "acme-tls/1"}}
	fe := h.NewH1Server(&http.Server{Handler: h}, proxy.H1Options{TLSConfig: conf})
	go fe.Serve(ln)
	t.Cleanup(func() { fe.Close() })
	c, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"acme-tls/1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if p := c.ConnectionState().NegotiatedProtocol; p != "acme-tls/1" {
		t.Fatalf("negotiated %q", p)
	}
	c.SetDeadline(time.Now().Add(hangGuard))
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	b, err := io.ReadAll(c)
	if len(b) != 0 || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("after an acme-tls/1 handshake the server sent %q (%v); want a close", b, err)
	}
}

// TestRedirectHTTPS sends plaintext requests to https with a 308 that
// keeps path and query, names the https port unless it is 443, and lets
// the ACME challenge hook answer first.
func TestRedirectHTTPS(t *testing.T) {
	for _, tc := range []struct {
		port int
		want string
	}{{8443, "https://app.test:8443/a/b%20c?x=1&y=2"}, {443, "https://app.test/a/b%20c?x=1&y=2"}} {
		h := proxy.New(proxy.Options{
			RedirectHTTPS: true, HTTPSPort: tc.port,
			Challenge: func(w http.ResponseWriter, r *http.Request) bool {
				if r.URL.Path != proxy.ACMEChallengePrefix+"token" {
					return false
				}
				io.WriteString(w, "token.key")
				return true
			},
		})
		paddr, _ := startH1(t, h, proxy.H1Options{})
		c := newClient(t)
		resp, _ := send(t, c, "POST", "http://"+paddr+"/a/b%20c?x=1&y=2", "app.test:6188", strings.NewReader("body"), nil)
		if resp.StatusCode != http.StatusPermanentRedirect || resp.Header.Get("Location") != tc.want {
			t.Errorf("port %d: %d to %q, want 308 to %q", tc.port, resp.StatusCode, resp.Header.Get("Location"), tc.want)
		}
		resp, body := get(t, c, "http://"+paddr+proxy.ACMEChallengePrefix+"token", "app.test")
		if resp.StatusCode != 200 || body != "token.key" {
			t.Errorf("the challenge got %d %q, want the hook's answer", resp.StatusCode, body)
		}
		resp, _ = get(t, c, "http://"+paddr+proxy.ACMEChallengePrefix+"other", "app.test")
		if resp.StatusCode != http.StatusPermanentRedirect {
			t.Errorf("a challenge the hook did not answer got %d, want the redirect", resp.StatusCode)
		}
		if resp.Header.Get("Strict-Transport-Security") != "" {
			t.Error("a plaintext response carries Strict-Transport-Security")
		}
	}
	h := proxy.New(proxy.Options{RedirectHTTPS: true})
	paddr, _ := startH1(t, h, proxy.H1Options{})
	resp, _ := get(t, newClient(t), "http://"+paddr+"/x", "[::1]:80")
	if resp.Header.Get("Location") != "https://[::1]/x" {
		t.Errorf("IPv6 host: Location %q", resp.Header.Get("Location"))
	}
}

// TestHSTSOnlyOverTLS adds Strict-Transport-Security and Alt-Svc to
// responses over TLS (HTTP/1.1 and HTTP/2, the front end's own answers
// too), never to plaintext ones, and leaves a backend's own value alone.
func TestHSTSOnlyOverTLS(t *testing.T) {
	const hsts, alt = "max-age=63072000; includeSubDomains", `h3=":6189"; ma=86400`
	_, addr := startBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/own" {
			w.Header().Set("Strict-Transport-Security", "max-age=0")
		}
		if r.URL.Path == "/hints" {
			w.Header().Set("Link", "</a.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			w.Header().Del("Link")
		}
		io.WriteString(w, "ok")
	}))
	h := proxy.New(proxy.Options{HSTS: hsts, AltSvc: alt})
	h.Swap(table(entry{static("app", proxy.NewBackend("app-1", addr, false)), catchAll}))
	f := startTLSFront(t, h, proxy.H1Options{})
	for _, h2 := range []bool{false, true} {
		c := f.client(t, h2)
		resp, _ := get(t, c, f.base+"/", "app.test")
		if resp.Header.Get("Strict-Transport-Security") != hsts || resp.Header.Get("Alt-Svc") != alt {
			t.Errorf("%s: HSTS %q, Alt-Svc %q", resp.Proto, resp.Header.Get("Strict-Transport-Security"), resp.Header.Get("Alt-Svc"))
		}
		// The final response after a forwarded 103 keeps them too.
		resp, _ = get(t, c, f.base+"/hints", "app.test")
		if resp.StatusCode != 200 || resp.Header.Get("Strict-Transport-Security") != hsts || resp.Header.Get("Alt-Svc") != alt {
			t.Errorf("%s after a 103: %d, HSTS %q, Alt-Svc %q", resp.Proto, resp.StatusCode, resp.Header.Get("Strict-Transport-Security"), resp.Header.Get("Alt-Svc"))
		}
		resp, _ = get(t, c, f.base+"/own", "app.test")
		if v := resp.Header.Values("Strict-Transport-Security"); len(v) != 1 || v[0] != "max-age=0" {
			t.Errorf("%s: the backend's own HSTS became %q", resp.Proto, v)
		}
		resp, _ = send(t, c, "TRACE", f.base+"/", "app.test", nil, nil) // berth's own 405
		if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Strict-Transport-Security") != hsts {
			t.Errorf("%s: berth's own %d has HSTS %q", resp.Proto, resp.StatusCode, resp.Header.Get("Strict-Transport-Security"))
		}
	}
	paddr, _ := startH1(t, h, proxy.H1Options{})
	resp, _ := get(t, newClient(t), "http://"+paddr+"/", "app.test")
	if resp.StatusCode != 200 || resp.Header.Get("Strict-Transport-Security") != "" || resp.Header.Get("Alt-Svc") != "" {
		t.Errorf("plaintext: %d, HSTS %q, Alt-Svc %q", resp.StatusCode, resp.Header.Get("Strict-Transport-Security"), resp.Header.Get("Alt-Svc"))
	}
}

// startH3 serves h over HTTP/3 on a loopback UDP socket with the front's
// certificate, and returns its address.
func startH3(t testing.TB, h *proxy.Handler, f *tlsFront) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := h.NewH3Server(&tls.Config{GetCertificate: f.swap.get}, proxy.H3Options{})
	served := make(chan error, 1)
	go func() { served <- s.Serve(pc) }()
	t.Cleanup(func() {
		s.Close()
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("H3Server.Serve returned %v", err)
		}
		pc.Close()
	})
	return pc.LocalAddr().String()
}

// h3Client returns an HTTP/3 client trusting f's certificate.
func h3Client(t testing.TB, f *tlsFront) *http.Client {
	tr := &http3.Transport{TLSClientConfig: &tls.Config{RootCAs: f.roots}}
	t.Cleanup(func() { tr.Close() })
	return &http.Client{Transport: tr}
}

// TestHTTP3 reaches a routed backend over HTTP/3, with r.TLS and
// X-Forwarded-Proto https and a streamed response, while the TCP listener's
// responses advertise HTTP/3 in Alt-Svc; CONNECT is refused.
func TestHTTP3(t *testing.T) {
	_, addr := startBackend(t, echoHandler())
	var seen atomic.Int32
	h := proxy.New(proxy.Options{Resolve: tlsSeen(&seen), AltSvc: `h3=":6189"; ma=86400`, HSTS: "max-age=300"})
	h.Swap(table(entry{static("app", proxy.NewBackend("app-1", addr, false)), catchAll}))
	f := startTLSFront(t, h, proxy.H1Options{})
	resp, _ := get(t, f.client(t, false), f.base+"/", "app.test")
	if resp.Header.Get("Alt-Svc") != `h3=":6189"; ma=86400` {
		t.Errorf("the TCP response's Alt-Svc is %q", resp.Header.Get("Alt-Svc"))
	}
	h3addr := startH3(t, h, f)
	c := h3Client(t, f)
	resp, body := get(t, c, "https://"+h3addr+"/over/h3?q=1", "app.test")
	if resp.ProtoMajor != 3 || resp.StatusCode != 200 {
		t.Fatalf("%s %d, want HTTP/3 200", resp.Proto, resp.StatusCode)
	}
	e := decodeEcho(t, body)
	if e.URI != "/over/h3?q=1" || e.Header.Get("X-Forwarded-Proto") != "https" {
		t.Errorf("backend saw %q with X-Forwarded-Proto %q", e.URI, e.Header.Get("X-Forwarded-Proto"))
	}
	if resp.Header.Get("Alt-Svc") != "" || resp.Header.Get("Strict-Transport-Security") != "max-age=300" {
		t.Errorf("HTTP/3 response: Alt-Svc %q, HSTS %q", resp.Header.Get("Alt-Svc"), resp.Header.Get("Strict-Transport-Security"))
	}
	resp, body = send(t, c, "POST", "https://"+h3addr+"/post", "app.test", strings.NewReader("h3 body"), nil)
	if e := decodeEcho(t, body); resp.StatusCode != 200 || e.Body != "h3 body" {
		t.Errorf("POST over HTTP/3: %d, backend saw %q", resp.StatusCode, e.Body)
	}
	if n := seen.Load(); n != 3 {
		t.Errorf("the Handler saw r.TLS on %d of 3 requests", n)
	}
	req, _ := http.NewRequest(http.MethodConnect, "https://"+h3addr, nil)
	req.Host = "app.test:443"
	if resp, err := c.Do(req); err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotImplemented {
			t.Errorf("CONNECT over HTTP/3: %d, want 501", resp.StatusCode)
		}
	} else {
		t.Logf("CONNECT over HTTP/3 refused by the client: %v", err)
	}
}

// TestTLSShutdown closes an idle kept-alive TLS connection and one still in
// its handshake when the server shuts down, and Shutdown returns once they
// are gone.
func TestTLSShutdown(t *testing.T) {
	_, addr := startBackend(t, echoHandler())
	h := proxy.New(proxy.Options{})
	h.Swap(table(entry{static("app", proxy.NewBackend("app-1", addr, false)), catchAll}))
	f := startTLSFront(t, h, proxy.H1Options{})
	idle, err := tls.Dial("tcp", f.addr, &tls.Config{RootCAs: f.roots, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	idle.SetDeadline(time.Now().Add(hangGuard))
	io.WriteString(idle, "GET / HTTP/1.1\r\nHost: app.test\r\n\r\n")
	br := bufio.NewReader(idle)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("%v, %v", resp, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	silent, err := net.Dial("tcp", f.addr) // never says hello
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()

	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	if err := f.fe.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if n, err := br.ReadByte(); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("the idle TLS connection read %v, %v after Shutdown; want it closed", n, err)
	}
	silent.SetReadDeadline(time.Now().Add(hangGuard))
	if _, err := silent.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("the connection in its handshake read %v after Shutdown; want it closed", err)
	}
}

// TestTLSConnectionsNotParked keeps a TLS connection idle past ParkAfter:
// it is not parked (the parker watches the socket, and would resume the
// connection without its TLS state), so its next request is served.
func TestTLSConnectionsNotParked(t *testing.T) {
	_, addr := startBackend(t, echoHandler())
	h := proxy.New(proxy.Options{})
	h.Swap(table(entry{static("app", proxy.NewBackend("app-1", addr, false)), catchAll}))
	f := startTLSFront(t, h, proxy.H1Options{ParkAfter: time.Millisecond, IdleTimeout: time.Minute})
	c, err := tls.Dial("tcp", f.addr, &tls.Config{RootCAs: f.roots, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(hangGuard))
	br := bufio.NewReader(c)
	for i := range 2 {
		if i == 1 {
			time.Sleep(50 * time.Millisecond) // well past ParkAfter (not a timing assertion)
		}
		io.WriteString(c, "GET /n HTTP/1.1\r\nHost: app.test\r\n\r\n")
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if e := decodeEcho(t, string(b)); resp.StatusCode != 200 || e.Header.Get("X-Forwarded-Proto") != "https" {
			t.Errorf("request %d: %d, X-Forwarded-Proto %q", i, resp.StatusCode, e.Header.Get("X-Forwarded-Proto"))
		}
	}
}

// TestTLSHeaderValuesChecked ignores an HSTS or Alt-Svc value that could
// split a response head, rather than write it.
func TestTLSHeaderValuesChecked(t *testing.T) {
	h := proxy.New(proxy.Options{HSTS: "max-age=1\r\nX-Injected: yes", AltSvc: "h3=\":1\"\n"})
	f := startTLSFront(t, h, proxy.H1Options{})
	resp, _ := get(t, f.client(t, false), f.base+"/", "app.test")
	if resp.StatusCode != http.StatusNotFound || resp.Header.Get("X-Injected") != "" ||
		resp.Header.Get("Strict-Transport-Security") != "" || resp.Header.Get("Alt-Svc") != "" {
		t.Errorf("%d with header %v", resp.StatusCode, resp.Header)
	}
}
