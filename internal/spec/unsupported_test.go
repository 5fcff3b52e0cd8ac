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
	"discovery":   `{"id":"a","routes":[{"host":"a.test"}],"discovery":{"service_id":"svc"}}`,
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
