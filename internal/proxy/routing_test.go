package proxy_test

import (
	"bufio"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"

	"github.com/berth-dev/berth/internal/proxy"
	"github.com/berth-dev/berth/internal/route"
)

// TestPrecedence routes real requests through the proxy and checks which
// deployment answered. Every deployment points at the same echo upstream but
// under a backend ID equal to its own id, so x-vm-id names the winner.
func TestPrecedence(t *testing.T) {
	_, addr := startBackend(t, echoHandler())
	dep := func(id string) *proxy.Deployment { return static(id, proxy.NewBackend(id, addr, false)) }
	maint := dep("maint")
	maint.Maintenance = true
	tbl := table(
		entry{dep("exact"), []route.Rule{{Host: "a.example.com"}}},
		entry{dep("exact-api"), []route.Rule{{Host: "a.example.com", PathPrefix: "/api"}}},
		entry{dep("suffix"), []route.Rule{{HostSuffix: "example.com"}}},
		entry{dep("suffix-long"), []route.Rule{{HostSuffix: "b.example.com"}}},
		entry{dep("suffix-api"), []route.Rule{{HostSuffix: "example.com", PathPrefix: "/api"}}},
		entry{dep("path"), []route.Rule{{PathPrefix: "/p"}}},
		entry{dep("path-api"), []route.Rule{{PathPrefix: "/api"}}},
		entry{dep("path-api-v2"), []route.Rule{{PathPrefix: "/api/v2"}}},
		// Added in reverse id order: the tie must still go to the smaller id.
		entry{dep("tie-b"), []route.Rule{{PathPrefix: "/tie"}}},
		entry{dep("tie-a"), []route.Rule{{PathPrefix: "/tie"}}},
		entry{maint, []route.Rule{{Host: "maint.test"}}},
	)
	h := proxy.New(proxy.Options{})
	h.Swap(tbl)
	base := startProxy(t, h)
	c := newClient(t)

	tests := []struct {
		host, path string
		want       string // deployment id; "" when berth answers itself
		status     int
		body       string
	}{
		{host: "a.example.com", path: "/", want: "exact"},
		{host: "A.Example.COM:8080", path: "/x", want: "exact"},
		{host: "a.example.com", path: "/api/x", want: "exact-api"},
		{host: "a.example.com", path: "/p", want: "exact"},           // exact host beats bare path
		{host: "c.example.com", path: "/", want: "suffix"},           // subdomain
		{host: "example.com", path: "/", want: "suffix"},             // apex
		{host: "x.b.example.com", path: "/", want: "suffix-long"},    // longer suffix wins
		{host: "b.example.com", path: "/api", want: "suffix-api"},    // 100,015 > 100,013
		{host: "c.example.com", path: "/api/v1", want: "suffix-api"}, // host+path beats host alone
		{host: "badexample.com", path: "/p/q", want: "path"},         // not a label boundary
		{host: "other.org", path: "/apidocs", want: "path-api"},      // raw string prefix
		{host: "other.org", path: "/p/api", want: "path"},
		{host: "other.org", path: "/api/v2/x", want: "path-api-v2"}, // longer prefix wins
		{host: "a.example.com", path: "/api/v2", want: "exact-api"}, // any host tier beats any path
		{host: "other.org", path: "/tie/1", want: "tie-a"},          // tie → smallest id
		{host: "other.org", path: "/", status: 404, body: "no deployment matches this request\n"},
		{host: "badexample.com", path: "/", status: 404, body: "no deployment matches this request\n"},
		{host: "maint.test", path: "/", status: 503, body: "deployment is under maintenance\n"},
	}
	for _, tt := range tests {
		t.Run(tt.host+tt.path, func(t *testing.T) {
			resp, body := get(t, c, base+tt.path, tt.host)
			if tt.want == "" {
				if resp.StatusCode != tt.status || body != tt.body {
					t.Fatalf("got %d %q, want %d %q", resp.StatusCode, body, tt.status, tt.body)
				}
				if got := resp.Header.Get("Content-Type"); got != "text/plain; charset=utf-8" {
					t.Errorf("Content-Type = %q, want text/plain", got)
				}
				if got := resp.Header.Get("X-Vm-Id"); got != "" {
					t.Errorf("berth's own answer carries x-vm-id %q", got)
				}
				return
			}
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d, body %q", resp.StatusCode, body)
			}
			if got := resp.Header.Get("X-Vm-Id"); got != tt.want {
				t.Errorf("served by %q, want %q", got, tt.want)
			}
		})
	}
}

