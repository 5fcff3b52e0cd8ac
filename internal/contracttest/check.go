package contracttest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// CheckJSON checks a JSON document — one object, or an array of them —
// against the named contract type, walking named refs, arrays, inline objects
// and Records. It returns [Problems] naming every key path the contract does
// not declare (e.g. "DeploymentStatus.vms[0].foo: not declared"), every null
// where the contract does not allow one, and every value whose JSON kind
// (string, number, boolean, object, array) differs from the declared type.
//
// Keys are allowed without a declaration only at the level of an interface
// or inline object with an index signature (`[extra: string]: unknown`);
// nested values of declared fields are still checked. String-literal unions
// are checked for being strings, not for their values, so a value the
// contract does not list yet (a new driver, say) is not a problem here.
func (c *Contract) CheckJSON(typeName string, data []byte) error {
	if _, ok := c.Interfaces[typeName]; !ok {
		if _, ok := c.Aliases[typeName]; !ok {
			return fmt.Errorf("contracttest: %s: %w", typeName, errUnknownType)
		}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return fmt.Errorf("contracttest: %s: invalid JSON: %w", typeName, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("contracttest: %s: invalid JSON: data after the first value", typeName)
	}
	w := &jsonWalker{c: c}
	ref := &Type{Kind: Ref, Name: typeName}
	if arr, ok := v.([]any); ok {
		if a, ok := c.Aliases[typeName]; !ok || a.Type.Kind != Array {
			for i, e := range arr {
				w.walk(fmt.Sprintf("%s[%d]", typeName, i), e, ref, false)
			}
			return w.result()
		}
	}
	w.walk(typeName, v, ref, false)
	return w.result()
}

type jsonWalker struct {
	c        *Contract
	problems Problems
}

func (w *jsonWalker) result() error {
	if len(w.problems) == 0 {
		return nil
	}
	return w.problems
}

func (w *jsonWalker) addf(path, format string, args ...any) {
	w.problems = append(w.problems, path+": "+fmt.Sprintf(format, args...))
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "string"
	case json.Number:
		return "number"
	case bool:
		return "boolean"
	case map[string]any:
		return "object"
	case []any:
		return "array"
	}
	return fmt.Sprintf("%T", v)
}

func (w *jsonWalker) walk(path string, v any, t *Type, nullable bool) {
	if v == nil {
		if nullable || t.Nullable || t.Kind == Primitive && (t.Name == "unknown" || t.Name == "any" || t.Name == "null") {
			return
		}
		if t.Kind == Ref {
			if a, ok := w.c.Aliases[t.Name]; ok && a.Type.Nullable {
				return
			}
		}
		w.addf(path, "null, but the contract says %s", t)
		return
	}
	want := ""
	switch t.Kind {
	case Primitive:
		switch t.Name {
		case "string", "number", "boolean", "null":
			want = t.Name
		case "object":
			want = "object"
		}
	case Literals:
		want = "string"
		if str, ok := v.(string); ok && w.c.StrictLiterals && !slices.Contains(t.Literals, str) {
			w.addf(path, "%q, but the contract says %s", str, t)
			return
		}
	case Ref:
		if a, ok := w.c.Aliases[t.Name]; ok {
			w.walk(path, v, a.Type, nullable)
			return
		}
		m, ok := v.(map[string]any)
		if !ok {
			w.addf(path, "got %s, the contract says %s (an object)", jsonKind(v), t.Name)
			return
		}
		w.object(path, m, w.c.Fields(t.Name), w.c.hasIndex(t.Name, map[string]bool{}))
		return
	case Object:
		m, ok := v.(map[string]any)
		if !ok {
			w.addf(path, "got %s, the contract says an object", jsonKind(v))
			return
		}
		w.object(path, m, t.Fields, t.IndexSignature)
		return
	case Array:
		arr, ok := v.([]any)
		if !ok {
			w.addf(path, "got %s, the contract says %s", jsonKind(v), t)
			return
		}
		for i, e := range arr {
			w.walk(fmt.Sprintf("%s[%d]", path, i), e, t.Elem, false)
		}
		return
	case Record:
		m, ok := v.(map[string]any)
		if !ok {
			w.addf(path, "got %s, the contract says %s", jsonKind(v), t)
			return
		}
		for _, k := range sortedKeys(m) {
			w.walk(fmt.Sprintf("%s[%q]", path, k), m[k], t.Elem, false)
		}
		return
	case Union:
		var best Problems
		tried := false
		for _, u := range t.Union {
			sub := &jsonWalker{c: w.c}
			sub.walk(path, v, u, false)
			if len(sub.problems) == 0 {
				return
			}
			// Prefer the member whose top-level kind matched with the
			// fewest problems (the first of equals): its problems are
			// about keys, which is what a reader needs, and under
			// StrictLiterals it is the member the discriminator names.
			if !strings.HasPrefix(sub.problems[0], path+": got ") && (!tried || len(sub.problems) < len(best)) {
				best, tried = sub.problems, true
			}
		}
		if !tried {
			w.addf(path, "got %s, the contract says %s", jsonKind(v), t)
			return
		}
		w.problems = append(w.problems, best...)
		return
	}
	if want != "" && jsonKind(v) != want {
		w.addf(path, "got %s, the contract says %s", jsonKind(v), t)
	}
}

