package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/client"
	"github.com/google/go-cmp/cmp"
)

// seen is one request as the test server received it.
type seen struct {
	Method      string
	URI         string // escaped path and query, as on the wire
	ContentType string
	Accept      string
	IfNoneMatch string
	IfMatch     string
	Auth        string
	Body        string
}

// reply is what the test server answers.
type reply struct {
	status int
	header map[string]string
	body   string
}

// server is a real HTTP server on loopback that records every request and
// answers with a canned reply.
type server struct {
	*httptest.Server
	mu    sync.Mutex
	reqs  []seen
	reply reply
}

func newServer(t *testing.T, r reply) *server {
	t.Helper()
	s := &server{reply: r}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, err := io.ReadAll(req.Body)
		if err != nil {
			t.Errorf("reading request body: %v", err)
		}
		s.mu.Lock()
		s.reqs = append(s.reqs, seen{
			Method:      req.Method,
			URI:         req.RequestURI,
			ContentType: req.Header.Get("Content-Type"),
			Accept:      req.Header.Get("Accept"),
			IfNoneMatch: req.Header.Get("If-None-Match"),
			IfMatch:     req.Header.Get("If-Match"),
			Auth:        req.Header.Get("Authorization"),
			Body:        string(b),
		})
		rep := s.reply
		s.mu.Unlock()
		for k, v := range rep.header {
			w.Header().Set(k, v)
		}
		w.WriteHeader(rep.status)
		io.WriteString(w, rep.body)
	}))
	t.Cleanup(s.Close)
	return s
}

// requests returns what the server has seen so far.
func (s *server) requests() []seen {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]seen(nil), s.reqs...)
}

func newClient(t *testing.T, s *server, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.New(s.URL, opts...)
	if err != nil {
		t.Fatalf("client.New(%q): %v", s.URL, err)
	}
	return c
}

const statusJSON = `{"rollout_revision":"r1","spec":{"id":"web","routes":[{"host":"web.example.com"}],"vm":{"driver":"firecracker","port":8080}},"kind":"vm","desired_replicas":1,"ready":1,"pending":0,"total_in_flight":2,"vms":[{"sandbox_id":"sb-1","addr":"10.0.0.2:8080","in_flight":2,"healthy":true,"draining":false}]}`

const trafficJSON = `{"deployment_id":"legacy","upstream":"https://h:443","state":"draining","healthy":true,"in_flight":3,"reason":"maint","started_at":1700000000}`

func wantStatus(t *testing.T) *apitype.DeploymentStatus {
	t.Helper()
	var st apitype.DeploymentStatus
	if err := json.Unmarshal([]byte(statusJSON), &st); err != nil {
		t.Fatal(err)
	}
	return &st
}

func webSpec() apitype.DeploymentSpec {
	return apitype.DeploymentSpec{
		ID:     "web",
		Routes: []apitype.RouteRule{{Host: "web.example.com"}},
		VM:     &apitype.VmSpec{Driver: apitype.DriverFirecracker, Port: 8080},
	}
}

const webSpecJSON = `{"id":"web","routes":[{"host":"web.example.com"}],"vm":{"driver":"firecracker","port":8080}}`

