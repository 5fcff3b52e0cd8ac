package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"gopkg.in/yaml.v3"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

// request is one request the fake server saw.
type request struct {
	Method string
	URI    string
	Body   string
}

// fakeServer is a real HTTP server on loopback that serves the recorded
// replies in testdata and records what it was sent. It answers like the
// admin API: JSON envelopes for errors, 201 for POST /deployments, 204 for
// DELETE.
type fakeServer struct {
	*httptest.Server
	t *testing.T

	recorder
	// inFlight, when set, is what GET /deployments/legacy reports for the
	// upstream being drained: each GET takes the next value, and the last
	// repeats.
	inFlight []int
	upstream string
}

func newFakeServer(t *testing.T) *fakeServer {
	t.Helper()
	list := readFixture(t, "deployments.json")
	var items []json.RawMessage
	if err := json.Unmarshal(list, &items); err != nil {
		t.Fatal(err)
	}
	byID := map[string]json.RawMessage{}
	for _, it := range items {
		var v struct {
			Spec struct{ ID string } `json:"spec"`
		}
		if err := json.Unmarshal(it, &v); err != nil {
			t.Fatal(err)
		}
		byID[v.Spec.ID] = it
	}
	metrics := readFixture(t, "metrics.json")

	s := &fakeServer{t: t}
	mux := http.NewServeMux()
	notFound := func(w http.ResponseWriter, id string) {
		writeJSON(w, 404, errJSON(fmt.Sprintf("no deployment %q", id)))
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, string(metrics))
	})
	mux.HandleFunc("GET /deployments", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, string(list))
	})
	mux.HandleFunc("GET /deployments/{id}", func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		it, ok := byID[id]
		if !ok {
			notFound(w, id)
			return
		}
		if id == "legacy" && s.inFlight != nil {
			s.mu.Lock()
			n := s.inFlight[0]
			if len(s.inFlight) > 1 {
				s.inFlight = s.inFlight[1:]
			}
			s.mu.Unlock()
			it = []byte(fmt.Sprintf(`{"spec":{"id":"legacy","routes":[],"upstreams":[%q]},"kind":"static",
				"desired_replicas":0,"ready":1,"pending":0,"total_in_flight":%d,
				"vms":[{"sandbox_id":%q,"addr":"x","in_flight":%d,"healthy":true,"draining":true}]}`,
				s.upstream, n, s.upstream, n))
		}
		w.Header().Set("ETag", `"etag-`+id+`"`)
		writeJSON(w, 200, string(it))
	})
	mux.HandleFunc("POST /deployments", func(w http.ResponseWriter, r *http.Request) {
		var spec struct {
			ID string `json:"id"`
		}
		body, _ := io.ReadAll(r.Body)
		if r.Header.Get("Content-Type") != "application/json" {
			writeJSON(w, 415, `{"error":"want application/json"}`)
			return
		}
		if err := json.Unmarshal(body, &spec); err != nil {
			writeJSON(w, 400, `{"error":"malformed JSON"}`)
			return
		}
		if spec.ID == "bad" {
			writeJSON(w, 400, `{"error":"routes[0]: a route needs a host, host_suffix or path_prefix"}`)
			return
		}
		writeJSON(w, 201, fmt.Sprintf(`{"spec":%s,"kind":"static","desired_replicas":0,"ready":0,"pending":0,"total_in_flight":0,"vms":[]}`, body))
	})
	mux.HandleFunc("DELETE /deployments/{id}", func(w http.ResponseWriter, r *http.Request) {
		if _, ok := byID[r.PathValue("id")]; !ok {
			notFound(w, r.PathValue("id"))
			return
		}
		w.WriteHeader(204)
	})
	mux.HandleFunc("PATCH /deployments/{id}/scaling", func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		if _, ok := byID[id]; !ok {
			notFound(w, id)
			return
		}
		var patch map[string]any
		if err := json.NewDecoder(r.Body).Decode(&patch); err != nil {
			writeJSON(w, 400, `{"error":"scaling patch must be a JSON object"}`)
			return
		}
		b, _ := json.Marshal(patch)
		writeJSON(w, 200, fmt.Sprintf(`{"spec":{"id":%q,"routes":[],"vm":{"driver":"firecracker","port":8080},"scaling":%s},"kind":"vm","desired_replicas":0,"ready":0,"pending":0,"total_in_flight":0,"vms":[]}`, id, b))
	})
	traffic := func(state string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			id, up := r.PathValue("id"), r.PathValue("upstream")
			if id != "legacy" {
				writeJSON(w, 400, errJSON(fmt.Sprintf("deployment %q has no static upstreams", id)))
				return
			}
			var req struct {
				Reason string `json:"reason"`
			}
			if r.Method == "PUT" {
				json.NewDecoder(r.Body).Decode(&req)
			}
			n := 0
			s.mu.Lock()
			if state == "draining" && len(s.inFlight) > 0 {
				n = s.inFlight[0]
			}
			s.mu.Unlock()
			if state == "draining" && n == 0 {
				state = "drained"
			}
			code := 200
			if state == "draining" {
				code = 202
			}
			reason := "null"
			if req.Reason != "" {
				reason = fmt.Sprintf("%q", req.Reason)
			}
			writeJSON(w, code, fmt.Sprintf(`{"deployment_id":%q,"upstream":%q,"state":%q,"healthy":true,"in_flight":%d,"reason":%s,"started_at":null}`,
				id, up, state, n, reason))
		}
	}
	mux.HandleFunc("PUT /deployments/{id}/upstreams/{upstream}/drain", traffic("draining"))
	mux.HandleFunc("DELETE /deployments/{id}/upstreams/{upstream}/drain", traffic("accepting"))

	s.Server = httptest.NewServer(s.record(mux))
	t.Cleanup(s.Close)
	return s
}

