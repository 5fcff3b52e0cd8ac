package apitype

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
)

// UnknownKey returns the path (scaling.min_replica, edits[0].olds) of the
// first key of the JSON document raw that no declared field of t takes,
// inside an object t closes, or "" when there is none: encoding/json would
// drop such a key, and a typo would be run as if it were not there.
// Objects left open with an Extra field (an index signature of the
// contract) and maps take any key; a type that decodes itself
// (json.Unmarshaler) is left to its decoder. Keys match exactly. Keys are
// visited in sorted order, so the same document always names the same key.
// raw that is not JSON is left for the decoder to refuse.
func UnknownKey(raw []byte, t reflect.Type) string {
	var doc any
	if err := json.Unmarshal(raw, &doc); err != nil {
		return ""
	}
	return unknownIn("", t, doc)
}

var (
	unmarshalerType = reflect.TypeFor[json.Unmarshaler]()
	apitypePkg      = reflect.TypeFor[DeploymentSpec]().PkgPath()
)

func unknownIn(path string, t reflect.Type, v any) string {
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
			return ""
		}
		fields, open := JSONFields(t)
		if !open && reflect.PointerTo(t).Implements(unmarshalerType) {
			return "" // decodes a shape of its own (e.g. a string or an object)
		}
		for _, k := range slices.Sorted(maps.Keys(obj)) {
			ft, known := fields[k]
			switch {
			case known:
				if p := unknownIn(joinKey(path, k), ft, obj[k]); p != "" {
					return p
				}
			case !open:
				return joinKey(path, k)
			}
		}
	case reflect.Slice, reflect.Array:
		arr, ok := v.([]any)
		if !ok {
			return ""
		}
		for i, e := range arr {
			if p := unknownIn(fmt.Sprintf("%s[%d]", path, i), t.Elem(), e); p != "" {
				return p
			}
		}
	case reflect.Map:
		obj, ok := v.(map[string]any)
		if !ok {
			return ""
		}
		for _, k := range slices.Sorted(maps.Keys(obj)) {
			if p := unknownIn(joinKey(path, k), t.Elem(), obj[k]); p != "" {
				return p
			}
		}
	}
	return ""
}

func joinKey(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}
