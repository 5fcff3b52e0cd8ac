package spec

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/google/go-cmp/cmp"
)

func decode(t *testing.T, js string) *apitype.DeploymentSpec {
	t.Helper()
	var s apitype.DeploymentSpec
	if err := json.Unmarshal([]byte(js), &s); err != nil {
		t.Fatalf("decode %s: %v", js, err)
	}
	return &s
}

func TestKind(t *testing.T) {
	tests := []struct {
		js   string
		want apitype.DeploymentKind
	}{
		{`{"id":"a","vm":{"driver":"process","port":1}}`, apitype.KindVM},
		{`{"id":"a","upstreams":["a:1"]}`, apitype.KindStatic},
		{`{"id":"a","discovery":{"service_id":"x"}}`, apitype.KindStatic},
		{`{"id":"a","site":{"root":"/x"}}`, apitype.KindSite},
		{`{"id":"a","site":{"root":"/x"},"upstreams":["a:1"]}`, apitype.KindStatic},
		{`{"id":"a","upstreams":[]}`, apitype.KindVM},
	}
	for _, tt := range tests {
		if got := Kind(decode(t, tt.js)); got != tt.want {
			t.Errorf("Kind(%s) = %s, want %s", tt.js, got, tt.want)
		}
	}
}

func TestNormalize(t *testing.T) {
	in := decode(t, `{
		"id": "Shop",
		"namespace": "team",
		"routes": [
			{"host": "Shop.Example.COM.", "host_suffix": "..Example.org."},
			{"path_prefix": "/old", "redirect": {"to": "https://new.example.com"}},
			{"path_prefix": "/keep", "redirect": {"to": "https://new.example.com", "status": 302, "keep_path": false}}
		],
		"vm": {
			"driver": "process", "port": 8080,
			"env_from": [{"secret": "db", "namespace": "other"}],
			"mounts": [{"path": "/data", "store": "local", "ref": "r", "auth": {"secret": "st", "namespace": "evil"}}],
			"workspace": {"store": "local", "auth": {"secret": "ws"}}
		},
		"scaling": {"max_replicas": 2},
		"build": {"repo": "r", "auth": {"secret": "git", "namespace": "other"}},
		"auth": {"provider": "jwt", "client_secret": {"secret": "cs"}, "jwt": {"secret": {"secret": "hs"}, "algorithms": ["HS256"], "issuer": "i"}}
	}`)
	Normalize(in, Options{BaseDomain: "apps.example.net"})

	want := decode(t, `{
		"id": "Shop",
		"namespace": "team",
		"routes": [
			{"host": "shop.example.com", "host_suffix": "example.org"},
			{"path_prefix": "/old", "redirect": {"to": "https://new.example.com", "status": 301, "keep_path": true}},
			{"path_prefix": "/keep", "redirect": {"to": "https://new.example.com", "status": 302, "keep_path": false}}
		],
		"vm": {
			"driver": "process", "port": 8080,
			"env_from": [{"secret": "db", "namespace": "team"}],
			"mounts": [{"path": "/data", "store": "local", "ref": "r", "auth": {"secret": "st", "namespace": "team"}}],
			"workspace": {"store": "local", "auth": {"secret": "ws", "namespace": "team"}}
		},
		"scaling": {"min_replicas": 0, "max_replicas": 2, "warm_pool": 0, "target_concurrency": 10,
			"scale_to_zero_after_secs": 300, "cold_start_timeout_secs": 120, "drain_timeout_secs": 30,
			"idle_action": "destroy", "boot_timeout_secs": 300},
		"build": {"repo": "r", "auth": {"secret": "git", "namespace": "team"}},
		"auth": {"provider": "jwt", "client_secret": {"secret": "cs", "namespace": "team"},
			"jwt": {"secret": {"secret": "hs", "namespace": "team"}, "algorithms": ["HS256"], "issuer": "i"}}
	}`)
	// A host rule exists, so no auto route was added.
	if diff := cmp.Diff(want, in); diff != "" {
		t.Errorf("Normalize (-want +got):\n%s", diff)
	}
}