var identRE = regexp.MustCompile(`^[A-Za-z_$][A-Za-z0-9_$]*$`)

func (w *jsonWalker) object(path string, m map[string]any, fields []*Field, index bool) {
	byName := make(map[string]*Field, len(fields))
	for _, f := range fields {
		byName[f.Name] = f
	}
	for _, k := range sortedKeys(m) {
		kp := path + "." + k
		if !identRE.MatchString(k) {
			kp = fmt.Sprintf("%s[%q]", path, k)
		}
		f, ok := byName[k]
		if !ok {
			if !index {
				w.addf(kp, "not declared")
			}
			continue
		}
		w.walk(kp, m[k], f.Type, f.Nullable)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// CheckGoType compares a Go type with the named contract type and returns
// one line per difference (nil when they agree):
//
//   - a contract field (inherited ones included) with no Go field of that
//     JSON name, or a Go JSON field the contract does not declare;
//   - an optional (`?`) field whose tag lacks omitempty/omitzero, or a
//     required one that has it;
//   - a nullable field whose Go type cannot hold null (not a pointer, slice,
//     map or interface);
//   - a Go type whose shape does not fit the declared one (string, number,
//     boolean, slice, map with string keys, struct), or a reference to
//     another contract type whose Go type has a different name.
//
// Inline object types are compared recursively with the Go struct found
// through the field's type. References to other contract types are not
// followed: check each of those by its own name. Fields tagged `json:"-"`
// (the Extra bag behind an index signature) and unexported fields are not
// part of the JSON and are ignored.
func (c *Contract) CheckGoType(name string, t reflect.Type) []string {
	g := &goChecker{c: c}
	switch {
	case c.Interfaces[name] != nil:
		st := deref(t)
		if st.Kind() != reflect.Struct {
			return []string{fmt.Sprintf("%s: Go type %v is not a struct", name, t)}
		}
		g.structFields(name, c.Fields(name), st)
	case c.Aliases[name] != nil && c.Aliases[name].Type.Kind == Object:
		st := deref(t)
		if st.Kind() != reflect.Struct {
			return []string{fmt.Sprintf("%s: Go type %v is not a struct", name, t)}
		}
		g.structFields(name, c.Aliases[name].Type.Fields, st)
	case c.Aliases[name] != nil && !customJSON(deref(t)) && objectUnion(c.Aliases[name].Type) != nil:
		// A union of objects (a Zod discriminated union) carried by one
		// flat struct: every member's fields, required where every
		// member requires them, optional otherwise.
		g.structFields(name, objectUnion(c.Aliases[name].Type), deref(t))
	case c.Aliases[name] != nil:
		g.shape(name, c.Aliases[name].Type, t)
	default:
		return []string{fmt.Sprintf("%s: %v", name, errUnknownType)}
	}
	return g.problems
}

type goChecker struct {
	c        *Contract
	problems []string
}

func (g *goChecker) addf(path, format string, args ...any) {
	g.problems = append(g.problems, path+": "+fmt.Sprintf(format, args...))
}

func deref(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

// goField is one JSON-visible field of a Go struct.
type goField struct {
	goName    string
	typ       reflect.Type
	omitempty bool
	omitzero  bool
}

// jsonFields returns the JSON-visible fields of a struct type by JSON name,
// following encoding/json: `json:"-"` and unexported fields are skipped,
// untagged embedded structs are flattened (shallower fields win), and an
// untagged field keeps its Go name.
func jsonFields(t reflect.Type) (names []string, fields map[string]goField) {
	fields = map[string]goField{}
	var visit func(t reflect.Type, depth int, seen map[reflect.Type]bool)
	depthOf := map[string]int{}
	visit = func(t reflect.Type, depth int, seen map[reflect.Type]bool) {
		if seen[t] {
			return
		}
		seen[t] = true
		for i := 0; i < t.NumField(); i++ {
			sf := t.Field(i)
			tag := sf.Tag.Get("json")
			if tag == "-" {
				continue
			}
			name, opts, _ := strings.Cut(tag, ",")
			if sf.Anonymous && name == "" {
				et := deref(sf.Type)
				if et.Kind() == reflect.Struct {
					visit(et, depth+1, seen)
					continue
				}
			}
			if !sf.IsExported() {
				continue
			}
			if name == "" {
				name = sf.Name
			}
			if d, ok := depthOf[name]; ok && d <= depth {
				continue
			}
			if _, ok := depthOf[name]; !ok {
				names = append(names, name)
			}
			depthOf[name] = depth
			f := goField{goName: sf.Name, typ: sf.Type}
			for _, o := range strings.Split(opts, ",") {
				switch o {
				case "omitempty":
					f.omitempty = true
				case "omitzero":
					f.omitzero = true
				}
			}
			fields[name] = f
		}
	}
	visit(t, 0, map[reflect.Type]bool{})
	return names, fields
}

func (g *goChecker) structFields(path string, fields []*Field, st reflect.Type) {
	names, gofields := jsonFields(st)
	declared := map[string]bool{}
	for _, f := range fields {
		declared[f.Name] = true
		fp := path + "." + f.Name
		gf, ok := gofields[f.Name]
		if !ok {
			g.addf(fp, "declared in the contract, but %v has no field with that JSON name", st)
			continue
		}
		omits := gf.omitempty || gf.omitzero
		switch {
		case f.Optional && !omits:
			g.addf(fp, "optional in the contract, but %v.%s lacks omitempty/omitzero", st, gf.goName)
		case !f.Optional && omits:
			g.addf(fp, "required in the contract, but %v.%s is tagged omitempty/omitzero", st, gf.goName)
		}
		if f.Nullable && !canBeNull(gf.typ) {
			g.addf(fp, "nullable in the contract, but Go type %v cannot be null", gf.typ)
		}
		g.shape(fp, f.Type, gf.typ)
	}
	for _, n := range names {
		if !declared[n] {
			g.addf(path+"."+n, "Go field %v.%s is not declared in the contract", st, gofields[n].goName)
		}
	}
}

// objectUnion merges the fields of a union whose members are all inline
// objects, or returns nil for any other type. A field is optional unless
// every member requires it; its type is the first member's, and literal
// members of the same field are merged (a discriminator's values).
func objectUnion(t *Type) []*Field {
	if t.Kind != Union {
		return nil
	}
	var out []*Field
	byName := map[string]*Field{}
	count := map[string]int{}
	for _, m := range t.Union {
		if m.Kind != Object {
			return nil
		}
		for _, f := range m.Fields {
			count[f.Name]++
			if have, ok := byName[f.Name]; ok {
				have.Optional = have.Optional || f.Optional
				have.Nullable = have.Nullable || f.Nullable
				if have.Type.Kind == Literals && f.Type.Kind == Literals {
					lit := *have.Type
					lit.Literals = append(slices.Clone(lit.Literals), f.Type.Literals...)
					have.Type = &lit
				}
				continue
			}
			nf := *f
			byName[f.Name] = &nf
			out = append(out, &nf)
		}
	}
	for _, f := range out {
		if count[f.Name] < len(t.Union) {
			f.Optional = true
		}
	}
	return out
}

func canBeNull(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice:
		return true
	}
	return customJSON(t)
}

// customJSON reports a type with its own MarshalJSON and UnmarshalJSON, such
// as a tri-state Nullable or a string-or-array union: its JSON shape is its
// own business, so only its presence is checked.
func customJSON(t reflect.Type) bool {
	pt := reflect.PointerTo(t)
	return (t.Implements(marshalerType) || pt.Implements(marshalerType)) && pt.Implements(unmarshalerType)
}

var (
	marshalerType   = reflect.TypeFor[json.Marshaler]()
	unmarshalerType = reflect.TypeFor[json.Unmarshaler]()
)

// shape checks that Go type rt can carry the contract type t.
func (g *goChecker) shape(path string, t *Type, rt reflect.Type) {
	rt = deref(rt)
	if t.Kind != Ref && t.Kind != Object && customJSON(rt) {
		return
	}
	k := rt.Kind()
	isNumber := k >= reflect.Int && k <= reflect.Float64
	switch t.Kind {
	case Primitive:
		switch t.Name {
		case "string":
			if k != reflect.String {
				g.addf(path, "contract says string, Go type is %v", rt)
			}
		case "number":
			if !isNumber {
				g.addf(path, "contract says number, Go type is %v", rt)
			}
		case "boolean":
			if k != reflect.Bool {
				g.addf(path, "contract says boolean, Go type is %v", rt)
			}
		}
	case Literals:
		if k != reflect.String {
			g.addf(path, "contract says a string union, Go type is %v", rt)
		}
	case Ref:
		if a, ok := g.c.Aliases[t.Name]; ok {
			if rt.Name() != t.Name {
				g.addf(path, "contract says %s, Go type is %v", t.Name, rt)
				return
			}
			g.shape(path, a.Type, rt)
			return
		}
		if k != reflect.Struct || rt.Name() != t.Name {
			g.addf(path, "contract says %s, Go type is %v", t.Name, rt)
		}
	case Array:
		if k != reflect.Slice && k != reflect.Array {
			g.addf(path, "contract says %s, Go type is %v", t, rt)
			return
		}
		g.shape(path+"[]", t.Elem, rt.Elem())
	case Record:
		if k != reflect.Map || rt.Key().Kind() != reflect.String {
			g.addf(path, "contract says %s, Go type is %v", t, rt)
			return
		}
		g.shape(path+"[]", t.Elem, rt.Elem())
	case Object:
		if k != reflect.Struct {
			g.addf(path, "contract says an inline object, Go type is %v", rt)
			return
		}
		g.structFields(path, t.Fields, rt)
	case Union:
		// customJSON types returned above.
		if fs := objectUnion(t); fs != nil && k == reflect.Struct {
			g.structFields(path, fs, rt)
			return
		}
		g.addf(path, "contract says %s, and Go type %v has no custom JSON methods to carry a union", t, rt)
	}
}