// errJSON returns the admin API's error envelope for msg.
func errJSON(msg string) string {
	b, _ := json.Marshal(map[string]string{"error": msg})
	return string(b)
}

func writeJSON(w http.ResponseWriter, code int, body string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	io.WriteString(w, body)
}

// recorder keeps the requests a fake server was sent; mu also guards the
// fake's own state.
type recorder struct {
	mu   sync.Mutex
	reqs []request
}

// record serves h, recording each request first.
func (s *recorder) record(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		s.mu.Lock()
		s.reqs = append(s.reqs, request{Method: r.Method, URI: r.RequestURI, Body: string(body)})
		s.mu.Unlock()
		h.ServeHTTP(w, r)
	})
}

func (s *recorder) requests() []request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]request(nil), s.reqs...)
}

func readFixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// result is what one CLI run produced.
type result struct {
	stdout, stderr string
	code           int
}

// run runs the CLI against srv (which may be nil) with stdin.
func run(t *testing.T, srv *fakeServer, stdin string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	e := &env{
		stdin:        strings.NewReader(stdin),
		stdout:       &out,
		stderr:       &errb,
		server:       DefaultServer,
		pollInterval: time.Millisecond,
	}
	if srv != nil {
		e.server = srv.URL
	}
	code := e.run(context.Background(), args)
	return result{out.String(), errb.String(), code}
}

// checkGolden compares got with testdata/name.golden, or rewrites the file
// under -update.
func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s mismatch (-want +got):\n%s", path, diff)
	}
}

func TestGolden(t *testing.T) {
	tests := []struct {
		golden string
		args   []string
	}{
		{"get_deployments", []string{"get", "deployments"}},
		{"get_deployments_wide", []string{"get", "deployments", "-o", "wide"}},
		{"get_deployment_sandbox", []string{"get", "deployment/sandbox"}},
		{"describe_sandbox", []string{"describe", "deployment", "sandbox"}},
		{"describe_legacy", []string{"describe", "deployment/legacy"}},
		{"describe_docs", []string{"describe", "deploy", "docs"}},
		{"status", []string{"status"}},
		{"help", []string{"help"}},
		{"help_scale", []string{"help", "scale"}},
	}
	srv := newFakeServer(t)
	for _, tt := range tests {
		t.Run(tt.golden, func(t *testing.T) {
			r := run(t, srv, "", tt.args...)
			if r.code != 0 || r.stderr != "" {
				t.Fatalf("berth %v: exit %d, stderr %q", tt.args, r.code, r.stderr)
			}
			checkGolden(t, tt.golden, strings.ReplaceAll(r.stdout, srv.URL, "SERVER"))
		})
	}
}