func TestNormalizeAutoRoute(t *testing.T) {
	o := Options{BaseDomain: ".Apps.Example.NET.", Drivers: []string{"process"}}
	tests := []struct {
		name string
		js   string
		want []apitype.RouteRule
	}{
		{"static without routes", `{"id":"Api","upstreams":["a:1"]}`,
			[]apitype.RouteRule{{Host: "api.apps.example.net"}}},
		{"path-only vm", `{"id":"w","routes":[{"path_prefix":"/w"}],"vm":{"driver":"process","port":1}}`,
			[]apitype.RouteRule{{PathPrefix: "/w"}, {Host: "w.apps.example.net"}}},
		{"route-less vm stays route-less", `{"id":"w","vm":{"driver":"process","port":1}}`,
			[]apitype.RouteRule{}},
		{"suffix rule counts as host rule", `{"id":"s","routes":[{"host_suffix":"x.org"}],"site":{"root":"/x"}}`,
			[]apitype.RouteRule{{HostSuffix: "x.org"}}},
		{"invalid id gets none", `{"id":"../x","upstreams":["a:1"]}`,
			[]apitype.RouteRule{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := decode(t, tt.js)
			Normalize(s, o)
			if diff := cmp.Diff(tt.want, s.Routes); diff != "" {
				t.Errorf("routes (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNormalizeSite(t *testing.T) {
	o := Options{SitesDir: "/var/lib/berth/sites"}
	s := decode(t, `{"id":"docs","routes":[{"path_prefix":"/"}],"site":{"root":""}}`)
	Normalize(s, o)
	want := &apitype.SiteSpec{Root: "/var/lib/berth/sites/default/docs", Index: "index.html", CacheControl: "public, max-age=300"}
	if diff := cmp.Diff(want, s.Site); diff != "" {
		t.Errorf("site (-want +got):\n%s", diff)
	}

	s = decode(t, `{"id":"docs","namespace":"web","routes":[{"path_prefix":"/"}],"site":{"root":"","index":"home.htm","cache_control":"no-store"}}`)
	Normalize(s, o)
	want = &apitype.SiteSpec{Root: "/var/lib/berth/sites/web/docs", Index: "home.htm", CacheControl: "no-store"}
	if diff := cmp.Diff(want, s.Site); diff != "" {
		t.Errorf("site with namespace (-want +got):\n%s", diff)
	}

	// An explicit root is never replaced; a bad namespace gets no managed root.
	s = decode(t, `{"id":"docs","namespace":"../../etc","site":{"root":""}}`)
	Normalize(s, o)
	if s.Site.Root != "" {
		t.Errorf("root for an invalid namespace = %q, want empty", s.Site.Root)
	}
	s = decode(t, `{"id":"docs","site":{"root":"/srv/x"}}`)
	Normalize(s, o)
	if s.Site.Root != "/srv/x" {
		t.Errorf("explicit root = %q, want /srv/x", s.Site.Root)
	}
}

func TestNormalizeNamespaceAndSecrets(t *testing.T) {
	s := decode(t, `{"id":"a","upstreams":["a:1"],"update":{"working_dir":"/w","commands":["x"],
		"auth":{"secret":"s","namespace":"x"},"env_from":[{"secret":"e","namespace":"x"}]},"artifact":{"store":"local","ref":"r","auth":{"secret":"a"}}}`)
	Normalize(s, Options{})
	if s.Namespace != "" {
		t.Errorf("namespace = %q, want absent", s.Namespace)
	}
	for name, got := range map[string]string{
		"update.auth":        s.Update.Auth.Namespace,
		"update.env_from[0]": s.Update.EnvFrom[0].Namespace,
		"artifact.auth":      s.Artifact.Auth.Namespace,
	} {
		if got != "default" {
			t.Errorf("%s namespace = %q, want default", name, got)
		}
	}
	if s.Scaling != nil {
		t.Errorf("static spec got scaling %+v, want none", s.Scaling)
	}
	if s.Routes == nil {
		t.Error("routes = nil, want an empty list so it encodes as []")
	}
}

func TestNormalizeIdempotent(t *testing.T) {
	o := Options{BaseDomain: "example.net", SitesDir: "/srv/sites", Drivers: []string{"process"}}
	for _, js := range seedSpecs {
		a, b := decode(t, js), decode(t, js)
		Normalize(a, o)
		Normalize(b, o)
		Normalize(b, o)
		if diff := cmp.Diff(a, b); diff != "" {
			t.Errorf("Normalize twice differs from once for %s (-once +twice):\n%s", js, diff)
		}
	}
}

func TestExtraPreserved(t *testing.T) {
	s := decode(t, `{"zeta":{"b":1,"a":[{"y":2,"x":1}]},"id":"a","ingress":{"public":true,"cloud":false},"upstreams":["a:1"],"routes":[{"path_prefix":"/"}]}`)
	Normalize(s, Options{})
	if err := Validate(s, Options{}); err != nil {
		t.Fatal(err)
	}
	got, err := Canonical(s)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"id":"a","ingress":{"cloud":false,"public":true},"routes":[{"path_prefix":"/"}],"upstreams":["a:1"],"zeta":{"a":[{"x":1,"y":2}],"b":1}}`
	if string(got) != want {
		t.Errorf("Canonical =\n%s\nwant\n%s", got, want)
	}
}

func TestCanonical(t *testing.T) {
	s := decode(t, `{"id":"a<b>&","routes":[{"redirect":{"to":"https://x.org/?a=1&b=2"},"host":"h"}],"vm":{"port":1,"driver":"process","env_vars":{"Z":"1","A":"2"}},"big":1.50,"n":1e3}`)
	got, err := Canonical(s)
	if err != nil {
		t.Fatal(err)
	}
	// Keys sorted at every depth, HTML left unescaped, number literals kept.
	want := `{"big":1.50,"id":"a<b>&","n":1e3,"routes":[{"host":"h","redirect":{"to":"https://x.org/?a=1&b=2"}}],"vm":{"driver":"process","env_vars":{"A":"2","Z":"1"},"port":1}}`
	if string(got) != want {
		t.Errorf("Canonical =\n%s\nwant\n%s", got, want)
	}
}

func TestETag(t *testing.T) {
	a := decode(t, `{"id":"x","routes":[{"host":"a.com","path_prefix":"/p"}],"upstreams":["a:1"],"extra":{"k1":1,"k2":2}}`)
	b := decode(t, `{"extra":{"k2":2,"k1":1},"upstreams":["a:1"],"routes":[{"path_prefix":"/p","host":"a.com"}],"id":"x"}`)
	ea, err := ETag(a)
	if err != nil {
		t.Fatal(err)
	}
	eb, err := ETag(b)
	if err != nil {
		t.Fatal(err)
	}
	if ea != eb {
		t.Errorf("ETag depends on key order: %s vs %s", ea, eb)
	}
	if len(ea) != 66 || ea[0] != '"' || ea[65] != '"' || strings.ToLower(ea) != ea {
		t.Errorf("ETag = %s, want a quoted lowercase 64-hex tag", ea)
	}
	if p, err := ParseIfMatch(ea); err != nil || p != ea {
		t.Errorf("ParseIfMatch(ETag) = %q, %v; want %q", p, err, ea)
	}
	b.Upstreams = []string{"a:2"}
	if ec, _ := ETag(b); ec == ea {
		t.Error("ETag did not change with the spec")
	}
	// A fixed vector (sha256 of {"id":"a","routes":[]}), so an accidental
	// change of the canonical form or the tag format shows.
	c := &apitype.DeploymentSpec{ID: "a", Routes: []apitype.RouteRule{}}
	if got, err := ETag(c); err != nil || got != `"4cb4289be99e85d22e7ae0db74bb74340ba04e7206232a3777722cc266eaba00"` {
		t.Errorf("ETag = %s, %v; want %s", got, err, `"4cb4289be99e85d22e7ae0db74bb74340ba04e7206232a3777722cc266eaba00"`)
	}
}

func TestParseIfMatch(t *testing.T) {
	hex := strings.Repeat("ab", 32)
	tests := []struct {
		in   string
		want string // "" means an error
	}{
		{`"` + hex + `"`, `"` + hex + `"`},
		{` "` + hex + `"` + "\t", `"` + hex + `"`},
		{`"` + strings.ToUpper(hex) + `"`, `"` + hex + `"`},
		{``, ""},
		{`*`, ""},
		{`W/"` + hex + `"`, ""},
		{`"` + hex + `", "` + hex + `"`, ""},
		{hex, ""},
		{`"` + hex[:63] + `"`, ""},
		{`"` + hex + `0"`, ""},
		{`"` + hex[:63] + `g"`, ""},
		{`"abc"`, ""},
	}
	for _, tt := range tests {
		got, err := ParseIfMatch(tt.in)
		if tt.want == "" {
			if err == nil {
				t.Errorf("ParseIfMatch(%q) = %q, want an error", tt.in, got)
			} else if !strings.HasPrefix(err.Error(), "If-Match must be one strong ETag") {
				t.Errorf("ParseIfMatch(%q) error = %q, want the If-Match message", tt.in, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseIfMatch(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

func TestScaling(t *testing.T) {
	want := Policy{0, 5, 0, 10, 300, 120, 30, apitype.IdleDestroy, 300}
	if got := Scaling(nil); got != want {
		t.Errorf("Scaling(nil) = %+v, want %+v", got, want)
	}
	p := &apitype.ScalingPolicy{MaxReplicas: intp(1), BootTimeoutSecs: intp(0), IdleAction: apitype.IdleRetain}
	want.MaxReplicas, want.BootTimeoutSecs, want.IdleAction = 1, 0, apitype.IdleRetain
	if got := Scaling(p); got != want {
		t.Errorf("Scaling = %+v, want %+v", got, want)
	}
}

func TestHealth(t *testing.T) {
	tests := []struct {
		name string
		js   string
		want Check
	}{
		{"defaults for vm", `{"id":"a","vm":{"driver":"process","port":8080}}`,
			Check{Path: "/", Port: 8080, Timeout: 2 * time.Second}},
		{"defaults for static", `{"id":"a","upstreams":["a:1"]}`,
			Check{Path: "/", Timeout: 2 * time.Second}},
		{"tcp", `{"id":"a","vm":{"driver":"process","port":80},"health":{"path":null}}`,
			Check{Path: "", Port: 80, Timeout: 2 * time.Second}},
		{"explicit", `{"id":"a","vm":{"driver":"process","port":80},"health":{"path":"/hz","port":9,"timeout_secs":7,"expected_header":{"name":"x-heyo-revision","value":"abc"}}}`,
			Check{Path: "/hz", Port: 9, Timeout: 7 * time.Second, Expect: &apitype.ExpectedHeader{Name: "x-heyo-revision", Value: "abc"}}},
		{"zero timeout is one second", `{"id":"a","upstreams":["a:1"],"health":{"timeout_secs":0}}`,
			Check{Path: "/", Timeout: time.Second}},
		{"huge timeout is capped", `{"id":"a","upstreams":["a:1"],"health":{"timeout_secs":9223372036854775807}}`,
			Check{Path: "/", Timeout: 24 * time.Hour}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, Health(decode(t, tt.js))); diff != "" {
				t.Errorf("Health (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPatchScaling(t *testing.T) {
	cur := fillScaling(&apitype.ScalingPolicy{MaxReplicas: intp(3)})
	got, err := PatchScaling(cur, []byte(` {"min_replicas": 2, "idle_action": "retain", "warm_pool": null} `))
	if err != nil {
		t.Fatal(err)
	}
	want := *cur
	want.MinReplicas, want.IdleAction, want.WarmPool = intp(2), apitype.IdleRetain, nil
	if diff := cmp.Diff(&want, got); diff != "" {
		t.Errorf("merged (-want +got):\n%s", diff)
	}
	if *cur.MinReplicas != 0 || cur.IdleAction != apitype.IdleDestroy || cur.WarmPool == nil {
		t.Errorf("PatchScaling modified cur: %+v", cur)
	}
	if got, err := PatchScaling(nil, []byte(`{"max_replicas":1}`)); err != nil || *got.MaxReplicas != 1 || got.MinReplicas != nil {
		t.Errorf("PatchScaling(nil) = %+v, %v", got, err)
	}

	errs := []struct {
		name, body, want string
		field            bool
	}{
		{"array", `[1]`, "scaling patch must be a JSON object", false},
		{"null", `null`, "scaling patch must be a JSON object", false},
		{"empty", ``, "scaling patch must be a JSON object", false},
		{"broken", `{"max_replicas":`, "scaling patch must be a JSON object", false},
		{"unknown", `{"max":1,"min":2,"max_replicas":1}`, `scaling: unknown field(s) "max", "min"`, true},
		{"type", `{"max_replicas":"3"}`, "scaling.max_replicas: must be an integer", true},
		{"float", `{"max_replicas":1.5}`, "scaling.max_replicas: must be an integer", true},
		{"idle type", `{"idle_action":1}`, "scaling.idle_action: must be a string", true},
		{"invalid result", `{"min_replicas":4}`, "invalid scaling policy: scaling.min_replicas: min_replicas (4) exceeds max_replicas (3)", true},
		{"invalid idle", `{"idle_action":"sleep"}`, "invalid scaling policy: scaling.idle_action", true},
	}
	for _, tt := range errs {
		t.Run(tt.name, func(t *testing.T) {
			_, err := PatchScaling(cur, []byte(tt.body))
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Fatalf("PatchScaling(%s) = %v, want %q", tt.body, err, tt.want)
			}
			var fe *FieldError
			if got := errors.As(err, &fe); got != tt.field {
				t.Errorf("error is a FieldError: %v, want %v", got, tt.field)
			}
		})
	}
}

func TestUpstream(t *testing.T) {
	tests := []struct {
		in   string
		addr string
		tls  bool
		err  string // substring; "" means success
	}{
		{"127.0.0.1:9000", "127.0.0.1:9000", false, ""},
		{"API.internal:080", "api.internal:80", false, ""},
		{"my_svc.local:1", "my_svc.local:1", false, ""},
		{"[::1]:8080", "[::1]:8080", false, ""},
		{"https://api.example.com", "api.example.com:443", true, ""},
		{"HTTPS://api.example.com:8443", "api.example.com:8443", true, ""},
		{"https://[2001:db8::1]", "[2001:db8::1]:443", true, ""},
		{"https://[2001:db8::1]:444", "[2001:db8::1]:444", true, ""},
		{"", "", false, "empty"},
		{"host", "", false, "missing port"},
		{"http://host:80", "", false, `scheme "http" is not supported`},
		{"ftp://host", "", false, "scheme"},
		{"https://host/path", "", false, "path"},
		{"host:80/x", "", false, "path"},
		{"https://host?q", "", false, "path"},
		{"https://user:pw@host", "", false, "userinfo"},
		{"host:0", "", false, "1..65535"},
		{"host:65536", "", false, "1..65535"},
		{"host:+80", "", false, "1..65535"},
		{"host:http", "", false, "1..65535"},
		{":80", "", false, "no host"},
		{"https://", "", false, "no host"},
		{" host:80", "", false, "spaces"},
		{"ho st:80", "", false, "spaces"},
		{"::1:80", "", false, "IPv6"},
		{"[nothost]:80", "", false, "IPv6"},
		{"https://[::1", "", false, ""},
		{"https://host]", "", false, "invalid character"},
		{"a..b:1", "", false, "empty label"},
		{"bad$host:1", "", false, "invalid character"},
	}
	for _, tt := range tests {
		addr, tls, err := Upstream(tt.in)
		if tt.addr == "" {
			if err == nil {
				t.Errorf("Upstream(%q) = %q, %v; want an error", tt.in, addr, tls)
			} else if !strings.Contains(err.Error(), tt.err) {
				t.Errorf("Upstream(%q) error = %q, want it to contain %q", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil || addr != tt.addr || tls != tt.tls {
			t.Errorf("Upstream(%q) = %q, %v, %v; want %q, %v", tt.in, addr, tls, err, tt.addr, tt.tls)
		}
	}
}
