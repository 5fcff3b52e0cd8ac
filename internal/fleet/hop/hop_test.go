package hop

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/berth-dev/berth/internal/fleet/fleetca"
)

// seen is what echo saw of a request.
type seen struct {
	Origin, Header, Method, Path, Query, Host, XFF, Body, Proto string
	Hopped                                                      bool
}

// echo answers with what it saw of the request.
var echo = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	o, ok := Origin(r.Context())
	json.NewEncoder(w).Encode(seen{Origin: o, Hopped: ok, Header: r.Header.Get(Header), Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery,
		Host: r.Host, XFF: r.Header.Get("X-Forwarded-For"), Body: string(b), Proto: r.Proto})
})

// front is host A's public listener: it forwards every request to peer
// over the hop.
func front(t *testing.T, fw *Forwarder, peer, addr string) *httptest.Server {
	srv := httptest.NewServer(Public(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fw.Forward(w, r, peer, addr)
	})))
	t.Cleanup(srv.Close)
	return srv
}

func eachProtocol(t *testing.T, fn func(t *testing.T, mod func(*Config), proto string)) {
	for _, p := range []struct {
		name  string
		h1    bool
		proto string
	}{{"h2", false, "HTTP/2.0"}, {"http1", true, "HTTP/1.1"}} {
		t.Run(p.name, func(t *testing.T) {
			fn(t, func(c *Config) { c.HTTP2 = !p.h1 }, p.proto)
		})
	}
}

// TestHopReachesPeer: a request forwarded by host alpha reaches beta's
// local handler with alpha as its authenticated origin, in Origin and
// X-Berth-Hop (a header alpha's client sent is replaced), with its method,
// path, query, Host, body and X-Forwarded-For; over h2 and HTTP/1.1, the
// connection reused.
func TestHopReachesPeer(t *testing.T) {
	f := newFleet(t, "alpha", "beta")
	eachProtocol(t, func(t *testing.T, mod func(*Config), proto string) {
		addr := f.serve(t, "beta", echo, mod)
		fw := NewForwarder(f.transport(t, "alpha", mod), nil)
		fr := front(t, fw, "beta", addr)
		for i := range 3 {
			req, _ := http.NewRequest("POST", fr.URL+"/a/b?x=1&y=2", strings.NewReader(fmt.Sprint("body ", i)))
			req.Host = "app.example.test"
			req.Header.Set("X-Forwarded-For", "198.51.100.7")
			req.Header.Set(Header, "gamma")
			resp, err := fr.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var s seen
			err = json.NewDecoder(resp.Body).Decode(&s)
			resp.Body.Close()
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("%d %v", resp.StatusCode, err)
			}
			want := seen{Origin: "alpha", Hopped: true, Header: "alpha", Method: "POST", Path: "/a/b", Query: "x=1&y=2", Host: "app.example.test",
				XFF: "198.51.100.7, 127.0.0.1", Body: fmt.Sprint("body ", i), Proto: proto}
			if s != want {
				t.Fatalf("beta saw %+v\nwant %+v", s, want)
			}
		}
	})
}

// TestHopRefusesStrangers: beta's hop listener refuses a client with no
// certificate and one with a certificate of another fleet's CA; alpha's
// client refuses a server of another CA, and a fleet host's server dialed
// as another host (gamma's certificate where beta was expected).
func TestHopRefusesStrangers(t *testing.T) {
	f := newFleet(t, "alpha", "beta", "gamma")
	other := newFleet(t, "alpha", "beta")
	reached := make(chan struct{}, 10)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached <- struct{}{} })
	beta := f.serve(t, "beta", h, nil)

	get := func(c *http.Client, url string) error {
		resp, err := c.Get(url)
		if err == nil {
			resp.Body.Close()
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return err
	}
	// No client certificate: the fleet CA trusted, but nothing presented.
	noCert := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: f.cfg["beta"].CAs, ServerName: "beta", MinVersion: tls.VersionTLS13}}}
	if err := get(noCert, "https://"+beta+"/"); err == nil || !strings.Contains(err.Error(), "certificate required") {
		t.Errorf("no client certificate: %v", err)
	}
	// Another fleet's alpha, which trusts our CA, presents its own.
	stranger := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: f.cfg["beta"].CAs, ServerName: "beta", MinVersion: tls.VersionTLS13,
		Certificates: []tls.Certificate{other.cfg["alpha"].Cert}}}}
	if err := get(stranger, "https://"+beta+"/"); err == nil || !strings.Contains(err.Error(), "unknown certificate authority") {
		t.Errorf("another CA's client certificate: %v", err)
	}
	// TLS 1.2 is refused.
	old := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: f.cfg["beta"].CAs, ServerName: "beta", MaxVersion: tls.VersionTLS12,
		Certificates: []tls.Certificate{f.cfg["alpha"].Cert}}}}
	if err := get(old, "https://"+beta+"/"); err == nil || !strings.Contains(err.Error(), "protocol version") {
		t.Errorf("TLS 1.2: %v", err)
	}

	alpha := &http.Client{Transport: f.transport(t, "alpha", nil)}
	hopGet := func(peer, addr string) error {
		req, _ := http.NewRequestWithContext(WithPeer(context.Background(), peer), "GET", "https://"+addr+"/", nil)
		resp, err := alpha.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	}
	// gamma's genuine server, dialed as beta.
	gamma := f.serve(t, "gamma", h, nil)
	if err := hopGet("beta", gamma); err == nil || !strings.Contains(err.Error(), "certificate is valid for gamma, not beta") {
		t.Errorf("gamma dialed as beta: %v", err)
	}
	// Another fleet's beta.
	strangerBeta := other.serve(t, "beta", h, nil)
	if err := hopGet("beta", strangerBeta); err == nil || !strings.Contains(err.Error(), "unknown authority") {
		t.Errorf("another fleet's beta: %v", err)
	}
	// The right peer, dialed as itself, is reached.
	if err := hopGet("gamma", gamma); err != nil {
		t.Fatalf("gamma as gamma: %v", err)
	}
	if err := hopGet("", gamma); err == nil || !strings.Contains(err.Error(), "WithPeer") {
		t.Errorf("no peer named: %v", err)
	}
	if n := len(reached); n != 1 {
		t.Errorf("the handlers were reached %d times, want once (gamma as gamma)", n)
	}
}

