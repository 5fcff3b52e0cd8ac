package apitype

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"
)

// fieldsCache caches [JSONFields] per struct type.
var fieldsCache sync.Map // reflect.Type -> jsonFields

type jsonFields struct {
	fields map[string]reflect.Type
	open   bool
}

var rawMapType = reflect.TypeFor[map[string]json.RawMessage]()

// JSONFields maps the JSON keys of struct type t (embedded structs
// included) to their Go types, as encoding/json names them; open reports
// an `Extra map[string]json.RawMessage` field tagged "-", in which a
// contract type keeps the keys its index signature allows. The result is
// cached and must not be modified.
func JSONFields(t reflect.Type) (fields map[string]reflect.Type, open bool) {
	if c, ok := fieldsCache.Load(t); ok {
		c := c.(jsonFields)
		return c.fields, c.open
	}
	fields = map[string]reflect.Type{}
	var visit func(t reflect.Type)
	visit = func(t reflect.Type) {
		for i := range t.NumField() {
			f := t.Field(i)
			tag := f.Tag.Get("json")
			if tag == "-" {
				if f.Name == "Extra" && f.Type == rawMapType {
					open = true
				}
				continue
			}
			name, _, _ := strings.Cut(tag, ",")
			if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
				visit(f.Type)
				continue
			}
			if !f.IsExported() {
				continue
			}
			if name == "" {
				name = f.Name
			}
			fields[name] = f.Type
		}
	}
	visit(t)
	fieldsCache.Store(t, jsonFields{fields, open})
	return fields, open
}

// marshalExtra encodes known (a methodless copy of a contract struct) and
// appends the extra keys after its own, in sorted order. A key that names a
// declared field is never taken from extra, even when the field itself is
// omitted: the declared field wins.
func marshalExtra[P any](known P, extra map[string]json.RawMessage) ([]byte, error) {
	b, err := json.Marshal(known)
	if err != nil || len(extra) == 0 {
		return b, err
	}
	names, _ := JSONFields(reflect.TypeFor[P]())
	keys := make([]string, 0, len(extra))
	for k := range extra {
		if _, declared := names[k]; !declared {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return b, nil
	}
	sort.Strings(keys)
	var buf bytes.Buffer
	buf.Write(b[:len(b)-1]) // drop the closing brace
	first := len(b) == 2    // the known fields encoded as {}
	for _, k := range keys {
		if !first {
			buf.WriteByte(',')
		}
		first = false
		kb, err := json.Marshal(k)
		if err != nil {
			return nil, err
		}
		buf.Write(kb)
		buf.WriteByte(':')
		v := extra[k]
		if len(v) == 0 {
			v = json.RawMessage("null")
		}
		if err := json.Compact(&buf, v); err != nil {
			return nil, fmt.Errorf("apitype: extra key %q: %w", k, err)
		}
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

// unmarshalExtra decodes an object into known (a methodless view of a
// contract struct) and stores the keys it does not declare in *extra, which
// is nil when there are none.
//
// Keys are matched exactly. encoding/json on its own matches field names
// case-insensitively, which would let an extra key such as "ID" overwrite the
// declared "id"; only exact matches are therefore handed to the decoder.
func unmarshalExtra[P any](data []byte, known *P, extra *map[string]json.RawMessage) error {
	var all map[string]json.RawMessage
	if err := json.Unmarshal(data, &all); err != nil {
		return err
	}
	if all == nil { // JSON null: leave the value unchanged, as encoding/json does
		return nil
	}
	names, _ := JSONFields(reflect.TypeFor[P]())
	var rest map[string]json.RawMessage
	for k, v := range all {
		if _, declared := names[k]; !declared {
			if rest == nil {
				rest = map[string]json.RawMessage{}
			}
			rest[k] = v
			delete(all, k)
		}
	}
	if len(rest) == 0 {
		if err := json.Unmarshal(data, known); err != nil {
			return err
		}
	} else {
		kb, err := json.Marshal(all)
		if err != nil {
			return err
		}
		if err := json.Unmarshal(kb, known); err != nil {
			return err
		}
	}
	*extra = rest
	return nil
}