// TestStripPrefix checks the path and query the upstream receives.
func TestStripPrefix(t *testing.T) {
	_, addr := startBackend(t, echoHandler())
	h := proxy.New(proxy.Options{})
	h.Swap(table(
		entry{static("api", proxy.NewBackend("api", addr, false)), []route.Rule{{PathPrefix: "/api", StripPrefix: true}}},
		entry{static("raw", proxy.NewBackend("raw", addr, false)), []route.Rule{{PathPrefix: "/raw"}}},
	))
	base := startProxy(t, h)
	c := newClient(t)
	tests := []struct{ path, want string }{
		{"/api/x?full=1", "/x?full=1"},
		{"/api", "/"},
		{"/api?q=1", "/?q=1"},
		{"/api/", "/"},
		{"/apidocs", "/docs"}, // raw prefix: the remainder gets a leading slash
		{"/api/a%2Fb?x=%20", "/a%2Fb?x=%20"},
		{"/raw/x?y=1", "/raw/x?y=1"}, // no strip_prefix: untouched
	}
	for _, tt := range tests {
		resp, body := get(t, c, base+tt.path, "h.test")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: status %d %q", tt.path, resp.StatusCode, body)
		}
		if got := decodeEcho(t, body).URI; got != tt.want {
			t.Errorf("%s arrived upstream as %q, want %q", tt.path, got, tt.want)
		}
	}
}

// TestRedirect checks status, Location and keep_path handling, and that the
// deployment's recorder sees the status actually sent.
func TestRedirect(t *testing.T) {
	rec := newRecorder()
	d := &proxy.Deployment{ID: "redir", Metrics: rec}
	h := proxy.New(proxy.Options{})
	h.Swap(table(entry{d, []route.Rule{
		{Host: "default.test", Redirect: &route.Redirect{To: "https://new.example/exact"}},
		{Host: "perm.test", Redirect: &route.Redirect{To: "https://new.example/exact", Status: 308}},
		{Host: "temp.test", Redirect: &route.Redirect{To: "https://new.example/t", Status: 307}},
		{Host: "keep.test", Redirect: &route.Redirect{To: "https://new.example/", KeepPath: true}},
		{Host: "keepbare.test", Redirect: &route.Redirect{To: "https://new.example", Status: 302, KeepPath: true}},
		{Host: "strip.test", PathPrefix: "/old", StripPrefix: true, Redirect: &route.Redirect{To: "https://new.example/", KeepPath: true}},
		{Host: "nostrip.test", PathPrefix: "/old", Redirect: &route.Redirect{To: "https://new.example/", KeepPath: true}},
	}}))
	base := startProxy(t, h)
	c := newClient(t)
	tests := []struct {
		host, path string
		status     int
		location   string
	}{
		{"default.test", "/a/b?c=d", 301, "https://new.example/exact"},
		{"perm.test", "/a/b?c=d", 308, "https://new.example/exact"},
		{"temp.test", "/", 307, "https://new.example/t"},
		{"keep.test", "/a/b?c=d", 301, "https://new.example/a/b?c=d"},
		{"keep.test", "/", 301, "https://new.example/"},
		{"keepbare.test", "/a?x=1", 302, "https://new.example/a?x=1"},
		{"strip.test", "/old/x?full=1", 301, "https://new.example/x?full=1"},
		{"strip.test", "/old", 301, "https://new.example/"},
		{"nostrip.test", "/old/x", 301, "https://new.example/old/x"},
	}
	for _, tt := range tests {
		resp, body := get(t, c, base+tt.path, tt.host)
		if resp.StatusCode != tt.status {
			t.Errorf("%s%s: status %d, want %d", tt.host, tt.path, resp.StatusCode, tt.status)
		}
		if got := resp.Header.Get("Location"); got != tt.location {
			t.Errorf("%s%s: Location %q, want %q", tt.host, tt.path, got, tt.location)
		}
		if !strings.Contains(body, tt.location) {
			t.Errorf("%s%s: body %q does not name the target", tt.host, tt.path, body)
		}
		if o := rec.next(t); o.status != tt.status || o.failed {
			t.Errorf("%s%s: recorded %+v, want status %d, not failed", tt.host, tt.path, o, tt.status)
		}
	}
}

