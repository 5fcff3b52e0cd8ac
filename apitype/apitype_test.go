package apitype_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/contracttest"
	"github.com/google/go-cmp/cmp"
)

// sameJSON reports whether a and b are equal as JSON values.
func sameJSON(t *testing.T, a, b []byte) bool {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal(a, &va); err != nil {
		t.Fatalf("unmarshal %s: %v", a, err)
	}
	if err := json.Unmarshal(b, &vb); err != nil {
		t.Fatalf("unmarshal %s: %v", b, err)
	}
	return reflect.DeepEqual(va, vb)
}

// roundTrip decodes in into a new T and encodes it again.
func roundTrip[T any](t *testing.T, in string) (T, []byte) {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(in), &v); err != nil {
		t.Fatalf("decode %s: %v", in, err)
	}
	out, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("encode: %v", err)
	}
	return v, out
}

// specWithUnknowns carries keys this build has no name for at the top level
// (including nested values of every JSON kind) alongside known ones, and a
// complete gate and VM so the nested custom types are exercised too.
const specWithUnknowns = `{
  "id": "web",
  "namespace": "team-a",
  "routes": [{"host": "web.example.com", "strip_prefix": false}],
  "vm": {"driver": "firecracker", "image": "agent-base", "port": 8080, "size_class": "medium", "open_ports": [9229]},
  "scaling": {"min_replicas": 0, "max_replicas": 1, "idle_action": "retain"},
  "health": {"path": null, "port": 8080},
  "auth": {"provider": "google", "client_id": "cid", "public_paths": ["/healthz", {"path": "/api/", "scope": "view"}]},
  "ingress": {"cloud": true, "public": ["1.2.3.4"]},
  "future_flag": true,
  "weights": [1, 2.5, null],
  "note": "kept \u00e9 verbatim",
  "empty": {}
}`

func TestDeploymentSpecKeepsUnknownFields(t *testing.T) {
	spec, out := roundTrip[apitype.DeploymentSpec](t, specWithUnknowns)
	want := []byte(specWithUnknowns)
	// The bare-string public path is re-encoded in its object form, which is
	// what it means; everything else is unchanged.
	want = bytes.Replace(want, []byte(`["/healthz",`), []byte(`[{"path":"/healthz","scope":"admin"},`), 1)
	if !sameJSON(t, out, want) {
		t.Errorf("round trip changed the spec:\n got %s\nwant %s", out, want)
	}
	if got := len(spec.Extra); got != 5 {
		t.Errorf("len(Extra) = %d, want 5 (ingress, future_flag, weights, note, empty): %v", got, spec.Extra)
	}
	if spec.ID != "web" || spec.VM == nil || spec.VM.Port != 8080 || spec.Scaling.MinReplicas == nil || *spec.Scaling.MinReplicas != 0 {
		t.Errorf("known fields not decoded: %+v", spec)
	}
	if _, ok := spec.Extra["id"]; ok {
		t.Error("a declared key ended up in Extra")
	}
}