// TestStructuredOutput checks that -o json prints the reply as the server
// sent it, unknown fields and big numbers included, and that -o yaml is the
// same value.
func TestStructuredOutput(t *testing.T) {
	srv := newFakeServer(t)
	list := readFixture(t, "deployments.json")
	var items []json.RawMessage
	if err := json.Unmarshal(list, &items); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		want []byte
	}{
		{"list", []string{"get", "deployments"}, list},
		{"one", []string{"get", "deployment", "sandbox"}, items[2]},
		{"describe", []string{"describe", "deployment/sandbox"}, items[2]},
		{"status", []string{"status"}, readFixture(t, "metrics.json")},
	}
	for _, tt := range tests {
		for _, format := range []string{"json", "yaml"} {
			t.Run(tt.name+"/"+format, func(t *testing.T) {
				r := run(t, srv, "", append(tt.args, "-o", format)...)
				if r.code != 0 {
					t.Fatalf("exit %d: %s", r.code, r.stderr)
				}
				if format == "json" {
					var got, want bytes.Buffer
					if err := json.Compact(&got, []byte(r.stdout)); err != nil {
						t.Fatalf("output is not JSON: %v\n%s", err, r.stdout)
					}
					json.Compact(&want, tt.want)
					if got.String() != want.String() {
						t.Errorf("-o json printed\n%s\nwant the reply as received\n%s", got.String(), want.String())
					}
					return
				}
				var got any
				if err := yaml.Unmarshal([]byte(r.stdout), &got); err != nil {
					t.Fatalf("output is not YAML: %v\n%s", err, r.stdout)
				}
				var want any
				if err := yaml.Unmarshal(tt.want, &want); err != nil { // JSON is YAML
					t.Fatal(err)
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("-o yaml value mismatch (-want +got):\n%s", diff)
				}
			})
		}
	}
}

