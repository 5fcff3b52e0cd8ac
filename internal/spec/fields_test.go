package spec

import (
	"errors"
	"testing"
)

// TestUnknownField: a key no declared field takes inside a closed object
// is named (it would be dropped by the decoder); the top level and maps
// stay open, as the contract has them.
func TestUnknownField(t *testing.T) {
	for _, tt := range []struct{ doc, want string }{
		{`{"id":"a","vm":{"driver":"process","port":1},"scaling":{"min_replica":1}}`, "scaling.min_replica"},
		{`{"id":"a","vm":{"driver":"process","port":1,"imagee":"x"}}`, "vm.imagee"},
		{`{"id":"a","routes":[{"host":"a.test"},{"hots":"b.test"}],"upstreams":["x:1"]}`, "routes[1].hots"},
		{`{"id":"a","routes":[{"host":"a.test","redirect":{"to":"https://b.test","code":302}}]}`, "routes[0].redirect.code"},
		{`{"id":"a","vm":{"driver":"process","port":1,"env_from":[{"secret":"s","key":"k","ass":"X"}]}}`, "vm.env_from[0].ass"},
		{`{"id":"a","health":{"path":null,"prot":1}}`, "health.prot"},
		{`{"id":"a","site":{"root":"/r","Index":"i.html"}}`, "site.Index"}, // keys match exactly
		{`{"id":"a","scaling":{"b":1,"a":1}}`, "scaling.a"},                // the first in sorted order
		// open: top-level extras, maps, and values of the wrong shape (the decoder's to refuse)
		{`{"id":"a","x-owner":{"any":"thing"},"vm":{"driver":"process","port":1,"env_vars":{"ANY_NAME":"v"}}}`, ""},
		{`{"id":"a","scaling":[1,2]}`, ""},
		{`[1]`, ""},
	} {
		err := UnknownField([]byte(tt.doc))
		if tt.want == "" {
			if err != nil {
				t.Errorf("%s: UnknownField = %v, want nil", tt.doc, err)
			}
			continue
		}
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != tt.want || fe.Msg != "unknown field" {
			t.Errorf("%s: UnknownField = %v, want %s: unknown field", tt.doc, err, tt.want)
		}
	}
}
