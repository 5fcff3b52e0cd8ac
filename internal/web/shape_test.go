package web

import (
	"strings"
	"testing"
)

func TestCheckJSONShape(t *testing.T) {
	keys := func(n int) string {
		var b strings.Builder
		b.WriteString("{")
		for i := range n {
			if i > 0 {
				b.WriteString(",")
			}
			b.WriteString(`"k` + strings.Repeat("x", i%7) + string(rune('a'+i%26)) + `":1`)
		}
		return b.String() + "}"
	}
	for _, c := range []struct {
		name, body, want string // want: a substring of the error, "" for none
	}{
		{"spec", `{"id":"a","routes":[{"host":"a.test"}],"vm":{"env_vars":{"A":"x\"{[{[","B":"y"}},"n":-1.5e3,"t":true,"z":null}`, ""},
		{"depth 32", strings.Repeat("[", 32) + strings.Repeat("]", 32), ""},
		{"depth 33", strings.Repeat("[", 33) + strings.Repeat("]", 33), "nests deeper than 32"},
		{"brackets in strings do not nest", `["` + strings.Repeat("[", 100) + `"]`, ""},
		{"10000 values", "[" + strings.TrimSuffix(strings.Repeat("1,", 9999), ",") + "]", ""},
		{"10001 values", "[" + strings.TrimSuffix(strings.Repeat("1,", 10000), ",") + "]", "more than 10000 values"},
		{"empty objects", "[" + strings.TrimSuffix(strings.Repeat("{},", 400000), ",") + "]", "more than 10000 values"},
		{"keys are not values", `{"a":{"b":{"c":"d"}}}`, ""},
		{"1000 keys", keys(1000), ""},
		{"1001 keys", keys(1001), "more than 1000 keys"},
	} {
		err := CheckJSONShape([]byte(c.body))
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: got %v, want %q", c.name, err, c.want)
		}
	}
}
