package spec

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/berth-dev/berth/apitype"
)

// seedSpecs are valid and invalid documents for FuzzSpec and the
// idempotence test.
var seedSpecs = []string{
	`{"id":"app","routes":[{"host":"App.Example.com."}],"vm":{"driver":"process","port":8080}}`,
	`{"id":"app","vm":{"driver":"process","port":8080},"scaling":{"min_replicas":1}}`,
	`{"id":"api","routes":[{"path_prefix":"/api","strip_prefix":true}],"upstreams":["10.0.0.1:80","https://x.org"],"health":{"path":null}}`,
	`{"id":"docs","routes":[{"host_suffix":"..Docs.example.com."}],"site":{"root":""},"artifact":{"store":"local","ref":"r"}}`,
	`{"id":"docs","namespace":"web","site":{"root":"/srv/x","index":""}}`,
	`{"id":"r","routes":[{"host":"old.example.com","redirect":{"to":"https://new.example.com"}}],"upstreams":["a:1"]}`,
	`{"id":"s","routes":[{"host":"."}],"upstreams":["a:1"],"extra":{"b":[1,{"z":null,"a":"<&>"}]}}`,
	`{"id":"x","routes":[{}],"vm":{"driver":"kvm","port":0}}`,
	`{"id":"","upstreams":[]}`,
	`{"id":"g","routes":[{"host":"g.example.com"}],"vm":{"driver":"firecracker","port":1,"workspace":{"store":"local","auth":{"secret":"k","namespace":"evil"}}},"scaling":{"max_replicas":1},"auth":{"provider":["jwt","app-token"],"jwt":{"jwks_url":"https://i/jwks","algorithms":["RS256"],"issuer":"i"}}}`,
	`{"id":"n","routes":null,"discovery":{"service_id":"svc"},"update":{"working_dir":"/w","commands":["make"]}}`,
}

// FuzzSpec runs arbitrary documents through the whole pipeline: nothing may
// panic, Normalize must be idempotent, and a spec that validates must
// validate again, with the same ETag, after a JSON round trip — which is
// what storing and reloading it does.
func FuzzSpec(f *testing.F) {
	for _, s := range seedSpecs {
		f.Add([]byte(s))
	}
	o := Options{BaseDomain: "apps.example.net", SitesDir: "/srv/sites", Drivers: []string{"process", "firecracker", "kvm"}}
	f.Fuzz(func(t *testing.T, data []byte) {
		var a, b apitype.DeploymentSpec
		if json.Unmarshal(data, &a) != nil || json.Unmarshal(data, &b) != nil {
			t.Skip()
		}
		Normalize(&a, o)
		Normalize(&b, o)
		Normalize(&b, o)
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("Normalize is not idempotent:\nonce  %+v\ntwice %+v", a, b)
		}
		err := Validate(&a, o)
		canon, cerr := Canonical(&a)
		etag, eerr := ETag(&a)
		if (cerr == nil) != (eerr == nil) {
			t.Fatalf("Canonical error %v but ETag error %v", cerr, eerr)
		}
		_ = Kind(&a)
		_ = Health(&a)
		_ = Scaling(a.Scaling)
		if err != nil {
			if _, ok := err.(*FieldError); !ok {
				t.Fatalf("Validate returned %T, want *FieldError", err)
			}
			return
		}
		if cerr != nil {
			t.Fatalf("Canonical of a valid spec: %v", cerr)
		}
		raw, err := json.Marshal(&a)
		if err != nil {
			t.Fatalf("marshal a valid spec: %v", err)
		}
		var c apitype.DeploymentSpec
		if err := json.Unmarshal(raw, &c); err != nil {
			t.Fatalf("re-decode %s: %v", raw, err)
		}
		if err := Validate(&c, o); err != nil {
			t.Fatalf("valid spec fails after a round trip: %v\n%s", err, raw)
		}
		Normalize(&c, o)
		if err := Validate(&c, o); err != nil {
			t.Fatalf("valid spec fails after a round trip and Normalize: %v\n%s", err, raw)
		}
		canon2, err := Canonical(&c)
		if err != nil {
			t.Fatal(err)
		}
		if etag2, _ := ETag(&c); etag2 != etag {
			t.Fatalf("ETag changed over a round trip:\n%s\n%s", canon, canon2)
		}
	})
}
