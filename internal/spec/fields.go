package spec

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

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
	var doc any
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil
	}
	if fe := unknownIn("", reflect.TypeFor[apitype.DeploymentSpec](), doc); fe != nil {
		return fe
	}
	return nil
}

var (
	unmarshalerType = reflect.TypeFor[json.Unmarshaler]()
	apitypePkg      = reflect.TypeFor[apitype.DeploymentSpec]().PkgPath()
)

func unknownIn(path string, t reflect.Type, v any) *FieldError {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.PkgPath() == apitypePkg && strings.HasPrefix(t.Name(), "Nullable[") {
		t = t.Field(0).Type.Elem() // Value *T
	}
	switch t.Kind() {
	case reflect.Struct:
		obj, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		fields, open := apitype.JSONFields(t)
		if !open && reflect.PointerTo(t).Implements(unmarshalerType) {
			return nil // decodes a shape of its own (e.g. a string or an object)
		}
		for _, k := range slices.Sorted(maps.Keys(obj)) {
			ft, known := fields[k]
			switch {
			case known:
				if fe := unknownIn(join(path, k), ft, obj[k]); fe != nil {
					return fe
				}
			case !open:
				return fieldErr(join(path, k), "unknown field")
			}
		}
	case reflect.Slice, reflect.Array:
		arr, ok := v.([]any)
		if !ok {
			return nil
		}
		for i, e := range arr {
			if fe := unknownIn(fmt.Sprintf("%s[%d]", path, i), t.Elem(), e); fe != nil {
				return fe
			}
		}
	case reflect.Map:
		obj, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		for _, k := range slices.Sorted(maps.Keys(obj)) {
			if fe := unknownIn(join(path, k), t.Elem(), obj[k]); fe != nil {
				return fe
			}
		}
	}
	return nil
}

func join(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}
