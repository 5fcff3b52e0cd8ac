package spec

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/berth-dev/berth/apitype"
)

// UnsupportedSpecs are well-formed specs that each set one section berth
// validates but does not act on, keyed by the field the refusal names.
var unsupportedSpecs = map[string]string{
	"update.auth": `{"id":"a","routes":[{"host":"a.test"}],"upstreams":["127.0.0.1:9000"],"update":{"working_dir":"/srv/a","commands":["make"],"auth":{"secret":"git"}}}`,
}

// TestUnsupportedSections: a section berth does not act on is refused
// naming it, not stored and ignored.
func TestUnsupportedSections(t *testing.T) {
	for field, doc := range unsupportedSpecs {
		var s apitype.DeploymentSpec
		if err := json.Unmarshal([]byte(doc), &s); err != nil {
			t.Fatalf("%s: %v", field, err)
		}
		Normalize(&s, testOpts)
		err := Validate(&s, testOpts)
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != field || !strings.HasPrefix(fe.Msg, "not supported yet") {
			t.Errorf("%s: Validate = %v, want %s: not supported yet", field, err, field)
		}
	}
}

// TestDiscoveryNeedsFleet: discovery is refused, naming the field, on a
// server outside a fleet, and beside upstreams; in a fleet it passes.
func TestDiscoveryNeedsFleet(t *testing.T) {
	doc := `{"id":"a","routes":[{"host":"a.test"}],"discovery":{"service_id":"svc"}}`
	both := `{"id":"a","routes":[{"host":"a.test"}],"upstreams":["127.0.0.1:1"],"discovery":{"service_id":"svc"}}`
	inFleet := testOpts
	inFleet.Discovery = true
	for _, tc := range []struct {
		doc  string
		o    Options
		want string
	}{
		{doc, testOpts, "discovery needs a fleet: start berth with --etcd"},
		{both, inFleet, "remove upstreams"},
		{doc, inFleet, ""},
	} {
		var s apitype.DeploymentSpec
		if err := json.Unmarshal([]byte(tc.doc), &s); err != nil {
			t.Fatal(err)
		}
		Normalize(&s, tc.o)
		err := Validate(&s, tc.o)
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s in a fleet: %v", tc.doc, err)
			}
			continue
		}
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != "discovery" || !strings.Contains(fe.Msg, tc.want) {
			t.Errorf("%s: Validate = %v, want discovery: …%s", tc.doc, err, tc.want)
		}
	}
}