// TestHeaders checks x-vm-id, Host preservation and X-Forwarded-* handling
// for untrusted and trusted peers.
func TestHeaders(t *testing.T) {
	_, addr := startBackend(t, echoHandler())
	tbl := table(entry{static("app", proxy.NewBackend("upstream-1", addr, false)), []route.Rule{{PathPrefix: "/"}}})
	spoofed := http.Header{
		"X-Forwarded-For":   {"203.0.113.9"},
		"X-Forwarded-Proto": {"https"},
		"X-Forwarded-Host":  {"evil.test"},
	}
	tests := []struct {
		name    string
		trusted []netip.Prefix
		sent    http.Header
		want    http.Header // of the X-Forwarded-* the upstream sees
	}{
		{
			name: "untrusted peer, spoofed headers replaced",
			sent: spoofed,
			want: http.Header{"X-Forwarded-For": {"127.0.0.1"}, "X-Forwarded-Proto": {"http"}, "X-Forwarded-Host": {"app.test:8080"}},
		},
		{
			name: "untrusted peer, nothing sent",
			want: http.Header{"X-Forwarded-For": {"127.0.0.1"}, "X-Forwarded-Proto": {"http"}, "X-Forwarded-Host": {"app.test:8080"}},
		},
		{
			name:    "trusted peer, kept and appended",
			trusted: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")},
			sent:    spoofed,
			want:    http.Header{"X-Forwarded-For": {"203.0.113.9, 127.0.0.1"}, "X-Forwarded-Proto": {"https"}, "X-Forwarded-Host": {"evil.test"}},
		},
		{
			name:    "trusted peer, nothing sent",
			trusted: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
			want:    http.Header{"X-Forwarded-For": {"127.0.0.1"}, "X-Forwarded-Proto": {"http"}, "X-Forwarded-Host": {"app.test:8080"}},
		},
		{
			name:    "other network trusted, loopback is not",
			trusted: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")},
			sent:    spoofed,
			want:    http.Header{"X-Forwarded-For": {"127.0.0.1"}, "X-Forwarded-Proto": {"http"}, "X-Forwarded-Host": {"app.test:8080"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := proxy.New(proxy.Options{TrustedProxies: tt.trusted})
			h.Swap(tbl)
			base := startProxy(t, h)
			resp, body := send(t, newClient(t), http.MethodGet, base+"/x", "app.test:8080", nil, tt.sent)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d %q", resp.StatusCode, body)
			}
			if got := resp.Header.Get("X-Vm-Id"); got != "upstream-1" {
				t.Errorf("x-vm-id = %q, want upstream-1", got)
			}
			e := decodeEcho(t, body)
			if e.Host != "app.test:8080" {
				t.Errorf("upstream saw Host %q, want app.test:8080", e.Host)
			}
			for k, want := range tt.want {
				if got := e.Header.Values(k); strings.Join(got, "|") != strings.Join(want, "|") {
					t.Errorf("upstream saw %s %q, want %q", k, got, want)
				}
			}
		})
	}
}