func TestExtraNeverOverridesKnownFields(t *testing.T) {
	spec := apitype.DeploymentSpec{
		ID:     "web",
		Routes: []apitype.RouteRule{},
		Extra: map[string]json.RawMessage{
			"id":        json.RawMessage(`"impostor"`),
			"namespace": json.RawMessage(`"impostor"`), // declared, though omitted here
			"zeta":      json.RawMessage(` { "a" : 1 } `),
		},
	}
	out, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"id":"web","routes":[],"zeta":{"a":1}}`; string(out) != want {
		t.Errorf("got %s, want %s", out, want)
	}
}

func TestExtraKeysMatchExactly(t *testing.T) {
	// encoding/json alone would decode "ID" into the id field.
	spec, out := roundTrip[apitype.DeploymentSpec](t, `{"id":"web","ID":"other","routes":[]}`)
	if spec.ID != "web" {
		t.Errorf("ID = %q, want web", spec.ID)
	}
	if string(spec.Extra["ID"]) != `"other"` {
		t.Errorf(`Extra["ID"] = %s, want "other"`, spec.Extra["ID"])
	}
	if !sameJSON(t, out, []byte(`{"id":"web","ID":"other","routes":[]}`)) {
		t.Errorf("got %s", out)
	}
}

func TestExtraOnNestedAndListTypes(t *testing.T) {
	in := `{"caller":"app-token","admin_scope":"view","fleet":false,"confined":true,
		"may":{"read_view_routes":true,"use_admin_routes":false,"use_shell":false},
		"token":{"id":"0123456789ab","name":"ci","minted_by":"op"},
		"brand_new":[1]}`
	who, out := roundTrip[apitype.WhoAmI](t, in)
	if !sameJSON(t, out, []byte(in)) {
		t.Errorf("round trip changed WhoAmI:\n got %s\nwant %s", out, in)
	}
	if string(who.May.Extra["use_shell"]) != "false" || string(who.Token.Extra["minted_by"]) != `"op"` {
		t.Errorf("nested extras not kept: may=%v token=%v", who.May.Extra, who.Token.Extra)
	}

	ds := `{"serviceId":"svc","upstreams":[{"peer":"10.0.0.1:80","draining":false,"inFlight":2,"zone":"a"}],"staged":true}`
	_, out = roundTrip[apitype.DiscoveryStatus](t, ds)
	if !sameJSON(t, out, []byte(ds)) {
		t.Errorf("round trip changed DiscoveryStatus:\n got %s\nwant %s", out, ds)
	}
}

func TestExtraDecodeErrors(t *testing.T) {
	for _, in := range []string{`[]`, `"x"`, `{"id": 5, "routes": []}`, `{"id":"a","routes":[],"x":}`} {
		var spec apitype.DeploymentSpec
		if err := json.Unmarshal([]byte(in), &spec); err == nil {
			t.Errorf("decoding %s: no error", in)
		}
	}
	bad := apitype.DeploymentSpec{ID: "a", Extra: map[string]json.RawMessage{"x": json.RawMessage(`{`)}}
	if _, err := json.Marshal(bad); err == nil {
		t.Error("encoding invalid Extra JSON: no error")
	}
}

func TestProviderList(t *testing.T) {
	tests := []struct {
		in, out string
		want    []apitype.AuthProvider
	}{
		{`{"provider":"google"}`, `{"provider":"google"}`, []apitype.AuthProvider{apitype.ProviderGoogle}},
		{`{"provider":["jwt"]}`, `{"provider":["jwt"]}`, []apitype.AuthProvider{apitype.ProviderJWT}},
		{`{"provider":["google","app-token"]}`, `{"provider":["google","app-token"]}`, []apitype.AuthProvider{apitype.ProviderGoogle, apitype.ProviderAppToken}},
		{`{"provider_ref":"corp"}`, `{"provider_ref":"corp"}`, nil},
		{`{"provider":[]}`, `{"provider":[]}`, []apitype.AuthProvider{}},
	}
	for _, tt := range tests {
		gate, out := roundTrip[apitype.AuthGate](t, tt.in)
		if diff := cmp.Diff(tt.want, gate.Provider.Providers); diff != "" {
			t.Errorf("%s: providers (-want +got):\n%s", tt.in, diff)
		}
		if string(out) != tt.out {
			t.Errorf("%s: re-encoded as %s, want %s", tt.in, out, tt.out)
		}
	}

	out, err := json.Marshal(apitype.AuthGate{Provider: apitype.Providers(apitype.ProviderJWT)})
	if err != nil || string(out) != `{"provider":"jwt"}` {
		t.Errorf("one provider built in Go: got %s, %v; want a bare string", out, err)
	}
	if !apitype.Providers(apitype.ProviderGoogle, apitype.ProviderJWT).Has(apitype.ProviderJWT) {
		t.Error("Has(jwt) = false")
	}

	for _, bad := range []string{`{"provider":5}`, `{"provider":{"a":1}}`, `{"provider":[1]}`} {
		var g apitype.AuthGate
		if err := json.Unmarshal([]byte(bad), &g); err == nil {
			t.Errorf("decoding %s: no error", bad)
		}
	}

	// AuthProviderView.provider is required: an empty list is still written.
	out, err = json.Marshal(apitype.AuthProviderView{Name: "n", Namespace: "ns"})
	if err != nil || !bytes.Contains(out, []byte(`"provider":[]`)) {
		t.Errorf("empty required provider list: got %s, %v", out, err)
	}
}

func TestPublicPath(t *testing.T) {
	var paths []apitype.PublicPath
	in := `["/healthz", {"path": "/api/", "scope": "view"}, {"path": "/open", "scope": "public"}]`
	if err := json.Unmarshal([]byte(in), &paths); err != nil {
		t.Fatal(err)
	}
	want := []apitype.PublicPath{
		{Path: "/healthz", Scope: apitype.PathAdmin},
		{Path: "/api/", Scope: apitype.PathView},
		{Path: "/open", Scope: apitype.PathPublic},
	}
	if diff := cmp.Diff(want, paths); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	var p apitype.PublicPath
	if err := json.Unmarshal([]byte(`7`), &p); err == nil {
		t.Error("decoding 7: no error")
	}
}

func TestOptionalFieldsOmitted(t *testing.T) {
	zero, one := 0, 1
	no := false
	tests := []struct {
		v    any
		want string
	}{
		{apitype.RouteRule{Host: "a"}, `{"host":"a"}`},
		{apitype.RouteRule{}, `{}`},
		{apitype.RouteRule{StripPrefix: &no}, `{"strip_prefix":false}`},
		{apitype.ScalingPolicy{MinReplicas: &zero, MaxReplicas: &one}, `{"min_replicas":0,"max_replicas":1}`},
		{apitype.VmSpec{Driver: apitype.DriverProcess, Port: 80}, `{"driver":"process","port":80}`},
		{apitype.DeploymentSpec{ID: "x"}, `{"id":"x","routes":null}`},
		// Required nullable fields encode as null.
		{apitype.Bucket{Count: 3}, `{"le":null,"count":3}`},
		{apitype.UpstreamTrafficStatus{}, `{"deployment_id":"","upstream":"","state":"","healthy":false,"in_flight":0,"reason":null,"started_at":null}`},
		// Optional nullable fields are omitted when absent.
		{apitype.JobRecord{ID: "j", Log: []string{}}, `{"id":"j","deployment":"","kind":"","status":"","started_at":0,"log":[]}`},
		{apitype.MintedToken{TokenSummary: apitype.TokenSummary{ID: "t", Deployments: []string{"*"}}, Token: "s"},
			`{"id":"t","name":"","admin":"","deployments":["*"],"created_at":0,"token":"s"}`},
		{apitype.Error{Message: "no deployment \"x\""}, `{"error":"no deployment \"x\""}`},
	}
	for _, tt := range tests {
		got, err := json.Marshal(tt.v)
		if err != nil {
			t.Errorf("%T: %v", tt.v, err)
			continue
		}
		if string(got) != tt.want {
			t.Errorf("%T:\n got %s\nwant %s", tt.v, got, tt.want)
		}
	}
}

func TestHealthPathNullIsNotAbsent(t *testing.T) {
	tests := []struct {
		in       string
		null     bool
		value    string
		hasValue bool
	}{
		{`{"port":80}`, false, "", false},
		{`{"path":null}`, true, "", false},
		{`{"path":"/healthz"}`, false, "/healthz", true},
	}
	for _, tt := range tests {
		hc, out := roundTrip[apitype.HealthCheck](t, tt.in)
		v, ok := hc.Path.Get()
		if hc.Path.IsNull() != tt.null || ok != tt.hasValue || v != tt.value {
			t.Errorf("%s: Path = %+v", tt.in, hc.Path)
		}
		if string(out) != tt.in {
			t.Errorf("%s: re-encoded as %s", tt.in, out)
		}
	}
}

func TestTokenPatchDistinguishesNull(t *testing.T) {
	tests := []struct {
		p    apitype.TokenPatch
		want string
	}{
		{apitype.TokenPatch{}, `{}`},
		{apitype.TokenPatch{Namespace: apitype.NullValue[string]()}, `{"namespace":null}`},
		{apitype.TokenPatch{Namespace: apitype.Some("team-a"), ExpiresAt: apitype.Some[int64](1700000000)}, `{"namespace":"team-a","expires_at":1700000000}`},
		{apitype.TokenPatch{ExpiresAt: apitype.NullValue[int64]()}, `{"expires_at":null}`},
	}
	for _, tt := range tests {
		got, err := json.Marshal(tt.p)
		if err != nil || string(got) != tt.want {
			t.Errorf("Marshal(%+v) = %s, %v; want %s", tt.p, got, err, tt.want)
			continue
		}
		var back apitype.TokenPatch
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tt.p, back); diff != "" {
			t.Errorf("%s decoded differently (-want +got):\n%s", got, diff)
		}
	}
}

func TestSecretPatchNullRemovesKey(t *testing.T) {
	var p apitype.SecretPatch
	if err := json.Unmarshal([]byte(`{"data":{"keep":"v","drop":null}}`), &p); err != nil {
		t.Fatal(err)
	}
	if v, ok := p.Data["drop"]; !ok || v != nil {
		t.Errorf(`Data["drop"] = %v, %v; want nil, true`, v, ok)
	}
	if v := p.Data["keep"]; v == nil || *v != "v" {
		t.Errorf(`Data["keep"] = %v`, v)
	}
}

func TestErrorIsAnError(t *testing.T) {
	var err error = &apitype.Error{Message: "plugin disabled", Code: "plugin_disabled"}
	if got := err.Error(); got != "plugin disabled [plugin_disabled]" {
		t.Errorf("Error() = %q", got)
	}
}

// TestEncodedSpecMatchesContract checks what the Go types emit, not just
// their declarations: a fully populated spec encodes to keys the contract
// declares.
func TestEncodedSpecMatchesContract(t *testing.T) {
	c := contracttest.MustLoad(t)
	var spec apitype.DeploymentSpec
	if err := json.Unmarshal([]byte(specWithUnknowns), &spec); err != nil {
		t.Fatal(err)
	}
	spec.Extra = nil
	out, err := json.Marshal(apitype.DeploymentStatus{Spec: spec, Kind: apitype.KindVM, VMs: []apitype.VmStatus{{SandboxID: "sb"}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.CheckJSON("DeploymentStatus", out); err != nil {
		t.Error(err)
	}
}