func TestYAMLOutputKeepsOrderAndQuotes(t *testing.T) {
	got, err := jsonToYAML([]byte(`{"z":"true","a":[1,2.50,"007"],"m":{},"n":null,"s":"two\nlines","e":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	want := `z: "true"
a:
  - 1
  - 2.50
  - "007"
m: {}
n: null
s: |-
  two
  lines
e: []
`
	if diff := cmp.Diff(want, string(got)); diff != "" {
		t.Errorf("jsonToYAML mismatch (-want +got):\n%s", diff)
	}
}

// posted returns the bodies of the POST /deployments requests srv saw, each
// decoded to a plain JSON value.
func posted(t *testing.T, srv *fakeServer) []any {
	t.Helper()
	var out []any
	for _, r := range srv.requests() {
		if r.Method != "POST" || r.URI != "/deployments" {
			continue
		}
		var v any
		if err := json.Unmarshal([]byte(r.Body), &v); err != nil {
			t.Fatalf("posted body is not JSON: %v: %s", err, r.Body)
		}
		out = append(out, v)
	}
	return out
}

func decodeJSON(t *testing.T, s string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestApply(t *testing.T) {
	web := `{"id":"web","routes":[{"host":"web.example.com"}],"upstreams":["10.0.0.4:8080"],"vm":{"rootfs":"shared"},"x-future":{"a":[1,true,null]}}`
	api := `{"id":"api","routes":[{"path_prefix":"/api"}],"upstreams":["10.0.0.5:8080"]}`
	tests := []struct {
		name  string
		file  string // contents; "-f -" reads it from stdin when stdin is true
		stdin bool
		want  []string // the specs the server must receive, as JSON
	}{
		{name: "json object", file: web, want: []string{web}},
		{name: "json list", file: "[" + web + ",\n" + api + "]", want: []string{web, api}},
		{name: "json stream", file: web + "\n" + api + "\n", want: []string{web, api}},
		{
			name: "yaml list",
			file: `
- id: web
  routes:
    - host: web.example.com
  upstreams: ["10.0.0.4:8080"]
  vm: {rootfs: shared}
  x-future:
    a: [1, true, ~]
- id: api
  routes: [{path_prefix: /api}]
  upstreams:
    - 10.0.0.5:8080
`,
			want: []string{web, api},
		},
		{
			name: "multi-document yaml",
			file: `---
id: web
routes:
  - host: web.example.com
upstreams: ["10.0.0.4:8080"]
vm:
  rootfs: shared
x-future: {a: [1, true, null]}
---
# the second spec
id: api
routes: [{path_prefix: /api}]
upstreams: [10.0.0.5:8080]
---
`,
			want: []string{web, api},
		},
		{name: "stdin", file: "id: api\nroutes: [{path_prefix: /api}]\nupstreams: [10.0.0.5:8080]\n", stdin: true, want: []string{api}},
		{
			name: "yaml keeps strings strings",
			file: "id: web\nroutes: []\nupstreams: ['10.0.0.4:8080']\nvm: {driver: firecracker, port: 8080, env_vars: {DEBUG: 'true', WHEN: 2024-01-02, N: '007'}}\n",
			want: []string{`{"id":"web","routes":[],"upstreams":["10.0.0.4:8080"],"vm":{"driver":"firecracker","port":8080,"env_vars":{"DEBUG":"true","WHEN":"2024-01-02","N":"007"}}}`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newFakeServer(t)
			args := []string{"apply", "-f", "-"}
			stdin := tt.file
			if !tt.stdin {
				path := filepath.Join(t.TempDir(), "specs")
				if err := os.WriteFile(path, []byte(tt.file), 0o600); err != nil {
					t.Fatal(err)
				}
				args = []string{"apply", "-f", path}
				stdin = ""
			}
			r := run(t, srv, stdin, args...)
			if r.code != 0 {
				t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
			}
			var want []any
			var lines []string
			for _, w := range tt.want {
				v := decodeJSON(t, w)
				want = append(want, v)
				lines = append(lines, "deployment/"+v.(map[string]any)["id"].(string)+" applied\n")
			}
			if diff := cmp.Diff(want, posted(t, srv)); diff != "" {
				t.Errorf("posted specs mismatch (-want +got):\n%s", diff)
			}
			if got, want := r.stdout, strings.Join(lines, ""); got != want {
				t.Errorf("stdout = %q, want %q", got, want)
			}
		})
	}
}

func TestApplyJSONOutput(t *testing.T) {
	srv := newFakeServer(t)
	specs := `[{"id":"a","routes":[]},{"id":"b","routes":[]}]`
	r := run(t, srv, specs, "apply", "-f", "-", "-o", "json")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	var got []struct {
		Spec struct{ ID string } `json:"spec"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("-o json of two specs is not a JSON array: %v\n%s", err, r.stdout)
	}
	if len(got) != 2 || got[0].Spec.ID != "a" || got[1].Spec.ID != "b" {
		t.Errorf("got %+v, want the replies for a and b", got)
	}
}

func TestApplyErrors(t *testing.T) {
	tests := []struct {
		name       string
		input      string
		wantCode   int
		wantErr    string // substring of stderr
		wantPosted int
		wantStdout string
	}{
		{"empty", "  \n", 1, "stdin: empty file", 0, ""},
		{"non-string key", "id: web\nvm:\n  env_vars:\n    8080: x\n", 1, "vm.env_vars: key 8080 is a int, not a string", 0, ""},
		{"top-level scalar", "just a string\n", 1, "document 1: want a deployment spec", 0, ""},
		{"list of scalars", "[1, 2]", 1, "item 1: a deployment spec must be an object", 0, ""},
		{"bad yaml", "id: [unclosed\n", 1, "invalid YAML", 0, ""},
		{"bad json", `{"id": "web", "routes": [}`, 1, "invalid JSON", 0, ""},
		{"infinity", "id: web\nx: .inf\n", 1, "x: +Inf cannot be written as JSON", 0, ""},
		{"only separators", "---\n---\n", 1, "no deployment specs", 0, ""},
		{
			name:       "server refuses one of two",
			input:      `[{"id":"bad","routes":[{}]},{"id":"good","routes":[]}]`,
			wantCode:   1,
			wantErr:    "error: deployment/bad: routes[0]: a route needs a host, host_suffix or path_prefix\n",
			wantPosted: 2,
			wantStdout: "deployment/good applied\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newFakeServer(t)
			r := run(t, srv, tt.input, "apply", "-f", "-")
			if r.code != tt.wantCode {
				t.Errorf("exit = %d, want %d (stderr %q)", r.code, tt.wantCode, r.stderr)
			}
			if !strings.Contains(r.stderr, tt.wantErr) {
				t.Errorf("stderr = %q, want it to contain %q", r.stderr, tt.wantErr)
			}
			if got := len(posted(t, srv)); got != tt.wantPosted {
				t.Errorf("server got %d specs, want %d", got, tt.wantPosted)
			}
			if r.stdout != tt.wantStdout {
				t.Errorf("stdout = %q, want %q", r.stdout, tt.wantStdout)
			}
		})
	}
}

