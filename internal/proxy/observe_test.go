package proxy_test

import (
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/proxy"
	"github.com/berth-dev/berth/internal/route"
)

// credGate admits a request carrying X-Test-Cred as credentialed, one to
// /open as a public path, and answers anything else 401.
type credGate struct{}

func (credGate) Admit(w http.ResponseWriter, r *http.Request, secure bool) (int, bool) {
	switch {
	case r.Header.Get("X-Test-Cred") != "":
		return 0, true
	case r.URL.Path == "/open":
		return 0, false
	}
	http.Error(w, "sign in", http.StatusUnauthorized)
	return http.StatusUnauthorized, false
}

// completions collects what Options.Observe is handed, copied. Observe may
// run after the client has its answer (the response is flushed before the
// handler returns), so the test waits for each.
type completions struct {
	ch chan proxy.Completion
}

func newCompletions() *completions { return &completions{ch: make(chan proxy.Completion, 64)} }

func (c *completions) observe(x *proxy.Completion) {
	y := *x
	for _, s := range []*string{&y.Method, &y.Host, &y.Path, &y.RawQuery, &y.UserAgent, &y.Deployment, &y.Namespace, &y.Scheme} {
		*s = strings.Clone(*s)
	}
	c.ch <- y
}

// last is the next request observed.
func (c *completions) last(t *testing.T) proxy.Completion {
	t.Helper()
	select {
	case x := <-c.ch:
		return x
	case <-time.After(hangGuard):
		t.Fatal("no request observed")
	}
	return proxy.Completion{}
}

// guardCall is one Options.Guard call.
type guardCall struct {
	client                                    netip.Addr
	host, deployment, method, path, userAgent string
}

