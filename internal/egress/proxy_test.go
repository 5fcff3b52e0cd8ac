package egress

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// resolver maps test names to addresses; each answer may change from
// call to call (answers[name][n] is the n-th answer, the last repeating).
type resolver struct {
	mu      sync.Mutex
	answers map[string][][]netip.Addr
	calls   map[string]int
}

func (r *resolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	as, ok := r.answers[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	n := r.calls[host]
	r.calls[host]++
	return as[min(n, len(as)-1)], nil
}

func (r *resolver) count(host string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls[host]
}

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

// harness is a proxy on loopback (127.0.0.1 exempt from the platform
// deny set) with grants held in a map and facts collected.
type harness struct {
	t      *testing.T
	proxy  *Proxy
	res    *resolver
	mu     sync.Mutex
	grants map[string]Grant // by grant id
	gerr   map[string]error
	events []Event
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	h := &harness{t: t, grants: map[string]Grant{}, gerr: map[string]error{},
		res: &resolver{answers: map[string][][]netip.Addr{}, calls: map[string]int{}}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(Options{
		Key:  bytes.Repeat([]byte{7}, 32),
		Addr: ln.Addr().String(),
		Grant: func(computerID, id string) (Grant, error) {
			h.mu.Lock()
			defer h.mu.Unlock()
			g, ok := h.grants[computerID+"/"+id]
			if !ok {
				return Grant{}, errors.New("unknown grant")
			}
			return g, h.gerr[computerID+"/"+id]
		},
		Record: func(_ context.Context, e Event) {
			h.mu.Lock()
			h.events = append(h.events, e)
			h.mu.Unlock()
		},
		Resolver:      h.res,
		AllowLoopback: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	go p.Serve(ln)
	t.Cleanup(func() { p.Close() })
	h.proxy = p
	return h
}

func (h *harness) grant(computerID, id, egress string, prov Provenance) {
	h.mu.Lock()
	h.grants[computerID+"/"+id] = Grant{Egress: []byte(egress), Provenance: prov}
	h.mu.Unlock()
}

func (h *harness) resolve(name string, answers ...[]netip.Addr) {
	h.res.mu.Lock()
	h.res.answers[name] = answers
	h.res.mu.Unlock()
}

// takeEvents returns the events recorded so far and forgets them.
func (h *harness) takeEvents() []Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := h.events
	h.events = nil
	return out
}

// client is an HTTP client configured as a process of computerID working
// for s would be, through its HTTP_PROXY.
func (h *harness) client(computerID string, s Subject, roots *tls.Config) *http.Client {
	env := h.proxy.Env(computerID, s)
	u, err := url.Parse(env["HTTP_PROXY"])
	if err != nil {
		h.t.Fatal(err)
	}
	if env["HTTPS_PROXY"] != env["HTTP_PROXY"] || env["http_proxy"] != env["HTTP_PROXY"] {
		h.t.Fatalf("proxy variables differ: %v", env)
	}
	return &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(u), TLSClientConfig: roots, DisableKeepAlives: true}}
}

// upstream is a loopback HTTP server that answers with its path and
// counts requests.
func upstream(t *testing.T, addr string) (*httptest.Server, *atomic.Int64, uint16) {
	t.Helper()
	var n atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		if r.Header.Get("Proxy-Authorization") != "" {
			t.Error("the proxy credential reached the destination")
		}
		if r.URL.Path == "/teapot" {
			w.WriteHeader(http.StatusTeapot)
		}
		fmt.Fprintf(w, "hello from %s%s", r.Host, r.URL.Path)
	})
	srv := httptest.NewUnstartedServer(h)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("cannot listen on %s: %v", addr, err)
	}
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, &n, uint16(ln.Addr().(*net.TCPAddr).Port)
}

func get(t *testing.T, c *http.Client, u string) (int, string, http.Header) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		return 0, err.Error(), nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