func TestApplyMissingFile(t *testing.T) {
	r := run(t, nil, "", "apply", "-f", filepath.Join(t.TempDir(), "nope.yaml"))
	if r.code != 1 || !strings.Contains(r.stderr, "no such file") {
		t.Errorf("exit %d, stderr %q; want 1 and a missing-file error", r.code, r.stderr)
	}
}

func TestExitCodes(t *testing.T) {
	srv := newFakeServer(t)
	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantStderr string // prefix of stderr; "" means stderr must be empty
		wantStdout string // substring of stdout
	}{
		{"no command", nil, 2, "berth: no command given\n\nberth is", ""},
		{"unknown command", []string{"frobnicate"}, 2, "berth: unknown command \"frobnicate\"", ""},
		{"unknown global flag", []string{"--nope", "get", "deployments"}, 2, "berth: flag provided but not defined: -nope", ""},
		{"unknown command flag", []string{"get", "deployments", "--nope"}, 2, "berth get: flag provided but not defined: -nope\nsee 'berth get --help'\n", ""},
		{"unknown resource", []string{"get", "pods"}, 2, "berth get: unknown resource type \"pods\"", ""},
		{"missing resource", []string{"describe"}, 2, "berth describe: missing resource type", ""},
		{"describe without id", []string{"describe", "deployment"}, 2, "berth describe: missing deployment ID", ""},
		{"extra argument", []string{"get", "deployment", "a", "b"}, 2, "berth get: unexpected argument \"b\"", ""},
		{"bad output", []string{"get", "deployments", "-o", "xml"}, 2, "berth get: unknown output format \"xml\"", ""},
		{"bad output before command", []string{"-o", "xml", "status"}, 2, "berth status: unknown output format \"xml\"", ""},
		{"scale without flags", []string{"scale", "sandbox"}, 2, "berth scale: no scaling flags given\nsee 'berth scale --help'\n", ""},
		{"scale negative", []string{"scale", "sandbox", "--min", "-1"}, 2, "berth scale: --min must not be negative", ""},
		{"scale bad idle action", []string{"scale", "sandbox", "--idle-action", "nap"}, 2, "berth scale: --idle-action must be destroy or retain", ""},
		{"scale non-integer", []string{"scale", "sandbox", "--max", "many"}, 2, "berth scale: invalid value \"many\" for flag -max", ""},
		{"scale without id", []string{"scale", "--min", "1"}, 2, "berth scale: want exactly one deployment ID", ""},
		{"apply without -f", []string{"apply"}, 2, "berth apply: -f FILE is required", ""},
		{"drain one arg", []string{"drain", "legacy"}, 2, "berth drain: want DEPLOYMENT and UPSTREAM", ""},
		{"cordon has no --timeout", []string{"cordon", "legacy", "u", "--timeout", "1s"}, 2, "berth cordon: flag provided but not defined: -timeout", ""},
		{"bad server URL", []string{"--server", "127.0.0.1:9090", "status"}, 2, "berth status: --server: server URL \"127.0.0.1:9090\" must start with http:// or https://\n", ""},
		{"help unknown", []string{"help", "nope"}, 2, "berth: unknown command \"nope\"\nsee 'berth --help'\n", ""},

		{"not found", []string{"get", "deployment", "missing"}, 1, "error: no deployment \"missing\"\n", ""},
		{"delete not found", []string{"delete", "deployment", "missing"}, 1, "error: no deployment \"missing\"\n", ""},
		{"scale refused", []string{"scale", "missing", "--max", "2"}, 1, "error: no deployment \"missing\"\n", ""},
		{"cordon refused", []string{"cordon", "sandbox", "10.0.0.1:80"}, 1, "error: deployment \"sandbox\" has no static upstreams\n", ""},

		{"help", []string{"help"}, 0, "", "Commands:"},
		{"-h", []string{"-h"}, 0, "", "Commands:"},
		{"--help", []string{"--help"}, 0, "", "Commands:"},
		{"command -h", []string{"get", "-h"}, 0, "", "Usage: berth get KIND [NAME]"},
		{"help command", []string{"help", "drain"}, 0, "", "--timeout DUR"},
		{"help serve", []string{"help", "serve"}, 0, "", "berth serve -h"},
		{"flags after --", []string{"get", "--", "deployment", "-o"}, 1, "error: no deployment \"-o\"", ""},
		{"version", []string{"version"}, 0, "", "berth "},
		{"delete", []string{"delete", "deployment", "sandbox"}, 0, "", "deployment/sandbox deleted\n"},
		{"delete slash form", []string{"delete", "deployment/docs"}, 0, "", "deployment/docs deleted\n"},
		{"global flag after command", []string{"get", "deployments", "--server", srv.URL}, 0, "", "sandbox"},
		{"global flag before command", []string{"--server=" + srv.URL, "-o", "json", "get", "deployment", "docs"}, 0, "", `"id": "docs"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := run(t, srv, "", tt.args...)
			if r.code != tt.wantCode {
				t.Errorf("exit = %d, want %d\nstdout: %s\nstderr: %s", r.code, tt.wantCode, r.stdout, r.stderr)
			}
			if tt.wantStderr == "" && r.stderr != "" {
				t.Errorf("stderr = %q, want it empty", r.stderr)
			}
			if !strings.HasPrefix(r.stderr, tt.wantStderr) {
				t.Errorf("stderr = %q, want prefix %q", r.stderr, tt.wantStderr)
			}
			if !strings.Contains(r.stdout, tt.wantStdout) {
				t.Errorf("stdout = %q, want it to contain %q", r.stdout, tt.wantStdout)
			}
		})
	}
}

// TestUsageErrorIsTwoLines: a usage mistake prints the mistake and where
// the help is, exactly two lines on stderr and exit 2, not the whole help
// (which buried the mistake under 30-60 lines); --help still prints it all.
func TestUsageErrorIsTwoLines(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"get", "deployments", "--nope"}, "berth get: flag provided but not defined: -nope\nsee 'berth get --help'\n"},
		{[]string{"--nope", "status"}, "berth: flag provided but not defined: -nope\nsee 'berth --help'\n"},
		{[]string{"frobnicate"}, "berth: unknown command \"frobnicate\"\nsee 'berth --help'\n"},
		{[]string{"computer", "frob"}, "berth computer: unknown subcommand \"frob\"\nsee 'berth computer --help'\n"},
		{[]string{"computer", "create", "--nope"}, "berth computer: flag provided but not defined: -nope\nsee 'berth computer --help'\n"},
		{[]string{"scale", "sandbox", "--max", "many"}, "berth scale: invalid value \"many\" for flag -max: parse error\nsee 'berth scale --help'\n"},
	} {
		code, out, errs := berth(t, "", tc.args...)
		if code != exitUsage || errs != tc.want || out != "" {
			t.Errorf("berth %s: exit %d, stdout %q, stderr %q; want 2, nothing, %q", strings.Join(tc.args, " "), code, out, errs, tc.want)
		}
	}
	// The hints' --help works and prints the full help on stdout.
	for _, args := range [][]string{{"--help"}, {"get", "--help"}, {"computer", "--help"}, {"scale", "--help"}} {
		code, out, errs := berth(t, "", args...)
		if code != exitOK || errs != "" || strings.Count(out, "\n") < 10 || !strings.Contains(out, "Usage:") {
			t.Errorf("berth %s: exit %d, stderr %q, %d lines of stdout; want 0 and the full help", strings.Join(args, " "), code, errs, strings.Count(out, "\n"))
		}
	}
}

func TestGetEmptyList(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, "[]")
	}))
	defer srv.Close()
	var out, errb bytes.Buffer
	e := &env{stdout: &out, stderr: &errb, server: srv.URL}
	if code := e.run(context.Background(), []string{"get", "deployments"}); code != 0 {
		t.Errorf("exit = %d, want 0", code)
	}
	if out.String() != "" || errb.String() != "No deployments found.\n" {
		t.Errorf("stdout %q, stderr %q; want nothing on stdout and a note on stderr", out.String(), errb.String())
	}
}

func TestServerUnreachable(t *testing.T) {
	// A listener that is closed again: nothing answers on its port.
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	var out, errb bytes.Buffer
	e := &env{stdout: &out, stderr: &errb, server: url}
	if code := e.run(context.Background(), []string{"get", "deployments"}); code != 1 {
		t.Errorf("exit = %d, want 1", code)
	}
	if !strings.HasPrefix(errb.String(), "error: no berth server answers at "+url) {
		t.Errorf("stderr = %q, want error: no berth server answers at …", errb.String())
	}
}

func TestRunReadsBerthServer(t *testing.T) {
	srv := newFakeServer(t)
	t.Setenv("BERTH_SERVER", srv.URL)
	var out, errb bytes.Buffer
	code := Run(context.Background(), []string{"delete", "deployment", "docs"}, strings.NewReader(""), &out, &errb)
	if code != 0 || out.String() != "deployment/docs deleted\n" {
		t.Errorf("Run = %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
	if reqs := srv.requests(); len(reqs) != 1 || reqs[0].Method != "DELETE" || reqs[0].URI != "/deployments/docs" {
		t.Errorf("server saw %+v, want one DELETE /deployments/docs", reqs)
	}
}

func TestScale(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"one flag", []string{"scale", "sandbox", "--max", "3"}, `{"max_replicas":3}`},
		{"zero is sent", []string{"scale", "--min=0", "sandbox"}, `{"min_replicas":0}`},
		{
			"every flag",
			[]string{"scale", "deployment/sandbox", "--min", "1", "--max", "4", "--warm", "1", "--target-concurrency", "20", "--scale-to-zero-after", "600", "--idle-action", "retain"},
			`{"min_replicas":1,"max_replicas":4,"warm_pool":1,"target_concurrency":20,"scale_to_zero_after_secs":600,"idle_action":"retain"}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newFakeServer(t)
			r := run(t, srv, "", tt.args...)
			if r.code != 0 {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			reqs := srv.requests()
			if len(reqs) != 1 || reqs[0].Method != "PATCH" || reqs[0].URI != "/deployments/sandbox/scaling" {
				t.Fatalf("server saw %+v, want one PATCH /deployments/sandbox/scaling", reqs)
			}
			if diff := cmp.Diff(decodeJSON(t, tt.want), decodeJSON(t, reqs[0].Body)); diff != "" {
				t.Errorf("patch mismatch (-want +got):\n%s", diff)
			}
			if !strings.HasPrefix(r.stdout, "deployment/sandbox scaled: ") {
				t.Errorf("stdout = %q", r.stdout)
			}
		})
	}
}

