package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/contracttest"
	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/process"
)

// harness is a running server on loopback with a temp data dir.
type harness struct {
	t       *testing.T
	s       *Server
	dir     string
	admin   string
	proxy   string
	cancel  context.CancelFunc
	done    chan error
	stopped bool
}

func start(t *testing.T, dir string) *harness {
	t.Helper()
	return startWith(t, dir, nil)
}

// startWith is start with options changed by mod (nil: none).
func startWith(t *testing.T, dir string, mod func(*Options)) *harness {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	// Replicas outlive berth by design; make sure none outlives the test.
	// Registered first, so it runs after the server has stopped.
	t.Cleanup(func() { stopReplicas(t, dir) })
	ctx := context.Background()
	o := Options{
		ProxyAddr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0", DataDir: dir,
		DrainTimeout: 10 * time.Second,
		Log:          slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	testOptions(&o)
	if mod != nil {
		mod(&o)
	}
	s, err := New(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	h := &harness{t: t, s: s, dir: dir, admin: "http://" + s.AdminAddr(), proxy: "http://" + s.ProxyAddr(), cancel: cancel, done: make(chan error, 1)}
	go func() { h.done <- s.Run(rctx) }()
	t.Cleanup(h.stop)
	return h
}

// runWith makes a server with o and runs it until the test ends, when
// Run must return nil.
func runWith(t *testing.T, o Options) *Server {
	t.Helper()
	s, err := New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return s
}

// stopReplicas stops every replica left in a data directory.
func stopReplicas(t testing.TB, dir string) {
	d, err := process.New(process.Options{Dir: filepath.Join(dir, "replicas")})
	if err != nil {
		t.Errorf("cleanup: %v", err)
		return
	}
	insts, err := d.List(context.Background())
	if err != nil {
		t.Errorf("cleanup: %v", err)
	}
	for _, in := range insts {
		if err := d.Stop(context.Background(), in.ID, time.Second); err != nil && !errors.Is(err, vm.ErrNotFound) {
			t.Errorf("cleanup: stopping %s: %v", in.ID, err)
		}
	}
}

func (h *harness) stop() {
	if h.stopped {
		return
	}
	h.stopped = true
	h.cancel()
	if err := <-h.done; err != nil {
		h.t.Errorf("Run: %v", err)
	}
}

type resp struct {
	code   int
	header http.Header
	body   []byte
}

func (h *harness) do(method, path, ctype string, body string, hdr ...string) resp {
	h.t.Helper()
	req, err := http.NewRequest(method, h.admin+path, strings.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	return resp{r.StatusCode, r.Header, b}
}

func (h *harness) json(method, path, body string, hdr ...string) resp {
	h.t.Helper()
	return h.do(method, path, "application/json", body, hdr...)
}

func get(t *testing.T, url, host string) resp {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if host != "" {
		req.Host = host
	}
	r, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	return resp{r.StatusCode, r.Header, b}
}

var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

func errMsg(t *testing.T, r resp) string {
	t.Helper()
	var e apitype.Error
	if err := json.Unmarshal(r.body, &e); err != nil || e.Message == "" {
		t.Fatalf("status %d: body %q is not the error envelope", r.code, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("error content type %q", ct)
	}
	return e.Message
}

func backend(t *testing.T, name string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %s %s", name, r.URL.RequestURI(), r.Host)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func addr(s *httptest.Server) string { return strings.TrimPrefix(s.URL, "http://") }

func TestStaticAndSiteThroughTheGateway(t *testing.T) {
	c := contracttest.MustLoad(t)
	h := start(t, "")
	a, b := backend(t, "a"), backend(t, "b")
	root := filepath.Join(h.dir, "sites", "default", "docs") // the managed root: site.root "" below
	os.MkdirAll(root, 0o755)
	os.WriteFile(filepath.Join(root, "index.html"), []byte("<h1>site</h1>"), 0o644)
	os.WriteFile(filepath.Join(root, "app.js"), []byte("console.log(1)"), 0o644)

	for _, spec := range []string{
		`{"id":"web","routes":[{"host":"web.test"}],"upstreams":["` + addr(a) + `"],"x_future_field":{"keep":[1,2]}}`,
		`{"id":"api","routes":[{"host_suffix":"test","path_prefix":"/api","strip_prefix":true}],"upstreams":["` + addr(b) + `"]}`,
		`{"id":"docs","routes":[{"path_prefix":"/docs","strip_prefix":true}],"site":{"root":""}}`,
		`{"id":"old","routes":[{"host":"old.test","redirect":{"to":"https://new.test"}}],"upstreams":["` + addr(a) + `"]}`,
	} {
		r := h.json("POST", "/deployments", spec)
		if r.code != http.StatusCreated {
			t.Fatalf("POST %s: %d %s", spec, r.code, r.body)
		}
		if err := c.CheckJSON("DeploymentStatus", r.body); err != nil {
			t.Errorf("POST response not in the contract: %v", err)
		}
		if r.header.Get("ETag") == "" {
			t.Error("POST without ETag")
		}
	}

	for _, tt := range []struct {
		host, path string
		code       int
		want       string
	}{
		{"web.test", "/x?y=1", 200, "a /x?y=1 web.test"},
		{"web.test", "/api/v1", 200, "a /api/v1 web.test"}, // exact host beats suffix+path
		{"z.test", "/api/v1", 200, "b /v1 z.test"},
		{"nothing.example", "/docs/", 200, "<h1>site</h1>"},
		{"nothing.example", "/docs/app.js", 200, "console.log(1)"},
		{"nothing.example", "/nope", 404, "no deployment matches this request\n"},
		{"old.test", "/p?q=1", 301, ""},
	} {
		r := get(t, h.proxy+tt.path, tt.host)
		if r.code != tt.code || (tt.want != "" && string(r.body) != tt.want) {
			t.Errorf("GET %s%s = %d %q, want %d %q", tt.host, tt.path, r.code, r.body, tt.code, tt.want)
		}
	}
	if r := get(t, h.proxy+"/p?q=1", "old.test"); r.header.Get("Location") != "https://new.test/p?q=1" {
		t.Errorf("redirect Location %q", r.header.Get("Location"))
	}
	if r := get(t, h.proxy+"/", "web.test"); r.header.Get("X-Vm-Id") != addr(a) {
		t.Errorf("x-vm-id %q, want %q", r.header.Get("X-Vm-Id"), addr(a))
	}

	// The unknown field is returned unchanged.
	r := h.do("GET", "/deployments/web", "", "")
	var st apitype.DeploymentStatus
	if err := json.Unmarshal(r.body, &st); err != nil || string(st.Spec.Extra["x_future_field"]) != `{"keep":[1,2]}` {
		t.Errorf("unknown field not kept: %s", r.body)
	}
	if st.Kind != apitype.KindStatic || st.Ready != 1 || len(st.VMs) != 1 {
		t.Errorf("status %+v", st)
	}
	r = h.do("GET", "/deployments/docs", "", "")
	if err := json.Unmarshal(r.body, &st); err != nil || st.Site == nil || st.Site.Status != "ok" {
		t.Errorf("site status: %s", r.body)
	}
	r = h.do("GET", "/deployments", "", "")
	if err := c.CheckJSON("DeploymentStatus", r.body); err != nil {
		t.Errorf("list not in the contract: %v", err)
	}
	var list []apitype.DeploymentStatus
	json.Unmarshal(r.body, &list)
	if len(list) != 4 || list[0].Spec.ID != "api" || list[3].Spec.ID != "web" {
		t.Errorf("list not sorted by id: %s", r.body)
	}

	// Maintenance answers 503 on the data plane.
	if r := h.json("PUT", "/deployments/web", `{"routes":[{"host":"web.test"}],"upstreams":["`+addr(a)+`"],"maintenance":true}`); r.code != 200 {
		t.Fatalf("PUT maintenance: %d %s", r.code, r.body)
	}
	if r := get(t, h.proxy+"/", "web.test"); r.code != 503 || string(r.body) != "deployment is under maintenance\n" {
		t.Errorf("maintenance: %d %q", r.code, r.body)
	}
	if r := h.do("DELETE", "/deployments/web", "", ""); r.code != http.StatusNoContent {
		t.Errorf("DELETE: %d", r.code)
	}
	if r := get(t, h.proxy+"/", "web.test"); r.code != 404 {
		t.Errorf("deleted deployment still routed: %d", r.code)
	}
}

func TestAdminErrors(t *testing.T) {
	h := start(t, "")
	up := addr(backend(t, "a"))
	good := `{"id":"web","routes":[{"path_prefix":"/"}],"upstreams":["` + up + `"]}`
	tests := []struct {
		name, method, path, ctype, body string
		hdr                             []string
		code                            int
		msg                             string
	}{
		{"malformed", "POST", "/deployments", "application/json", `{"id":`, nil, 400, "malformed JSON"},
		{"wrong type", "POST", "/deployments", "application/json", `{"id":5}`, nil, 422, "id"},
		{"no content type", "POST", "/deployments", "", good, nil, 415, "Content-Type"},
		{"text content type", "POST", "/deployments", "text/plain", good, nil, 415, "Content-Type"},
		{"too big", "POST", "/deployments", "application/json", `{"id":"` + strings.Repeat("x", 3<<20) + `"}`, nil, 413, "exceeds"},
		{"empty body", "POST", "/deployments", "application/json", ``, nil, 400, "empty"},
		{"trailing data", "POST", "/deployments", "application/json", good + `{}`, nil, 400, "after the top-level value"},
		{"validation names the field", "POST", "/deployments", "application/json", `{"id":"x","routes":[{}],"upstreams":["` + up + `"]}`, nil, 400, "routes[0]"},
		{"two backends", "POST", "/deployments", "application/json", `{"id":"x","routes":[{"path_prefix":"/"}],"upstreams":["` + up + `"],"site":{"root":"/tmp"}}`, nil, 400, ""},
		{"vm driver unavailable", "POST", "/deployments", "application/json", `{"id":"x","routes":[],"vm":{"driver":"firecracker","port":80}}`, nil, 400, "vm.driver"},
		{"bad upstream", "POST", "/deployments", "application/json", `{"id":"x","routes":[{"path_prefix":"/"}],"upstreams":["nope"]}`, nil, 400, "upstreams[0]"},
		{"bad If-None-Match", "POST", "/deployments", "application/json", good, []string{"If-None-Match", "abc"}, 400, "If-None-Match"},
		{"unknown id", "GET", "/deployments/missing", "", "", nil, 404, `no deployment "missing"`},
		{"PUT unknown", "PUT", "/deployments/missing", "application/json", good, nil, 404, `no deployment "missing"`},
		{"DELETE unknown", "DELETE", "/deployments/missing", "", "", nil, 404, `no deployment "missing"`},
		{"unknown route", "GET", "/nope", "", "", nil, 501, "GET /nope is not supported by this server"},
		{"method not allowed", "PATCH", "/deployments", "", "", nil, 405, "not allowed"},
		{"metrics bad summary", "GET", "/metrics?summary=1", "", "", nil, 400, "summary"},
		{"metrics bad limit", "GET", "/metrics?limit=-2", "", "", nil, 400, "limit"},
		{"scaling a static deployment", "PATCH", "/deployments/web/scaling", "application/json", `{"min_replicas":1}`, nil, 400, "cannot be scaled"},
		{"drain unknown upstream", "PUT", "/deployments/web/upstreams/10.0.0.1:1/drain", "application/json", `{}`, nil, 404, "no upstream"},
		{"drain reason too long", "PUT", "/deployments/web/upstreams/x/drain", "application/json", `{"reason":"` + strings.Repeat("r", 600) + `"}`, nil, 400, "reason"},
	}
	if r := h.json("POST", "/deployments", good); r.code != 201 {
		t.Fatalf("setup: %d %s", r.code, r.body)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := h.do(tt.method, tt.path, tt.ctype, tt.body, tt.hdr...)
			if r.code != tt.code {
				t.Fatalf("%s %s = %d %s, want %d", tt.method, tt.path, r.code, r.body, tt.code)
			}
			if msg := errMsg(t, r); !strings.Contains(msg, tt.msg) {
				t.Errorf("message %q does not mention %q", msg, tt.msg)
			}
		})
	}
}

func TestConditionalWrites(t *testing.T) {
	h := start(t, "")
	up := addr(backend(t, "a"))
	spec := `{"id":"web","routes":[{"host":"web.test"}],"upstreams":["` + up + `"]}`
	r := h.json("POST", "/deployments", spec, "If-None-Match", "*")
	if r.code != 201 {
		t.Fatalf("create-only: %d %s", r.code, r.body)
	}
	tag := r.header.Get("ETag")
	if len(tag) != 66 || tag[0] != '"' {
		t.Fatalf("ETag %q is not a quoted sha256", tag)
	}
	if r := h.json("POST", "/deployments", spec, "If-None-Match", "*"); r.code != 412 {
		t.Errorf("second create-only: %d", r.code)
	}
	// Plain POST replaces and still answers 201, as app-lb does.
	if r := h.json("POST", "/deployments", spec); r.code != 201 {
		t.Errorf("replace: %d", r.code)
	}
	if r := h.do("GET", "/deployments/web", "", ""); r.header.Get("ETag") != tag {
		t.Errorf("same spec, different ETag: %q vs %q", r.header.Get("ETag"), tag)
	}
	stale := `"` + strings.Repeat("0", 64) + `"`
	if r := h.json("PUT", "/deployments/web", spec, "If-Match", stale); r.code != 412 {
		t.Errorf("stale If-Match: %d %s", r.code, r.body)
	}
	if r := h.json("PUT", "/deployments/web", spec, "If-Match", "W/"+tag); r.code != 400 {
		t.Errorf("weak If-Match: %d %s", r.code, r.body)
	}
	spec2 := `{"id":"ignored","routes":[{"host":"web2.test"}],"upstreams":["` + up + `"]}`
	r = h.json("PUT", "/deployments/web", spec2, "If-Match", tag)
	if r.code != 200 || r.header.Get("ETag") == tag {
		t.Fatalf("PUT with If-Match: %d %s", r.code, r.body)
	}
	var st apitype.DeploymentStatus
	json.Unmarshal(r.body, &st)
	if st.Spec.ID != "web" || st.Spec.Routes[0].Host != "web2.test" {
		t.Errorf("path id should win: %+v", st.Spec)
	}
	if r := get(t, h.proxy+"/", "web2.test"); r.code != 200 {
		t.Errorf("new route not served: %d", r.code)
	}
}

func TestMetrics(t *testing.T) {
	c := contracttest.MustLoad(t)
	h := start(t, "")
	up := addr(backend(t, "a"))
	for _, id := range []string{"a1", "a2", "b1"} {
		body := `{"id":"` + id + `","routes":[{"host":"` + id + `.test"}],"upstreams":["` + up + `"]}`
		if id == "b1" {
			body = `{"id":"b1","namespace":"team","routes":[{"host":"b1.test"}],"upstreams":["` + up + `"]}`
		}
		if r := h.json("POST", "/deployments", body); r.code != 201 {
			t.Fatalf("%d %s", r.code, r.body)
		}
	}
	for range 5 {
		get(t, h.proxy+"/", "a1.test")
	}
	get(t, h.proxy+"/", "a2.test")
	r := h.do("GET", "/metrics", "", "")
	if r.code != 200 {
		t.Fatalf("%d %s", r.code, r.body)
	}
	if err := c.CheckJSON("MetricsResponse", r.body); err != nil {
		t.Errorf("metrics not in the contract: %v", err)
	}
	var m apitype.MetricsResponse
	json.Unmarshal(r.body, &m)
	if m.Matched != 3 || len(m.Deployments) != 3 || m.Fleet.Deployments != 3 || m.TrackedDeployments != 3 {
		t.Errorf("counts: matched %d deployments %d fleet %d", m.Matched, len(m.Deployments), m.Fleet.Deployments)
	}
	if m.Global.Requests.C2xx != 6 || m.Deployments[0].Metrics.Requests.C2xx != 5 || m.Deployments[0].Metrics.LatencyMs.Count != 5 {
		t.Errorf("request counts: global %+v a1 %+v", m.Global.Requests, m.Deployments[0].Metrics.Requests)
	}
	if !m.Host.Available || m.Host.CPUCount == 0 || m.Host.MemoryTotalBytes == 0 {
		t.Errorf("host usage %+v", m.Host)
	}
	for _, tt := range []struct {
		q       string
		matched int
		ids     []string
	}{
		{"deployment=a2", 1, []string{"a2"}},
		{"prefix=a", 2, []string{"a1", "a2"}},
		{"namespace=team", 1, []string{"b1"}},
		{"limit=1&offset=1", 3, []string{"a2"}},
		{"offset=10", 3, nil},
		{"summary=true", 3, []string{"a1", "a2", "b1"}},
	} {
		var m apitype.MetricsResponse
		r := h.do("GET", "/metrics?"+tt.q, "", "")
		json.Unmarshal(r.body, &m)
		var ids []string
		for _, d := range m.Deployments {
			ids = append(ids, d.ID)
			if strings.Contains(tt.q, "summary") && len(d.VMs) != 0 {
				t.Errorf("summary kept vms")
			}
		}
		if m.Matched != tt.matched || strings.Join(ids, ",") != strings.Join(tt.ids, ",") {
			t.Errorf("?%s: matched %d ids %v, want %d %v", tt.q, m.Matched, ids, tt.matched, tt.ids)
		}
		if err := c.CheckJSON("MetricsResponse", r.body); err != nil {
			t.Errorf("?%s not in the contract: %v", tt.q, err)
		}
	}
	r = h.do("GET", "/metrics/prometheus", "", "")
	if r.code != 200 || !bytes.Contains(r.body, []byte(`berth_requests_total{class="2xx",deployment="a1"} 5`)) {
		t.Errorf("prometheus exposition:\n%s", r.body)
	}
	if r := h.do("GET", "/healthz", "", ""); r.code != 200 || string(r.body) != "ok\n" || r.header.Get("x-heyo-revision") == "" {
		t.Errorf("healthz: %d %q", r.code, r.body)
	}
	if r := h.do("GET", "/ingress", "", ""); r.code != 200 || c.CheckJSON("Ingress", r.body) != nil || string(r.body) != "{\"ipv4\":[],\"ipv6\":[]}\n" {
		t.Errorf("ingress: %d %s", r.code, r.body)
	}
}

func TestDrainPersistsAcrossRestart(t *testing.T) {
	c := contracttest.MustLoad(t)
	dir := t.TempDir()
	h := start(t, dir)
	a, b := addr(backend(t, "a")), addr(backend(t, "b"))
	if r := h.json("POST", "/deployments", `{"id":"web","routes":[{"path_prefix":"/"}],"upstreams":["`+a+`","https://`+b+`"]}`); r.code != 201 {
		t.Fatalf("%d %s", r.code, r.body)
	}
	r := h.json("PUT", "/deployments/web/upstreams/"+a+"/drain", `{"reason":"maintenance window"}`)
	if r.code != 200 {
		t.Fatalf("drain: %d %s", r.code, r.body)
	}
	if err := c.CheckJSON("UpstreamTrafficStatus", r.body); err != nil {
		t.Error(err)
	}
	var us apitype.UpstreamTrafficStatus
	json.Unmarshal(r.body, &us)
	if us.State != apitype.TrafficDrained || us.Reason == nil || *us.Reason != "maintenance window" || us.StartedAt == nil {
		t.Errorf("drain status %s", r.body)
	}
	// The other upstream is https:// (escaped in the path) and is the last
	// one accepting: refused without force.
	esc := "https:%2F%2F" + b
	if r := h.json("PUT", "/deployments/web/upstreams/"+esc+"/drain", `{}`); r.code != 409 {
		t.Errorf("draining the last upstream: %d %s", r.code, r.body)
	}
	if r := h.do("PUT", "/deployments/web/upstreams/"+esc+"/drain", "application/json", `{"force":true}`); r.code != 200 {
		t.Errorf("forced drain: %d %s", r.code, r.body)
	}
	if r := h.do("DELETE", "/deployments/web/upstreams/"+esc+"/drain", "", ""); r.code != 200 || !bytes.Contains(r.body, []byte(`"accepting"`)) {
		t.Errorf("uncordon: %d %s", r.code, r.body)
	}
	if r := get(t, h.proxy+"/", "x"); r.code == 200 && strings.HasPrefix(string(r.body), "a ") {
		t.Errorf("drained upstream served a request")
	}
	h.stop()

	h2 := start(t, dir)
	r = h2.do("GET", "/deployments/web", "", "")
	var st apitype.DeploymentStatus
	json.Unmarshal(r.body, &st)
	drained := map[string]bool{}
	for _, vm := range st.VMs {
		drained[vm.SandboxID] = vm.Draining
	}
	if !drained[a] || drained["https://"+b] {
		t.Errorf("after restart drains = %v, want only %s", drained, a)
	}
}

func TestGracefulShutdownFinishesInFlight(t *testing.T) {
	h := start(t, "")
	entered, release := make(chan struct{}), make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/slow" {
			return // the upstream's health probes
		}
		close(entered)
		<-release
		io.WriteString(w, "finished")
	}))
	defer slow.Close()
	if r := h.json("POST", "/deployments", `{"id":"slow","routes":[{"path_prefix":"/"}],"upstreams":["`+addr(slow)+`"]}`); r.code != 201 {
		t.Fatal(r.code)
	}
	got := make(chan resp, 1)
	go func() { got <- get(t, h.proxy+"/slow", "") }()
	<-entered
	h.cancel() // SIGTERM
	// New connections are refused once shutdown has begun...
	for {
		c, err := net.Dial("tcp", h.s.ProxyAddr())
		if err != nil {
			break
		}
		c.Close()
	}
	// ...while the request in flight still completes.
	close(release)
	if r := <-got; r.code != 200 || string(r.body) != "finished" {
		t.Errorf("in-flight request: %d %q", r.code, r.body)
	}
	h.stopped = true
	if err := <-h.done; err != nil {
		t.Errorf("Run: %v", err)
	}
}