// TestForgedHopHeader: a public client's X-Berth-Hop reaches nobody as an
// origin: Public strips it and Origin is unset.
func TestForgedHopHeader(t *testing.T) {
	pub := httptest.NewServer(Public(echo))
	defer pub.Close()
	req, _ := http.NewRequest("GET", pub.URL+"/", nil)
	req.Header.Set(Header, "alpha")
	resp, err := pub.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var s seen
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		t.Fatal(err)
	}
	if s.Hopped || s.Origin != "" || s.Header != "" {
		t.Fatalf("a forged header: %+v", s)
	}
	// StripForged keeps the hop server's own.
	r := httptest.NewRequest("GET", "/", nil).WithContext(WithOrigin(context.Background(), "alpha"))
	r.Header.Set(Header, "alpha")
	StripForged(r)
	if r.Header.Get(Header) != "alpha" {
		t.Fatal("StripForged removed an authenticated hop's header")
	}
}

// TestHopLoop: beta's gateway, wrongly thinking alpha holds the replica,
// does not send a hopped request back: the client gets a 502 in the JSON
// error envelope, and alpha's gateway is reached once.
func TestHopLoop(t *testing.T) {
	f := newFleet(t, "alpha", "beta")
	fwA := NewForwarder(f.transport(t, "alpha", nil), nil)
	fwB := NewForwarder(f.transport(t, "beta", nil), nil)
	var alphaHop, betaAddr string
	n := make(chan struct{}, 10)
	alphaGW := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n <- struct{}{}
		fwA.Forward(w, r, "beta", betaAddr)
	})
	alphaHop = f.serve(t, "alpha", alphaGW, nil)
	betaGW := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fwB.Forward(w, r, "alpha", alphaHop) })
	betaAddr = f.serve(t, "beta", betaGW, nil)
	fr := httptest.NewServer(Public(alphaGW))
	defer fr.Close()
	resp, err := fr.Client().Get(fr.URL + "/x")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var env struct{ Error, Code string }
	if err := json.NewDecoder(resp.Body).Decode(&env); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusBadGateway || env.Code != "hop_loop" || !strings.Contains(env.Error, "from host alpha") {
		t.Fatalf("%d %+v", resp.StatusCode, env)
	}
	if len(n) != 1 {
		t.Fatalf("alpha's gateway was reached %d times, want once", len(n))
	}
}

// TestHopStreams: a request body and a response body stream both ways
// through the hop (each line is answered before the next is sent), and a
// websocket is upgraded and echoed through it; over h2 and HTTP/1.1.
func TestHopStreams(t *testing.T) {
	f := newFleet(t, "alpha", "beta")
	local := http.NewServeMux()
	local.HandleFunc("/stream", func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		rc.EnableFullDuplex()
		w.WriteHeader(200)
		rc.Flush()
		sc := bufio.NewScanner(r.Body)
		for sc.Scan() {
			fmt.Fprintf(w, "echo %s\n", sc.Text())
			rc.Flush()
		}
	})
	local.HandleFunc("/ws", func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		for {
			typ, b, err := c.Read(r.Context())
			if err != nil {
				return
			}
			if err := c.Write(r.Context(), typ, append([]byte("echo "), b...)); err != nil {
				return
			}
		}
	})
	eachProtocol(t, func(t *testing.T, mod func(*Config), _ string) {
		addr := f.serve(t, "beta", local, mod)
		fr := front(t, NewForwarder(f.transport(t, "alpha", mod), nil), "beta", addr)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()

		pr, pw := io.Pipe()
		req, _ := http.NewRequestWithContext(ctx, "POST", fr.URL+"/stream", pr)
		resp, err := fr.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		rd := bufio.NewReader(resp.Body)
		for i := range 3 {
			fmt.Fprintf(pw, "line %d\n", i)
			got, err := rd.ReadString('\n')
			if err != nil || got != fmt.Sprintf("echo line %d\n", i) {
				t.Fatalf("line %d: %q %v", i, got, err)
			}
		}
		pw.Close()
		if rest, _ := io.ReadAll(rd); len(rest) != 0 {
			t.Fatalf("after the body ended: %q", rest)
		}

		c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(fr.URL, "http")+"/ws", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer c.CloseNow()
		for i := range 3 {
			if err := c.Write(ctx, websocket.MessageText, fmt.Appendf(nil, "hi %d", i)); err != nil {
				t.Fatal(err)
			}
			_, b, err := c.Read(ctx)
			if err != nil || string(b) != fmt.Sprintf("echo hi %d", i) {
				t.Fatalf("websocket: %q %v", b, err)
			}
		}
		c.Close(websocket.StatusNormalClosure, "")
	})
}

