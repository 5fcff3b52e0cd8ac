package spec

import (
	"reflect"

	"github.com/berth-dev/berth/apitype"
)

// UnknownField returns a *FieldError naming the first key of a spec
// document (raw JSON that decodes into an apitype.DeploymentSpec) that no
// declared field takes, inside an object the contract closes: a typo such
// as scaling.min_replica would otherwise be dropped by the decoder and the
// spec run without it. Objects the contract leaves open with an index
// signature (the top-level DeploymentSpec, whose extra keys are kept in
// Extra and returned) and maps (env_vars) take any key. Keys match exactly,
// as apitype matches top-level keys. Keys are visited in sorted order, so
// the same document always names the same key. Raw that is not an object
// is left for the decoder to refuse.
func UnknownField(raw []byte) error {
	if p := apitype.UnknownKey(raw, reflect.TypeFor[apitype.DeploymentSpec]()); p != "" {
		return fieldErr(p, "unknown field")
	}
	return nil
}