func TestCordonUncordon(t *testing.T) {
	srv := newFakeServer(t)
	srv.inFlight = []int{3}
	r := run(t, srv, "", "cordon", "legacy", "https://legacy.internal:443", "--reason", "kernel upgrade")
	if r.code != 0 {
		t.Fatalf("cordon: exit %d: %s", r.code, r.stderr)
	}
	if want := "upstream https://legacy.internal:443 of deployment/legacy is draining (3 in flight)\n"; r.stdout != want {
		t.Errorf("cordon stdout = %q, want %q", r.stdout, want)
	}
	r = run(t, srv, "", "uncordon", "deployment/legacy", "https://legacy.internal:443")
	if r.code != 0 {
		t.Fatalf("uncordon: exit %d: %s", r.code, r.stderr)
	}
	if want := "upstream https://legacy.internal:443 of deployment/legacy is accepting\n"; r.stdout != want {
		t.Errorf("uncordon stdout = %q, want %q", r.stdout, want)
	}
	want := []request{
		{Method: "PUT", URI: "/deployments/legacy/upstreams/https:%2F%2Flegacy.internal:443/drain", Body: `{"reason":"kernel upgrade"}`},
		{Method: "DELETE", URI: "/deployments/legacy/upstreams/https:%2F%2Flegacy.internal:443/drain"},
	}
	if diff := cmp.Diff(want, srv.requests()); diff != "" {
		t.Errorf("requests mismatch (-want +got):\n%s", diff)
	}
}