// TestConfigRefusals: a configuration without the CA, the certificate or
// the handler, or whose certificate is not this host's, is refused naming
// what is wrong.
func TestConfigRefusals(t *testing.T) {
	f := newFleet(t, "alpha", "beta")
	other := newFleet(t, "alpha")
	a := f.cfg["alpha"]
	for name, c := range map[string]struct {
		cfg  Config
		want string
	}{
		"no CA":         {Config{Cert: a.Cert}, "CAs"},
		"no cert":       {Config{CAs: a.CAs}, "Cert"},
		"another host":  {Config{Cert: a.Cert, CAs: a.CAs, HostID: "beta"}, "not host \"beta\""},
		"another fleet": {Config{Cert: other.cfg["alpha"].Cert, CAs: a.CAs}, "not a certificate of the fleet CA"},
		"bad timeout":   {Config{Cert: a.Cert, CAs: a.CAs, IdleTimeout: -1}, "negative"},
	} {
		if _, err := NewTransport(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := NewServer(ServerConfig{Config: a}); err == nil || !strings.Contains(err.Error(), "Handler") {
		t.Errorf("no handler: %v", err)
	}
	// Bad peer arguments to Forward answer 502.
	fw := NewForwarder(f.transport(t, "alpha", nil), nil)
	for _, p := range [][2]string{{"", "127.0.0.1:1"}, {"beta", "nope"}} {
		w := httptest.NewRecorder()
		fw.Forward(w, httptest.NewRequest("GET", "/", nil), p[0], p[1])
		if w.Code != http.StatusBadGateway || !strings.Contains(w.Body.String(), "hop_failed") {
			t.Errorf("Forward(%q, %q): %d %s", p[0], p[1], w.Code, w.Body)
		}
	}
	// A peer that is not listening: 502 with the envelope.
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := l.Addr().String()
	l.Close()
	w := httptest.NewRecorder()
	fw.Forward(w, httptest.NewRequest("GET", "/", nil), "beta", dead)
	if w.Code != http.StatusBadGateway || !strings.Contains(w.Body.String(), "did not answer over the hop") {
		t.Errorf("a dead peer: %d %s", w.Code, w.Body)
	}
}

// TestHopRefusesOldHostCert: a host certificate of the fleet CA as berth
// issued before the hop (client auth only, no SAN for the host id) is
// refused by the hop server, and by NewTransport with re-join or renew.
func TestHopRefusesOldHostCert(t *testing.T) {
	f := newFleet(t, "alpha", "beta")
	fd := fleetca.Dir(f.dir)
	caPEM, err := os.ReadFile(filepath.Join(fd, fleetca.CACert))
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(caPEM)
	caCrt, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	sk, err := fleetca.LoadSecretKey("", f.dir)
	if err != nil {
		t.Fatal(err)
	}
	caKey, _, err := fleetca.LoadCAKey(f.dir, sk)
	if err != nil {
		t.Fatal(err)
	}
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "delta"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, caCrt, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	old := tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	if _, err := NewTransport(Config{Cert: old, CAs: f.cfg["alpha"].CAs}); err == nil || !strings.Contains(err.Error(), "re-join") {
		t.Fatalf("NewTransport with an old certificate: %v", err)
	}
	var reached atomic.Bool
	beta := f.serve(t, "beta", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached.Store(true) }), nil)
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: f.cfg["alpha"].CAs, ServerName: "beta", MinVersion: tls.VersionTLS13,
		Certificates: []tls.Certificate{old}}}}
	resp, err := c.Get("https://" + beta + "/")
	if err == nil {
		resp.Body.Close()
		t.Fatalf("an old client-only certificate got %d", resp.StatusCode)
	}
	if !strings.Contains(err.Error(), "bad certificate") {
		t.Fatalf("an old client-only certificate: %v", err)
	}
	if reached.Load() {
		t.Fatal("the handler was reached")
	}
}