func TestProxyHTTPPolicy(t *testing.T) {
	h := newHarness(t)
	_, hits, port := upstream(t, "127.0.0.1:0")
	prov := Provenance{Actor: "agent-7", Via: "planner"}
	h.grant("c1", "g1", fmt.Sprintf(`{"allow":["allowed.test","*.wild.test","127.0.0.0/8:%d"],"deny":["no.wild.test"]}`, port), prov)
	for _, n := range []string{"allowed.test", "a.wild.test", "no.wild.test", "wild.test", "other.test", "cidr.test"} {
		h.resolve(n, addrs("127.0.0.1"))
	}
	c := h.client("c1", Subject{GrantID: "g1"}, nil)
	tests := []struct {
		url    string
		status int
		host   string
	}{
		{fmt.Sprintf("http://allowed.test:%d/x", port), 200, "allowed.test"},
		{fmt.Sprintf("http://ALLOWED.test.:%d/teapot", port), 418, "allowed.test"},
		{fmt.Sprintf("http://a.wild.test:%d/", port), 200, "a.wild.test"},
		{fmt.Sprintf("http://no.wild.test:%d/", port), 403, "no.wild.test"},
		{fmt.Sprintf("http://wild.test:%d/", port), 200, "wild.test"}, // by the CIDR rule, on its port
		{fmt.Sprintf("http://other.test:%d/", port), 200, "other.test"},
		{fmt.Sprintf("http://127.0.0.1:%d/", port), 200, "127.0.0.1"},
		{fmt.Sprintf("http://unresolvable.test:%d/", port), 502, "unresolvable.test"},
	}
	for _, tt := range tests {
		before := hits.Load()
		status, body, hdr := get(t, c, tt.url)
		if status != tt.status {
			t.Errorf("GET %s: status %d (%s), want %d", tt.url, status, body, tt.status)
			continue
		}
		reached := hits.Load() > before
		if reached != (status < 400 || status == 418) {
			t.Errorf("GET %s: reached the destination = %v with status %d", tt.url, reached, status)
		}
		if status == 403 && hdr.Get("X-Berth-Egress") != "refused" {
			t.Errorf("GET %s: a refusal without X-Berth-Egress", tt.url)
		}
		if status == 200 && !strings.Contains(body, "hello from") {
			t.Errorf("GET %s: body %q", tt.url, body)
		}
		want := []Event{{ComputerID: "c1", Provenance: prov, Host: tt.host, Method: "GET", Status: tt.status}}
		if got := h.takeEvents(); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("GET %s: events %+v, want %+v", tt.url, got, want)
		}
	}
	// The port rule: the CIDR allows only its port; names are not allowed
	// on other ports.
	_, _, other := upstream(t, "127.0.0.1:0")
	if status, body, _ := get(t, c, fmt.Sprintf("http://other.test:%d/", other)); status != 403 {
		t.Errorf("another port: %d %s, want 403", status, body)
	}
	if status, _, _ := get(t, c, fmt.Sprintf("http://allowed.test:%d/", other)); status != 200 {
		t.Errorf("a name rule without a port: %d on another port, want 200", status)
	}
	// The policy refused no.wild.test before it was ever resolved.
	if n := h.res.count("no.wild.test"); n != 0 {
		t.Errorf("a name the policy denies was resolved %d times", n)
	}
}

func TestProxyConnect(t *testing.T) {
	h := newHarness(t)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "tls ok")
	}))
	srv.StartTLS()
	t.Cleanup(srv.Close)
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	roots := &tls.Config{RootCAs: srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs, ServerName: "example.com"}
	prov := Provenance{Actor: "agent-1"}
	h.grant("c1", "g1", `{"allow":["secure.test"]}`, prov)
	h.resolve("secure.test", addrs("127.0.0.1"))
	h.resolve("elsewhere.test", addrs("127.0.0.1"))
	c := h.client("c1", Subject{GrantID: "g1"}, roots)

	status, body, _ := get(t, c, fmt.Sprintf("https://secure.test:%d/", port))
	if status != http.StatusCreated || body != "tls ok" {
		t.Fatalf("through the tunnel: %d %q", status, body)
	}
	// The tunnel's fact is the CONNECT's, not the inner request's.
	want := []Event{{ComputerID: "c1", Provenance: prov, Host: "secure.test", Method: "CONNECT", Status: 200}}
	if got := h.takeEvents(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("events %+v, want %+v", got, want)
	}
	if _, body, _ := get(t, c, fmt.Sprintf("https://elsewhere.test:%d/", port)); !strings.Contains(body, "Forbidden") {
		t.Errorf("a refused CONNECT: %q, want a Forbidden error", body)
	}
	want = []Event{{ComputerID: "c1", Provenance: prov, Host: "elsewhere.test", Method: "CONNECT", Status: 403}}
	if got := h.takeEvents(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("events %+v, want %+v", got, want)
	}
}