func TestDrainWaits(t *testing.T) {
	srv := newFakeServer(t)
	srv.upstream = "10.0.0.4:8080"
	// The PUT sees 2 in flight, then the polls see 2, 1, 0.
	srv.inFlight = []int{2, 1, 0}
	r := run(t, srv, "", "drain", "legacy", "10.0.0.4:8080", "--force")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	want := "upstream 10.0.0.4:8080 of deployment/legacy is draining (2 in flight)\n" +
		"upstream 10.0.0.4:8080 of deployment/legacy is drained\n"
	if r.stdout != want {
		t.Errorf("stdout = %q, want %q", r.stdout, want)
	}
	var gets int
	for _, q := range srv.requests() {
		switch {
		case q.Method == "PUT":
			if q.Body != `{"force":true}` {
				t.Errorf("drain body = %s, want {\"force\":true}", q.Body)
			}
		case q.Method == "GET" && q.URI == "/deployments/legacy":
			gets++
		}
	}
	if gets != 3 {
		t.Errorf("drain polled %d times, want 3 (until in-flight reached 0)", gets)
	}
}

func TestDrainAlreadyIdle(t *testing.T) {
	srv := newFakeServer(t)
	srv.inFlight = []int{0}
	r := run(t, srv, "", "drain", "legacy", "10.0.0.4:8080")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if want := "upstream 10.0.0.4:8080 of deployment/legacy is drained\n"; r.stdout != want {
		t.Errorf("stdout = %q, want %q", r.stdout, want)
	}
	if n := len(srv.requests()); n != 1 {
		t.Errorf("server saw %d requests, want only the PUT", n)
	}
}