// TestWeirdRequests sends requests a browser would not: they must be answered,
// never panic the handler or hang.
func TestWeirdRequests(t *testing.T) {
	_, addr := startBackend(t, echoHandler())
	h := proxy.New(proxy.Options{})
	h.Swap(table(
		entry{static("abs", proxy.NewBackend("abs", addr, false)), []route.Rule{{Host: "abs.test"}}},
		entry{static("opt", proxy.NewBackend("opt", addr, false)), []route.Rule{{Host: "opt.test"}}},
		entry{static("api", proxy.NewBackend("api", addr, false)), []route.Rule{{PathPrefix: "/api", StripPrefix: true}}},
	))
	// DisableGeneralOptionsHandler lets OPTIONS * reach the handler.
	base := startProxy(t, h, func(s *http.Server) { s.DisableGeneralOptionsHandler = true })
	proxyAddr := strings.TrimPrefix(base, "http://")

	huge := "/" + strings.Repeat("a", 64<<10)
	tests := []struct {
		name    string
		raw     string
		status  int
		vmID    string // "" when no backend should answer
		wantURI string
	}{
		{"absolute-form", "GET http://abs.test/x?y=1 HTTP/1.1\r\nHost: abs.test\r\n\r\n", 200, "abs", "/x?y=1"},
		{"absolute-form, other Host", "GET http://abs.test/x HTTP/1.1\r\nHost: nothing.test\r\n\r\n", 200, "abs", "/x"},
		{"empty Host", "GET /x HTTP/1.1\r\nHost: \r\n\r\n", 404, "", ""},
		{"HTTP/1.0 without Host", "GET /api/x HTTP/1.0\r\n\r\n", 200, "api", "/x"},
		{"huge path, no route", "GET " + huge + " HTTP/1.1\r\nHost: x.test\r\n\r\n", 404, "", ""},
		{"huge path, routed", "GET /api" + huge + " HTTP/1.1\r\nHost: x.test\r\n\r\n", 200, "api", huge},
		{"OPTIONS *, no route", "OPTIONS * HTTP/1.1\r\nHost: x.test\r\n\r\n", 404, "", ""},
		{"OPTIONS *, host route", "OPTIONS * HTTP/1.1\r\nHost: opt.test\r\n\r\n", 200, "opt", ""}, // the upstream's own OPTIONS * answer
		{"IPv6 host", "GET /x HTTP/1.1\r\nHost: [::1]:80\r\n\r\n", 404, "", ""},
		{"trailing dot and case", "GET /x HTTP/1.1\r\nHost: ABS.test.\r\n\r\n", 200, "abs", "/x"},
		{"userinfo-looking host", "GET /x HTTP/1.1\r\nHost: u@abs.test\r\n\r\n", 400, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", proxyAddr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := conn.Write([]byte(tt.raw)); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatalf("no HTTP response: %v", err)
			}
			defer resp.Body.Close()
			var sb strings.Builder
			if _, err := bufio.NewReader(resp.Body).WriteTo(&sb); err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d (%q), want %d", resp.StatusCode, sb.String(), tt.status)
			}
			if got := resp.Header.Get("X-Vm-Id"); got != tt.vmID {
				t.Errorf("x-vm-id %q, want %q", got, tt.vmID)
			}
			if tt.status == 404 && sb.String() != "no deployment matches this request\n" {
				t.Errorf("404 body %q", sb.String())
			}
			if tt.wantURI != "" {
				if got := decodeEcho(t, sb.String()).URI; got != tt.wantURI {
					t.Errorf("upstream URI %.60q, want %.60q", got, tt.wantURI)
				}
			}
		})
	}

	// Requests no server would produce, straight into the handler.
	direct := []*http.Request{
		{Method: "GET", URL: &url.URL{}, Header: http.Header{}, RemoteAddr: "not an address"},
		{Method: "GET", URL: &url.URL{Path: "*"}, Host: "", Header: http.Header{}},
		{Method: "GET", URL: &url.URL{Path: "/api"}, Host: "[", Header: http.Header{}, RemoteAddr: "[::1]:1"},
		{Method: "", URL: &url.URL{Path: "/api/\x00"}, Host: ":", Header: http.Header{}},
	}
	for i, r := range direct {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r.WithContext(t.Context()))
		if w.Code == 0 || w.Code >= 600 {
			t.Errorf("direct request %d: status %d", i, w.Code)
		}
		if w.Code == 404 && w.Body.String() != "no deployment matches this request\n" {
			t.Errorf("direct request %d: 404 body %q", i, w.Body.String())
		}
	}
}

// TestTLSUpstream checks an https:// static upstream: TLS to the backend, the
// client's Host header preserved.
func TestTLSUpstream(t *testing.T) {
	up := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil {
			http.Error(w, "plaintext", http.StatusBadRequest)
			return
		}
		echoHandler().ServeHTTP(w, r)
	}))
	t.Cleanup(up.Close)
	addr := strings.TrimPrefix(up.URL, "https://")
	tr := proxy.NewTransport()
	tr.TLSClientConfig = up.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	t.Cleanup(tr.CloseIdleConnections)
	h := proxy.New(proxy.Options{Transport: tr})
	h.Swap(table(entry{static("secure", proxy.NewBackend("https://"+addr, addr, true)), catchAll}))
	base := startProxy(t, h)
	resp, body := get(t, newClient(t), base+"/s?q=1", "secure.test")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d %q", resp.StatusCode, body)
	}
	if got := resp.Header.Get("X-Vm-Id"); got != "https://"+addr {
		t.Errorf("x-vm-id %q", got)
	}
	if e := decodeEcho(t, body); e.Host != "secure.test" || e.URI != "/s?q=1" {
		t.Errorf("upstream saw Host %q URI %q", e.Host, e.URI)
	}
}

// TestSiteRootRedirect: a site routed under a stripped prefix answers the
// bare prefix with a redirect to the directory form.
func TestSiteRootRedirect(t *testing.T) {
	h := proxy.New(proxy.Options{})
	var b route.Builder[*proxy.Deployment]
	site := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("site " + r.URL.Path)) })
	b.Add("docs", &proxy.Deployment{ID: "docs", Site: site}, []route.Rule{{PathPrefix: "/docs", StripPrefix: true}})
	h.Swap(b.Build())
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/docs?x=1", nil))
	if rec.Code != http.StatusMovedPermanently || rec.Header().Get("Location") != "/docs/?x=1" {
		t.Errorf("GET /docs = %d %q", rec.Code, rec.Header().Get("Location"))
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/docs/", nil))
	if rec.Code != 200 || rec.Body.String() != "site /" {
		t.Errorf("GET /docs/ = %d %q", rec.Code, rec.Body.String())
	}
}