func TestProxyPlatformDenySet(t *testing.T) {
	h := newHarness(t)
	_, hits, port := upstream(t, "127.0.0.1:0")
	h.grant("c1", "g1", `{"allow":["*"]}`, Provenance{Actor: "a"})
	c := h.client("c1", Subject{GrantID: "g1"}, nil)
	names := map[string]string{
		"rfc1918.test": "10.0.0.1", "rfc1918b.test": "172.16.5.4", "rfc1918c.test": "192.168.0.10",
		"metadata.test": "169.254.169.254", "cgnat.test": "100.64.0.1", "loop2.test": "127.0.0.2",
		"v6loop.test": "::1", "v6ula.test": "fd12::1", "mapped.test": "::ffff:10.0.0.1",
	}
	for n, a := range names {
		h.resolve(n, addrs(a))
		if status, body, _ := get(t, c, fmt.Sprintf("http://%s:%d/", n, port)); status != 403 {
			t.Errorf("%s (%s): %d %s, want 403", n, a, status, body)
		}
	}
	for _, lit := range []string{"10.0.0.1", "169.254.169.254", "100.64.0.1", "[::1]", "127.0.0.2"} {
		if status, body, _ := get(t, c, fmt.Sprintf("http://%s:%d/", lit, port)); status != 403 {
			t.Errorf("literal %s: %d %s, want 403", lit, status, body)
		}
	}
	// Port 25 is closed even on the exempt loopback address.
	h.resolve("mail.test", addrs("127.0.0.1"))
	if status, body, _ := get(t, c, "http://mail.test:25/"); status != 403 || !strings.Contains(body, "SMTP") {
		t.Errorf("port 25: %d %s, want 403 naming SMTP", status, body)
	}
	if hits.Load() != 0 {
		t.Errorf("%d requests reached the destination", hits.Load())
	}
	for _, e := range h.takeEvents() {
		if e.Status != 403 || e.Method != "GET" || e.Host == "" {
			t.Errorf("event %+v: want a 403 GET with its host", e)
		}
	}
}

func TestProxyRebinding(t *testing.T) {
	h := newHarness(t)
	// A server on 127.0.0.1 (exempt) and one on 127.0.0.2 (in the deny
	// set) on the same port: the name's first answer is the first, later
	// answers the second.
	_, good, port := upstream(t, "127.0.0.1:0")
	_, bad, _ := upstream(t, fmt.Sprintf("127.0.0.2:%d", port))
	h.grant("c1", "g1", `{"allow":["rebind.test","mixed.test"]}`, Provenance{Actor: "a"})
	h.resolve("rebind.test", addrs("127.0.0.1"), addrs("127.0.0.2"))
	c := h.client("c1", Subject{GrantID: "g1"}, nil)
	if status, body, _ := get(t, c, fmt.Sprintf("http://rebind.test:%d/", port)); status != 200 {
		t.Fatalf("first request: %d %s", status, body)
	}
	if good.Load() != 1 || bad.Load() != 0 {
		t.Errorf("after the first request: good %d, bad %d; want 1, 0", good.Load(), bad.Load())
	}
	if n := h.res.count("rebind.test"); n != 1 {
		t.Errorf("the name was resolved %d times for one request; the dial must use the checked answer", n)
	}
	// Now the name points at a denied address: refused, nothing sent.
	if status, body, _ := get(t, c, fmt.Sprintf("http://rebind.test:%d/", port)); status != 403 {
		t.Errorf("after rebinding: %d %s, want 403", status, body)
	}
	if bad.Load() != 0 {
		t.Errorf("the denied address got %d requests", bad.Load())
	}
	// An answer mixing allowed and denied addresses is refused outright.
	h.resolve("mixed.test", addrs("127.0.0.1", "10.0.0.1"))
	if status, body, _ := get(t, c, fmt.Sprintf("http://mixed.test:%d/", port)); status != 403 {
		t.Errorf("mixed answer: %d %s, want 403", status, body)
	}
}