// TestVersion: `berth version` reports the module version and the VCS
// stamp from the build info, "unknown" for what the build did not record.
func TestVersion(t *testing.T) {
	// Under go test the build info exists; the VCS stamp may not (test
	// binaries are not stamped), so each field is a value or "unknown",
	// never empty.
	code, out, errs := berth(t, "", "version")
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if code != 0 || errs != "" || len(lines) != 5 || !strings.HasPrefix(lines[0], "berth ") || lines[0] == "berth " {
		t.Fatalf("version: exit %d, stderr %q, stdout %q", code, errs, out)
	}
	for i, label := range []string{"revision:", "modified:", "commit time:", "go:"} {
		f := strings.Fields(strings.TrimPrefix(lines[i+1], label))
		if !strings.HasPrefix(lines[i+1], label) || len(f) != 1 {
			t.Errorf("version line %d = %q, want %s and one value", i+2, lines[i+1], label)
		}
	}
	if !strings.Contains(out, "go:          "+runtime.Version()+"\n") {
		t.Errorf("version: %q lacks the Go version %s", out, runtime.Version())
	}
	var doc map[string]string
	_, out, _ = berth(t, "", "version", "-o", "json")
	if err := json.Unmarshal([]byte(out), &doc); err != nil || doc["version"] == "" || doc["revision"] == "" || doc["modified"] == "" || doc["commitTime"] == "" {
		t.Errorf("version -o json: %q (%v)", out, err)
	}

	// A stamped build reports its stamp; an unstamped one says unknown.
	stamped := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v1.2.3"}, Settings: []debug.BuildSetting{
		{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "0123abc"}, {Key: "vcs.time", Value: "2026-12-01T10:00:00Z"}, {Key: "vcs.modified", Value: "true"},
	}}
	want := buildVersion{Version: "v1.2.3", Revision: "0123abc", Modified: "true", Time: "2026-12-01T10:00:00Z", GoVersion: "go1.26.0"}
	if got := readBuildVersion(stamped, true); got != want {
		t.Errorf("stamped: %+v, want %+v", got, want)
	}
	unknown := buildVersion{Version: "unknown", Revision: "unknown", Modified: "unknown", Time: "unknown", GoVersion: "unknown"}
	if got := readBuildVersion(nil, false); got != unknown {
		t.Errorf("no build info: %+v, want %+v", got, unknown)
	}
	want = unknown
	want.Version, want.GoVersion = "(devel)", "go1.26.0"
	if got := readBuildVersion(&debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"}}, true); got != want {
		t.Errorf("-buildvcs=false: %+v, want %+v", got, want)
	}
}