// TestObserveAndGuard: every request is handed to Observe with what served
// it — its deployment and namespace, whether the gate admitted it on a
// credential, berth's own 404 for an unrouted host — and the guard is asked
// once its route is known: a block is answered 403 `blocked` before the gate
// or a backend sees it; an exemption is marked. The client is the socket
// peer whatever X-Forwarded-For says.
func TestObserveAndGuard(t *testing.T) {
	_, baddr := startBackend(t, echoHandler())
	obs := newCompletions()
	var mu sync.Mutex
	var calls []guardCall
	h := proxy.New(proxy.Options{
		Observe: obs.observe,
		Guard: func(client netip.Addr, host, dep, method, path, ua string) proxy.GuardVerdict {
			mu.Lock()
			calls = append(calls, guardCall{client, strings.Clone(host), strings.Clone(dep), strings.Clone(method), strings.Clone(path), strings.Clone(ua)})
			mu.Unlock()
			switch {
			case strings.HasPrefix(path, "/blocked"):
				return proxy.GuardBlock
			case strings.HasPrefix(path, "/allowed"):
				return proxy.GuardExempt
			case strings.HasPrefix(path, "/would"):
				return proxy.GuardWouldBlock
			}
			return proxy.GuardPass
		},
	})
	d := static("app", proxy.NewBackend("app-1", baddr, false))
	d.Namespace = "team"
	d.Gate = credGate{}
	h.Swap(table(entry{d, []route.Rule{{Host: "app.test"}}}))
	url := startProxy(t, h)
	c := newClient(t)

	cred := http.Header{"X-Test-Cred": {"1"}, "User-Agent": {"probe/1"}, "X-Forwarded-For": {"203.0.113.7"}}
	resp, _ := send(t, c, "GET", url+"/missing?x=1", "app.test", nil, cred)
	if resp.StatusCode != 200 {
		t.Fatalf("credentialed GET: %d", resp.StatusCode)
	}
	got := obs.last(t)
	if got.Deployment != "app" || got.Namespace != "team" || !got.Credentialed || got.Unrouted || got.Exempted ||
		got.Status != 200 || got.Path != "/missing" || got.RawQuery != "x=1" || got.Method != "GET" ||
		got.UserAgent != "probe/1" || got.Host != "app.test" || got.Bytes == 0 || got.Scheme != "none" {
		t.Errorf("credentialed completion: %+v", got)
	}
	if want := netip.MustParseAddr("127.0.0.1"); got.Client != want {
		t.Errorf("client %v, want the socket peer %v (X-Forwarded-For from an untrusted peer is not believed)", got.Client, want)
	}

	resp, _ = send(t, c, "GET", url+"/secret", "app.test", nil, http.Header{"Authorization": {"Bearer nope"}})
	if got := obs.last(t); resp.StatusCode != 401 || got.Status != 401 || got.Credentialed || got.Deployment != "app" || got.Scheme != "bearer" {
		t.Errorf("refused by the gate: %d, completion %+v", resp.StatusCode, got)
	}
	send(t, c, "GET", url+"/open", "app.test", nil, nil)
	if got := obs.last(t); got.Status != 200 || got.Credentialed {
		t.Errorf("a public path is not a credential: %+v", got)
	}

	resp, _ = get(t, c, url+"/x", "nobody.test")
	if got := obs.last(t); resp.StatusCode != 404 || !got.Unrouted || got.Deployment != "" || got.Status != 404 {
		t.Errorf("unrouted: %d, completion %+v", resp.StatusCode, got)
	}

	resp, body := send(t, c, "GET", url+"/blocked/x", "app.test", nil, cred)
	if resp.StatusCode != 403 || body != "blocked\n" {
		t.Errorf("blocked: %d %q, want 403 \"blocked\\n\"", resp.StatusCode, body)
	}
	if got := obs.last(t); got.Status != 403 || got.Credentialed || !got.Blocked || got.Deployment != "app" {
		t.Errorf("a blocked request reached the gate: %+v", got)
	}
	resp, _ = send(t, c, "GET", url+"/allowed", "app.test", nil, cred)
	if got := obs.last(t); resp.StatusCode != 200 || !got.Exempted {
		t.Errorf("exempted: %d, completion %+v", resp.StatusCode, got)
	}
	resp, _ = send(t, c, "GET", url+"/would", "app.test", nil, cred)
	if obs.last(t); resp.StatusCode != 200 {
		t.Errorf("would-block is served: %d", resp.StatusCode)
	}

	mu.Lock()
	defer mu.Unlock()
	if len(calls) != 7 {
		t.Fatalf("%d guard calls, want one a request (7): %+v", len(calls), calls)
	}
	if g := calls[0]; g.deployment != "app" || g.host != "app.test" || g.method != "GET" || g.path != "/missing" || g.userAgent != "probe/1" || !g.client.IsLoopback() {
		t.Errorf("guard call: %+v", g)
	}
	if g := calls[3]; g.deployment != "" || g.host != "nobody.test" {
		t.Errorf("an unrouted request is guarded with no deployment: %+v", g)
	}
}

// TestObserveTrustedProxy: behind a trusted proxy the client is the
// right-most forwarded address that is not itself trusted.
func TestObserveTrustedProxy(t *testing.T) {
	_, baddr := startBackend(t, echoHandler())
	obs := newCompletions()
	h := proxy.New(proxy.Options{
		Observe:        obs.observe,
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("10.0.0.0/8")},
	})
	h.Swap(table(entry{static("app", proxy.NewBackend("app-1", baddr, false)), []route.Rule{{Host: "app.test"}}}))
	url := startProxy(t, h)
	c := newClient(t)
	for _, tc := range []struct {
		xff  []string
		want string
	}{
		{nil, "127.0.0.1"},
		{[]string{"203.0.113.9"}, "203.0.113.9"},
		{[]string{"198.51.100.1, 203.0.113.9, 10.1.2.3"}, "203.0.113.9"},
		{[]string{"198.51.100.1", "203.0.113.9"}, "203.0.113.9"},
		{[]string{"10.0.0.1, 10.0.0.2"}, "10.0.0.1"},
		{[]string{"garbage, 10.0.0.2"}, "10.0.0.2"},
		{[]string{"::ffff:203.0.113.5"}, "203.0.113.5"},
	} {
		send(t, c, "GET", url+"/", "app.test", nil, http.Header{"X-Forwarded-For": tc.xff})
		if got := obs.last(t).Client; got != netip.MustParseAddr(tc.want) {
			t.Errorf("X-Forwarded-For %q: client %v, want %s", tc.xff, got, tc.want)
		}
	}
}