func TestProxyCredentials(t *testing.T) {
	h := newHarness(t)
	_, hits, port := upstream(t, "127.0.0.1:0")
	h.resolve("allowed.test", addrs("127.0.0.1"))
	h.grant("c1", "g1", `{"allow":["allowed.test"]}`, Provenance{Actor: "agent"})
	target := fmt.Sprintf("http://allowed.test:%d/", port)
	proxyAddr := h.proxy.o.Addr
	goodURL, _ := url.Parse(h.proxy.Env("c1", Subject{GrantID: "g1"})["HTTP_PROXY"])
	pass, _ := goodURL.User.Password()
	via := func(u *url.URL) *http.Client {
		return &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(u)}}
	}
	tests := []struct {
		name string
		u    *url.URL
	}{
		{"none", &url.URL{Scheme: "http", Host: proxyAddr}},
		{"wrong secret", &url.URL{Scheme: "http", Host: proxyAddr, User: url.UserPassword("c1", "g1."+strings.Repeat("A", 43))}},
		{"another computer", &url.URL{Scheme: "http", Host: proxyAddr, User: url.UserPassword("c2", pass)}},
		{"another grant", &url.URL{Scheme: "http", Host: proxyAddr, User: url.UserPassword("c1", "gg2"+pass[strings.Index(pass, "."):])}},
		{"garbage", &url.URL{Scheme: "http", Host: proxyAddr, User: url.UserPassword("c1", "x")}},
	}
	for _, tt := range tests {
		if status, body, hdr := get(t, via(tt.u), target); status != http.StatusProxyAuthRequired || hdr.Get("Proxy-Authenticate") == "" {
			t.Errorf("%s: %d %s, want 407 with a challenge", tt.name, status, body)
		}
	}
	if hits.Load() != 0 || len(h.takeEvents()) != 0 {
		t.Errorf("unauthenticated requests reached the destination or made facts")
	}
	if status, _, _ := get(t, via(goodURL), target); status != 200 {
		t.Errorf("the good credential: %d", status)
	}
	h.takeEvents()

	// A grant that no longer stands: refused with a fact in its name.
	h.mu.Lock()
	h.gerr["c1/g1"] = errors.New("grant: revoked")
	h.mu.Unlock()
	if status, body, _ := get(t, via(goodURL), target); status != 403 || !strings.Contains(body, "revoked") {
		t.Errorf("revoked grant: %d %s, want 403", status, body)
	}
	want := []Event{{ComputerID: "c1", Provenance: Provenance{Actor: "agent"}, Host: "allowed.test", Method: "GET", Status: 403}}
	if got := h.takeEvents(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("events %+v, want %+v", got, want)
	}

	// Work an admin started: no policy, every request refused in the
	// admin's name.
	admin := h.client("c1", Subject{Provenance: Provenance{Actor: "operator"}}, nil)
	if status, body, _ := get(t, admin, target); status != 403 {
		t.Errorf("admin subject: %d %s, want 403", status, body)
	}
	want = []Event{{ComputerID: "c1", Provenance: Provenance{Actor: "operator"}, Host: "allowed.test", Method: "GET", Status: 403}}
	if got := h.takeEvents(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("events %+v, want %+v", got, want)
	}

	// A grant without egress denies everything.
	h.grant("c1", "g3", ``, Provenance{Actor: "agent"})
	if status, _, _ := get(t, h.client("c1", Subject{GrantID: "g3"}, nil), target); status != 403 {
		t.Errorf("grant without egress: %d, want 403", status)
	}
	if hits.Load() != 1 {
		t.Errorf("destination hits = %d, want 1", hits.Load())
	}
}

func TestProxyNotAProxyRequest(t *testing.T) {
	h := newHarness(t)
	resp, err := http.Get("http://" + h.proxy.o.Addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("origin-form request: %d, want 400", resp.StatusCode)
	}
}

func TestEnvHasNoSecretInLogs(t *testing.T) {
	// The secret is a MAC: the same inputs give the same credential (so
	// it survives restarts), different ones differ.
	h := newHarness(t)
	a := h.proxy.Env("c1", Subject{GrantID: "g1"})["HTTP_PROXY"]
	b := h.proxy.Env("c1", Subject{GrantID: "g1"})["HTTP_PROXY"]
	c := h.proxy.Env("c1", Subject{GrantID: "g2"})["HTTP_PROXY"]
	if a != b || a == c {
		t.Errorf("credentials: %q, %q, %q", a, b, c)
	}
	if env := h.proxy.Env("c1", Subject{}); !strings.Contains(env["NO_PROXY"], "127.0.0.1") {
		t.Errorf("NO_PROXY = %q", env["NO_PROXY"])
	}
}