// TestKillNineKeepsAcknowledgedWrites runs the server in a child process,
// registers deployments, kills it with SIGKILL and checks a new server on
// the same data directory serves every acknowledged deployment.
func TestKillNineKeepsAcknowledgedWrites(t *testing.T) {
	if os.Getenv("BERTH_SERVER_CHILD") == "1" {
		return
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestServerChild$")
	cmd.Env = append(os.Environ(), "BERTH_SERVER_CHILD=1", "BERTH_CHILD_DIR="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	sc := bufio.NewScanner(out)
	var adminURL string
	for sc.Scan() {
		if a, ok := strings.CutPrefix(sc.Text(), "ADMIN "); ok {
			adminURL = "http://" + a
			break
		}
	}
	if adminURL == "" {
		t.Fatal("child did not report its admin address")
	}
	up := addr(backend(t, "a"))
	var acked []string
	for i := range 20 {
		id := fmt.Sprintf("d%02d", i)
		body := `{"id":"` + id + `","routes":[{"host":"` + id + `.test"}],"upstreams":["` + up + `"]}`
		r, err := http.Post(adminURL+"/deployments", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		if r.StatusCode == 201 {
			acked = append(acked, id)
		}
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()

	h := start(t, dir)
	for _, id := range acked {
		if r := get(t, h.proxy+"/", id+".test"); r.code != 200 {
			t.Errorf("acknowledged deployment %s lost after kill -9: %d", id, r.code)
		}
	}
	if len(acked) != 20 {
		t.Errorf("only %d of 20 writes acknowledged", len(acked))
	}
}

// TestServerChild is the child half of TestKillNineKeepsAcknowledgedWrites.
func TestServerChild(t *testing.T) {
	if os.Getenv("BERTH_SERVER_CHILD") != "1" {
		t.Skip("helper process for TestKillNineKeepsAcknowledgedWrites")
	}
	o := Options{ProxyAddr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0", DataDir: os.Getenv("BERTH_CHILD_DIR"), Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	testOptions(&o)
	s, err := New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("ADMIN %s\n", s.AdminAddr())
	s.Run(context.Background()) // until killed
}