// TestMethods checks, for every typed method, the request on the wire and
// the decoded reply.
func TestMethods(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name  string
		reply reply
		call  func(c *client.Client) (any, error)
		want  any
		req   seen
	}{
		{
			name:  "Apply",
			reply: reply{status: 201, body: statusJSON},
			call:  func(c *client.Client) (any, error) { return c.Apply(ctx, webSpec()) },
			want:  wantStatus(t),
			req:   seen{Method: "POST", URI: "/deployments", ContentType: "application/json", Body: webSpecJSON},
		},
		{
			name:  "Create",
			reply: reply{status: 201, body: statusJSON},
			call:  func(c *client.Client) (any, error) { return c.Create(ctx, webSpec()) },
			want:  wantStatus(t),
			req:   seen{Method: "POST", URI: "/deployments", ContentType: "application/json", IfNoneMatch: "*", Body: webSpecJSON},
		},
		{
			name:  "Deployments",
			reply: reply{status: 200, body: "[" + statusJSON + "]"},
			call:  func(c *client.Client) (any, error) { return c.Deployments(ctx) },
			want:  []apitype.DeploymentStatus{*wantStatus(t)},
			req:   seen{Method: "GET", URI: "/deployments"},
		},
		{
			name:  "Deployment",
			reply: reply{status: 200, header: map[string]string{"ETag": `"abc"`}, body: statusJSON},
			call: func(c *client.Client) (any, error) {
				st, etag, err := c.Deployment(ctx, "web app")
				return []any{st, etag}, err
			},
			want: []any{wantStatus(t), `"abc"`},
			req:  seen{Method: "GET", URI: "/deployments/web%20app"},
		},
		{
			name:  "Update with If-Match",
			reply: reply{status: 200, body: statusJSON},
			call:  func(c *client.Client) (any, error) { return c.Update(ctx, webSpec(), `"abc"`) },
			want:  wantStatus(t),
			req:   seen{Method: "PUT", URI: "/deployments/web", ContentType: "application/json", IfMatch: `"abc"`, Body: webSpecJSON},
		},
		{
			name:  "Update unconditional",
			reply: reply{status: 200, body: statusJSON},
			call:  func(c *client.Client) (any, error) { return c.Update(ctx, webSpec(), "") },
			want:  wantStatus(t),
			req:   seen{Method: "PUT", URI: "/deployments/web", ContentType: "application/json", Body: webSpecJSON},
		},
		{
			name:  "Delete",
			reply: reply{status: 204},
			call:  func(c *client.Client) (any, error) { return nil, c.Delete(ctx, "web") },
			req:   seen{Method: "DELETE", URI: "/deployments/web"},
		},
		{
			name:  "PatchScaling",
			reply: reply{status: 200, body: statusJSON},
			call: func(c *client.Client) (any, error) {
				return c.PatchScaling(ctx, "web", map[string]any{"min_replicas": 1, "idle_action": "retain"})
			},
			want: wantStatus(t),
			req:  seen{Method: "PATCH", URI: "/deployments/web/scaling", ContentType: "application/json", Body: `{"idle_action":"retain","min_replicas":1}`},
		},
		{
			name:  "PatchScaling nil sends an empty object",
			reply: reply{status: 200, body: statusJSON},
			call:  func(c *client.Client) (any, error) { return c.PatchScaling(ctx, "web", nil) },
			want:  wantStatus(t),
			req:   seen{Method: "PATCH", URI: "/deployments/web/scaling", ContentType: "application/json", Body: `{}`},
		},
		{
			name:  "DrainUpstream escapes the upstream",
			reply: reply{status: 202, body: trafficJSON},
			call: func(c *client.Client) (any, error) {
				return c.DrainUpstream(ctx, "legacy", "https://h:443", apitype.DrainRequest{Force: new(true), Reason: "maint"})
			},
			want: &apitype.UpstreamTrafficStatus{
				DeploymentID: "legacy", Upstream: "https://h:443", State: apitype.TrafficDraining,
				Healthy: true, InFlight: 3, Reason: new("maint"), StartedAt: new(int64(1700000000)),
			},
			req: seen{Method: "PUT", URI: "/deployments/legacy/upstreams/https:%2F%2Fh:443/drain", ContentType: "application/json", Body: `{"force":true,"reason":"maint"}`},
		},
		{
			name:  "UndrainUpstream",
			reply: reply{status: 200, body: `{"deployment_id":"legacy","upstream":"10.0.0.4:8080","state":"accepting","healthy":true,"in_flight":0,"reason":null,"started_at":null}`},
			call:  func(c *client.Client) (any, error) { return c.UndrainUpstream(ctx, "legacy", "10.0.0.4:8080") },
			want: &apitype.UpstreamTrafficStatus{
				DeploymentID: "legacy", Upstream: "10.0.0.4:8080", State: apitype.TrafficAccepting, Healthy: true,
			},
			req: seen{Method: "DELETE", URI: "/deployments/legacy/upstreams/10.0.0.4:8080/drain"},
		},
		{
			name:  "Health",
			reply: reply{status: 200, body: "ok\n"},
			call:  func(c *client.Client) (any, error) { return nil, c.Health(ctx) },
			req:   seen{Method: "GET", URI: "/healthz"},
		},
		{
			name:  "Ingress",
			reply: reply{status: 200, body: `{"ipv4":["203.0.113.7"],"ipv6":[]}`},
			call:  func(c *client.Client) (any, error) { return c.Ingress(ctx) },
			want:  &apitype.Ingress{IPv4: []string{"203.0.113.7"}, IPv6: []string{}},
			req:   seen{Method: "GET", URI: "/ingress"},
		},
		{
			name:  "Metrics with every filter",
			reply: reply{status: 200, body: `{"generated_at":1,"uptime_secs":2,"fleet":{"deployments":3},"deployments":[],"matched":0,"tracked_deployments":3}`},
			call: func(c *client.Client) (any, error) {
				return c.Metrics(ctx, client.MetricsQuery{Deployment: "web", Prefix: "w", Namespace: "team a", Summary: true, Limit: 10, Offset: 20})
			},
			want: &apitype.MetricsResponse{GeneratedAt: 1, UptimeSecs: 2, Fleet: apitype.FleetPool{Deployments: 3}, Deployments: []apitype.DeploymentView{}, TrackedDeployments: 3},
			req:  seen{Method: "GET", URI: "/metrics?deployment=web&limit=10&namespace=team+a&offset=20&prefix=w&summary=true"},
		},
		{
			name:  "Metrics zero query",
			reply: reply{status: 200, body: `{"deployments":[]}`},
			call:  func(c *client.Client) (any, error) { return c.Metrics(ctx, client.MetricsQuery{}) },
			want:  &apitype.MetricsResponse{Deployments: []apitype.DeploymentView{}},
			req:   seen{Method: "GET", URI: "/metrics"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newServer(t, tt.reply)
			got, err := tt.call(newClient(t, s))
			if err != nil {
				t.Fatalf("call: %v", err)
			}
			if tt.want != nil {
				if diff := cmp.Diff(tt.want, got); diff != "" {
					t.Errorf("reply mismatch (-want +got):\n%s", diff)
				}
			}
			reqs := s.requests()
			if len(reqs) != 1 {
				t.Fatalf("server saw %d requests, want 1", len(reqs))
			}
			want := tt.req
			want.Accept = "application/json"
			if diff := cmp.Diff(want, reqs[0]); diff != "" {
				t.Errorf("request mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestErrors(t *testing.T) {
	tests := []struct {
		name  string
		reply reply
		want  *client.Error
		is    func(error) bool
	}{
		{
			name:  "envelope 404",
			reply: reply{status: 404, body: `{"error":"no deployment \"web\""}`},
			want:  &client.Error{Status: 404, Message: `no deployment "web"`},
			is:    client.IsNotFound,
		},
		{
			name:  "envelope with code",
			reply: reply{status: 409, body: `{"error":"plugin obs is disabled","code":"plugin_disabled"}`},
			want:  &client.Error{Status: 409, Message: "plugin obs is disabled", Code: "plugin_disabled"},
			is:    client.IsConflict,
		},
		{
			name:  "precondition",
			reply: reply{status: 412, body: `{"error":"deployment already exists"}`},
			want:  &client.Error{Status: 412, Message: "deployment already exists"},
			is:    client.IsPreconditionFailed,
		},
		{
			name:  "plain-text 401",
			reply: reply{status: 401, header: map[string]string{"Content-Type": "text/plain"}, body: "authentication required\n"},
			want:  &client.Error{Status: 401, Message: "authentication required"},
			is:    client.IsUnauthorized,
		},
		{
			name:  "403",
			reply: reply{status: 403, body: `{"error":"this token is not scoped to deployment \"web\""}`},
			want:  &client.Error{Status: 403, Message: `this token is not scoped to deployment "web"`},
			is:    client.IsForbidden,
		},
		{
			name:  "empty body",
			reply: reply{status: 502},
			want:  &client.Error{Status: 502, Message: "bad gateway (HTTP 502)"},
			is:    func(err error) bool { return client.StatusCode(err) == 502 },
		},
		{
			name:  "long html page is shortened",
			reply: reply{status: 500, body: "<html>\n<body>" + strings.Repeat("x", 2000) + "</body></html>"},
			want:  &client.Error{Status: 500, Message: "<html> <body>" + strings.Repeat("x", 499) + "…"},
			is:    func(err error) bool { return client.StatusCode(err) == 500 },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newServer(t, tt.reply)
			_, _, err := newClient(t, s).Deployment(context.Background(), "web")
			var got *client.Error
			if !errors.As(err, &got) {
				t.Fatalf("Deployment() error = %v (%T), want *client.Error", err, err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("error mismatch (-want +got):\n%s", diff)
			}
			if got.Error() != tt.want.Message {
				t.Errorf("Error() = %q, want %q", got.Error(), tt.want.Message)
			}
			if !tt.is(err) {
				t.Errorf("status predicate false for %v", err)
			}
			if tt.reply.status != 404 && client.IsNotFound(err) {
				t.Errorf("IsNotFound true for status %d", tt.reply.status)
			}
		})
	}
}

func TestStatusCodeOfOtherErrors(t *testing.T) {
	if got := client.StatusCode(errors.New("dial tcp: refused")); got != 0 {
		t.Errorf("StatusCode(plain error) = %d, want 0", got)
	}
	if client.IsNotFound(nil) {
		t.Error("IsNotFound(nil) = true")
	}
}

func TestAuth(t *testing.T) {
	tests := []struct {
		name string
		opts []client.Option
		want string
	}{
		{"none", nil, ""},
		{"bearer", []client.Option{client.WithToken("applb_abc")}, "Bearer applb_abc"},
		// app-lb compares the encoded header byte for byte: standard
		// base64 with padding of "admin:pw" is YWRtaW46cHc=.
		{"basic", []client.Option{client.WithBasicAuth("admin", "pw")}, "Basic YWRtaW46cHc="},
		{"last wins", []client.Option{client.WithBasicAuth("admin", "pw"), client.WithToken("t")}, "Bearer t"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newServer(t, reply{status: 200, body: "ok\n"})
			if err := newClient(t, s, tt.opts...).Health(context.Background()); err != nil {
				t.Fatal(err)
			}
			if got := s.requests()[0].Auth; got != tt.want {
				t.Errorf("Authorization = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestNewRejectsBadInput(t *testing.T) {
	tests := []struct {
		name string
		url  string
		opts []client.Option
	}{
		{"no scheme", "127.0.0.1:9090", nil},
		{"ftp", "ftp://h", nil},
		{"no host", "http://", nil},
		{"query", "http://h/?a=1", nil},
		{"fragment", "http://h/#x", nil},
		{"unparsable", "http://h:port:x", nil},
		{"nil http client", "http://h", []client.Option{client.WithHTTPClient(nil)}},
		{"empty token", "http://h", []client.Option{client.WithToken("")}},
		{"token with newline", "http://h", []client.Option{client.WithToken("a\nb")}},
		{"basic user with colon", "http://h", []client.Option{client.WithBasicAuth("a:b", "c")}},
		{"user agent with newline", "http://h", []client.Option{client.WithUserAgent("x\r\ny")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if c, err := client.New(tt.url, tt.opts...); err == nil {
				t.Errorf("New(%q) = %v, want an error", tt.url, c)
			}
		})
	}
}

func TestBaseURLPathPrefix(t *testing.T) {
	s := newServer(t, reply{status: 200, body: "ok\n"})
	c, err := client.New(s.URL + "/berth/")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Health(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, want := s.requests()[0].URI, "/berth/healthz"; got != want {
		t.Errorf("request URI = %q, want %q", got, want)
	}
}

func TestEmptyIDsFailWithoutARequest(t *testing.T) {
	s := newServer(t, reply{status: 500})
	c := newClient(t, s)
	ctx := context.Background()
	calls := map[string]func() error{
		"Apply":  func() error { _, err := c.Apply(ctx, apitype.DeploymentSpec{}); return err },
		"Create": func() error { _, err := c.Create(ctx, apitype.DeploymentSpec{}); return err },
		"Deployment": func() error {
			_, _, err := c.Deployment(ctx, "")
			return err
		},
		"Update":          func() error { _, err := c.Update(ctx, apitype.DeploymentSpec{}, ""); return err },
		"Delete":          func() error { return c.Delete(ctx, "") },
		"PatchScaling":    func() error { _, err := c.PatchScaling(ctx, "", nil); return err },
		"DrainUpstream":   func() error { _, err := c.DrainUpstream(ctx, "", "u", apitype.DrainRequest{}); return err },
		"empty upstream":  func() error { _, err := c.UndrainUpstream(ctx, "d", ""); return err },
		"negative limit":  func() error { _, err := c.Metrics(ctx, client.MetricsQuery{Limit: -1}); return err },
		"negative offset": func() error { _, err := c.Metrics(ctx, client.MetricsQuery{Offset: -1}); return err },
	}
	for name, call := range calls {
		if err := call(); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if n := len(s.requests()); n != 0 {
		t.Errorf("server saw %d requests, want 0", n)
	}
}

func TestBadReplies(t *testing.T) {
	tests := []struct {
		name  string
		reply reply
	}{
		{"not JSON", reply{status: 200, body: "<html>hi</html>"}},
		{"empty 200", reply{status: 200}},
		{"wrong shape", reply{status: 200, body: `[1,2]`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newServer(t, tt.reply)
			_, _, err := newClient(t, s).Deployment(context.Background(), "web")
			if err == nil {
				t.Fatal("Deployment() succeeded, want a decoding error")
			}
			if client.StatusCode(err) != 0 {
				t.Errorf("decoding error %v carries a status", err)
			}
		})
	}
}

// TestResponseBodyIsBounded checks that a reply larger than MaxResponseBytes
// is refused rather than read into memory whole.
func TestResponseBodyIsBounded(t *testing.T) {
	const limit = 1 << 20
	defer client.SetMaxResponseBytes(limit)()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`["`))
		chunk := []byte(strings.Repeat("a", 64<<10))
		for range limit/len(chunk) + 1 {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
		w.Write([]byte(`"]`))
	}))
	defer srv.Close()
	c, err := client.New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Deployments(context.Background())
	if err == nil || !strings.Contains(err.Error(), "exceeds") {
		t.Errorf("Deployments() error = %v, want one about the size limit", err)
	}
}

func TestDoRaw(t *testing.T) {
	// Key order, spacing and unknown keys survive: Do hands back the bytes.
	body := `{"z":1, "a":{"unknown":true}}`
	s := newServer(t, reply{status: 200, header: map[string]string{"X-Thing": "y"}, body: body})
	c := newClient(t, s)
	var raw json.RawMessage
	h, err := c.Do(context.Background(), "POST", "/deployments", json.RawMessage(`{"id":"x","vm":{"rootfs":"shared"}}`), &raw)
	if err != nil {
		t.Fatal(err)
	}
	if string(raw) != body {
		t.Errorf("raw = %s, want %s", raw, body)
	}
	if h.Get("X-Thing") != "y" {
		t.Errorf("header X-Thing = %q, want y", h.Get("X-Thing"))
	}
	if got, want := s.requests()[0].Body, `{"id":"x","vm":{"rootfs":"shared"}}`; got != want {
		t.Errorf("request body = %s, want %s", got, want)
	}

	if _, err := c.Do(context.Background(), "POST", "/x", json.RawMessage(`{bad`), nil); err == nil {
		t.Error("Do with invalid raw JSON body succeeded")
	}
	if _, err := c.Do(context.Background(), "GET", "x", nil, nil); err == nil {
		t.Error("Do with a relative path succeeded")
	}
}

func TestContextCancel(t *testing.T) {
	s := newServer(t, reply{status: 200, body: "ok\n"})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := newClient(t, s).Health(ctx)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Health(cancelled) = %v, want context.Canceled", err)
	}
}
