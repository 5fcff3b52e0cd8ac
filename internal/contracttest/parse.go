package contracttest

import (
	"fmt"
	"strings"
	"unicode"
)

// Kind says which shape a [Type] has.
type Kind int

// The shapes the parser understands. They cover the subset of TypeScript that
// types.d.ts uses; anything else is a parse error rather than a silent guess.
const (
	// Primitive is string, number, boolean, unknown, any, null or undefined;
	// [Type.Name] holds which.
	Primitive Kind = iota
	// Ref names another exported interface or type alias ([Type.Name]).
	Ref
	// Array is T[] or Array<T>; [Type.Elem] is T.
	Array
	// Object is an inline object type { ... }; [Type.Fields] and
	// [Type.IndexSignature] describe it.
	Object
	// Record is Record<K, V>; [Type.Key] is K and [Type.Elem] is V.
	Record
	// Literals is a union of string literals ("a" | "b"), or a single one;
	// [Type.Literals] lists them.
	Literals
	// Union is any other union (e.g. AuthProvider | AuthProvider[]);
	// [Type.Union] lists the members. null is never a member: it is recorded
	// as [Field.Nullable] or [Type.Nullable] instead.
	Union
)

var kindNames = [...]string{"primitive", "ref", "array", "object", "record", "literals", "union"}

// String returns the lower-case name of the kind.
func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Type is the structure of a TypeScript type expression.
type Type struct {
	Kind Kind
	// Name is the primitive's name (Primitive) or the referenced type (Ref).
	Name string
	// Elem is the element type of an Array or the value type of a Record.
	Elem *Type
	// Key is the key type of a Record.
	Key *Type
	// Fields are the members of an inline Object, in source order.
	Fields []*Field
	// IndexSignature reports an inline Object with `[k: string]: unknown`,
	// which admits keys it does not declare.
	IndexSignature bool
	// Literals are the members of a Literals union, in source order.
	Literals []string
	// Union are the non-null members of a Union.
	Union []*Type
	// Nullable reports that `null` was one of the union's members. For a
	// field it is copied to [Field.Nullable].
	Nullable bool
	// optional marks a z.ZodOptional while its object is built; the object
	// moves it to [Field.Optional].
	optional bool
}

// String renders t back as TypeScript-like text, for messages.
func (t *Type) String() string {
	var s string
	switch t.Kind {
	case Primitive, Ref:
		s = t.Name
	case Array:
		s = t.Elem.String() + "[]"
	case Record:
		s = "Record<" + t.Key.String() + ", " + t.Elem.String() + ">"
	case Object:
		s = "{...}"
	case Literals:
		q := make([]string, len(t.Literals))
		for i, l := range t.Literals {
			q[i] = fmt.Sprintf("%q", l)
		}
		s = strings.Join(q, " | ")
	case Union:
		q := make([]string, len(t.Union))
		for i, u := range t.Union {
			q[i] = u.String()
		}
		s = strings.Join(q, " | ")
	}
	if t.Nullable {
		s += " | null"
	}
	return s
}

// Field is one named member of an interface or inline object.
type Field struct {
	Name string
	// Optional reports a `?` after the name: the key may be absent.
	Optional bool
	// Nullable reports `| null` in the type: the value may be null.
	Nullable bool
	// Type is the field's type with null removed.
	Type *Type
	// Doc is the JSDoc comment before the field, without the comment markers.
	Doc string
}

// Interface is one `export interface` declaration.
type Interface struct {
	Name    string
	Extends []string
	// Fields are the interface's own members, in source order; see
	// [Contract.Fields] for the inherited ones too.
	Fields []*Field
	// IndexSignature reports `[extra: string]: unknown`: keys not in Fields
	// are allowed at this level.
	IndexSignature bool
	Doc            string
}

// Alias is one `export type X = ...` declaration.
type Alias struct {
	Name string
	Type *Type
	Doc  string
	// Imported reports a name a file imports from a module that is not
	// parsed (its Type is unknown): references to it are opaque.
	Imported bool
}

// Contract is a parsed types.d.ts.
type Contract struct {
	// Path is where the contract was read from ("" for [Parse] input).
	Path       string
	Interfaces map[string]*Interface
	Aliases    map[string]*Alias
	// Names lists every exported interface and alias in source order.
	Names []string
	// StrictLiterals makes [Contract.CheckJSON] check string literals'
	// values too (the Computer contract's discriminators and enums), not
	// only that they are strings.
	StrictLiterals bool
}

// Interface returns the named interface.
func (c *Contract) Interface(name string) (*Interface, bool) {
	i, ok := c.Interfaces[name]
	return i, ok
}

// Alias returns the named type alias.
func (c *Contract) Alias(name string) (*Alias, bool) {
	a, ok := c.Aliases[name]
	return a, ok
}

// Fields returns every field of the named interface, inherited ones (via
// extends) first. A field redeclared by the derived interface replaces the
// inherited one. It returns nil for an unknown name.
func (c *Contract) Fields(name string) []*Field {
	return c.fields(name, map[string]bool{})
}

func (c *Contract) fields(name string, seen map[string]bool) []*Field {
	it, ok := c.Interfaces[name]
	if !ok || seen[name] {
		return nil
	}
	seen[name] = true
	var out []*Field
	index := map[string]int{}
	add := func(f *Field) {
		if i, ok := index[f.Name]; ok {
			out[i] = f
			return
		}
		index[f.Name] = len(out)
		out = append(out, f)
	}
	for _, base := range it.Extends {
		for _, f := range c.fields(base, seen) {
			add(f)
		}
	}
	for _, f := range it.Fields {
		add(f)
	}
	return out
}

// hasIndex reports whether the interface or any interface it extends has an
// index signature.
func (c *Contract) hasIndex(name string, seen map[string]bool) bool {
	it, ok := c.Interfaces[name]
	if !ok || seen[name] {
		return false
	}
	seen[name] = true
	if it.IndexSignature {
		return true
	}
	for _, b := range it.Extends {
		if c.hasIndex(b, seen) {
			return true
		}
	}
	return false
}

// Parse parses TypeScript declaration source. name is used in error
// messages only. It understands export interface (with extends), export type,
// string-literal unions, T[], Array<T>, Record<K,V>, inline object types,
// unions with null, index signatures, and both comment styles. It also checks
// that every referenced name is declared.
func Parse(name string, src []byte) (*Contract, error) {
	c := &Contract{Interfaces: map[string]*Interface{}, Aliases: map[string]*Alias{}}
	if err := c.parse(name, src); err != nil {
		return nil, err
	}
	if err := c.checkRefs(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return c, nil
}

// Source is one declaration file for [ParseFiles].
type Source struct {
	Name string
	Src  []byte
}

// ParseFiles parses several declaration files into one Contract, as a
// package's dist/ folder is: a name one file imports from another is the
// other's declaration (parse the declaring file first); a name imported
// from a module that is not among the files stays opaque (an Imported
// alias of unknown). Besides what [Parse] reads, it understands Zod 4's
// declaration output: `export declare const xSchema: z.ZodObject<{...},
// z.core.$strict>` and the other z.Zod* types, `z.output<typeof xSchema>`,
// Readonly<T>, readonly T[], typeof, tuples, imports, and skips declared
// functions and classes (behaviour, not wire shape).
func ParseFiles(files ...Source) (*Contract, error) {
	c := &Contract{Interfaces: map[string]*Interface{}, Aliases: map[string]*Alias{}}
	for _, f := range files {
		if err := c.parse(f.Name, f.Src); err != nil {
			return nil, err
		}
	}
	// `export type X = z.output<typeof xSchema>` is xSchema's shape: give
	// X that shape itself, so X is checked as what it is, not as a
	// reference to a schema's name.
	for _, a := range c.Aliases {
		for seen := 0; a.Type.Kind == Ref && seen < 8; seen++ {
			target, ok := c.Aliases[a.Type.Name]
			if !ok || target.Imported {
				break
			}
			a.Type = target.Type
		}
	}
	if err := c.checkRefs(); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Contract) parse(name string, src []byte) error {
	toks, err := lex(name, string(src))
	if err != nil {
		return err
	}
	p := &parser{name: name, toks: toks}
	for !p.at(tEOF, "") {
		if err := p.decl(c); err != nil {
			return err
		}
	}
	return nil
}

func (c *Contract) checkRefs() error {
	var missing []string
	var walk func(where string, t *Type)
	walk = func(where string, t *Type) {
		if t == nil {
			return
		}
		switch t.Kind {
		case Ref:
			_, i := c.Interfaces[t.Name]
			_, a := c.Aliases[t.Name]
			if !i && !a {
				missing = append(missing, where+": undeclared type "+t.Name)
			}
		case Array:
			walk(where, t.Elem)
		case Record:
			walk(where, t.Key)
			walk(where, t.Elem)
		case Object:
			for _, f := range t.Fields {
				walk(where+"."+f.Name, f.Type)
			}
		case Union:
			for _, u := range t.Union {
				walk(where, u)
			}
		}
	}
	for _, n := range c.Names {
		if it, ok := c.Interfaces[n]; ok {
			for _, b := range it.Extends {
				if _, ok := c.Interfaces[b]; !ok {
					missing = append(missing, n+": extends undeclared interface "+b)
				}
			}
			for _, f := range it.Fields {
				walk(n+"."+f.Name, f.Type)
			}
		} else {
			walk(n, c.Aliases[n].Type)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%s", strings.Join(missing, "; "))
	}
	return nil
}

type tokKind int

const (
	tEOF tokKind = iota
	tIdent
	tString
	tNumber
	tPunct
)

type token struct {
	kind tokKind
	text string
	line int
	doc  string // the JSDoc comment immediately before this token, if any
}

func lex(name, s string) ([]token, error) {
	var toks []token
	line := 1
	doc := ""
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '\n':
			line++
			i++
		case c == ' ' || c == '\t' || c == '\r':
			i++
		case strings.HasPrefix(s[i:], "//"):
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case strings.HasPrefix(s[i:], "/*"):
			end := strings.Index(s[i+2:], "*/")
			if end < 0 {
				return nil, fmt.Errorf("%s:%d: unterminated comment", name, line)
			}
			body := s[i+2 : i+2+end]
			if strings.HasPrefix(body, "*") {
				doc = cleanDoc(body[1:])
			}
			line += strings.Count(body, "\n")
			i += end + 4
		case c == '"' || c == '\'':
			j := i + 1
			var b strings.Builder
			for j < len(s) && s[j] != c {
				if s[j] == '\\' && j+1 < len(s) {
					j++
				}
				if s[j] == '\n' {
					return nil, fmt.Errorf("%s:%d: newline in string literal", name, line)
				}
				b.WriteByte(s[j])
				j++
			}
			if j >= len(s) {
				return nil, fmt.Errorf("%s:%d: unterminated string literal", name, line)
			}
			toks = append(toks, token{tString, b.String(), line, doc})
			doc = ""
			i = j + 1
		case c == '_' || c == '$' || unicode.IsLetter(rune(c)):
			j := i
			for j < len(s) && (s[j] == '_' || s[j] == '$' || unicode.IsLetter(rune(s[j])) || unicode.IsDigit(rune(s[j]))) {
				j++
			}
			toks = append(toks, token{tIdent, s[i:j], line, doc})
			doc = ""
			i = j
		case c >= '0' && c <= '9' || c == '-' && i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '9':
			j := i + 1
			for j < len(s) && (s[j] >= '0' && s[j] <= '9' || s[j] == '.') {
				j++
			}
			toks = append(toks, token{tNumber, s[i:j], line, doc})
			doc = ""
			i = j
		case strings.ContainsRune("{}[]()<>:;,|?=.&", rune(c)):
			toks = append(toks, token{tPunct, string(c), line, doc})
			doc = ""
			i++
		default:
			return nil, fmt.Errorf("%s:%d: unexpected character %q", name, line, c)
		}
	}
	return append(toks, token{kind: tEOF, line: line}), nil
}

// cleanDoc strips the leading `*` decoration from JSDoc lines.
func cleanDoc(s string) string {
	lines := strings.Split(s, "\n")
	var out []string
	for _, l := range lines {
		l = strings.TrimSpace(l)
		l = strings.TrimPrefix(l, "*")
		out = append(out, strings.TrimSpace(l))
	}
	return strings.TrimSpace(strings.Join(out, "\n"))
}

type parser struct {
	name string
	toks []token
	pos  int
}

func (p *parser) peek() token { return p.toks[p.pos] }

func (p *parser) next() token {
	t := p.toks[p.pos]
	if t.kind != tEOF {
		p.pos++
	}
	return t
}

func (p *parser) at(k tokKind, text string) bool {
	t := p.peek()
	return t.kind == k && (text == "" || t.text == text)
}

func (p *parser) accept(k tokKind, text string) bool {
	if p.at(k, text) {
		p.next()
		return true
	}
	return false
}

func (p *parser) errorf(format string, args ...any) error {
	t := p.peek()
	got := t.text
	if t.kind == tEOF {
		got = "end of file"
	}
	return fmt.Errorf("%s:%d: %s (at %q)", p.name, t.line, fmt.Sprintf(format, args...), got)
}

func (p *parser) expect(k tokKind, text string) (token, error) {
	if !p.at(k, text) {
		want := text
		if want == "" {
			want = [...]string{"end of file", "identifier", "string", "number", "punctuation"}[k]
		}
		return token{}, p.errorf("expected %s", want)
	}
	return p.next(), nil
}

func (p *parser) decl(c *Contract) error {
	if p.at(tIdent, "import") {
		return p.importDecl(c)
	}
	if p.at(tIdent, "type") {
		// A module-private alias (slots.d.ts's FleetSlotReservation):
		// parsed like an exported one, so what refers to it resolves.
		return p.typeDecl(c, p.next().doc)
	}
	exp, err := p.expect(tIdent, "export")
	if err != nil {
		return err
	}
	doc := exp.doc
	if p.at(tPunct, "{") { // export {};
		if err := p.skipStatement(); err != nil {
			return err
		}
		return nil
	}
	p.accept(tIdent, "declare")
	switch {
	case p.accept(tIdent, "const"):
		nameTok, err := p.expect(tIdent, "")
		if err != nil {
			return err
		}
		if !p.accept(tPunct, ":") {
			return p.errorf("expected interface or type after export, or a const's declared type")
		}
		t, err := p.typ()
		if err != nil {
			return err
		}
		p.accept(tPunct, ";")
		return c.define(p, &Alias{Name: nameTok.text, Type: t, Doc: doc})
	case p.at(tIdent, "function"), p.at(tIdent, "class"):
		return p.skipStatement()
	case p.accept(tIdent, "type"):
		return p.typeDecl(c, doc)
	}
	switch {
	case p.accept(tIdent, "interface"):
		nameTok, err := p.expect(tIdent, "")
		if err != nil {
			return err
		}
		it := &Interface{Name: nameTok.text, Doc: doc}
		if p.accept(tIdent, "extends") {
			for {
				b, err := p.expect(tIdent, "")
				if err != nil {
					return err
				}
				it.Extends = append(it.Extends, b.text)
				if !p.accept(tPunct, ",") {
					break
				}
			}
		}
		obj, err := p.object()
		if err != nil {
			return err
		}
		it.Fields, it.IndexSignature = obj.Fields, obj.IndexSignature
		if err := c.add(it.Name); err != nil {
			return p.errorf("%v", err)
		}
		c.Interfaces[it.Name] = it
		return nil
	}
	return p.errorf("expected interface or type after export")
}

func (p *parser) typeDecl(c *Contract, doc string) error {
	nameTok, err := p.expect(tIdent, "")
	if err != nil {
		return err
	}
	if _, err := p.expect(tPunct, "="); err != nil {
		return err
	}
	t, err := p.typ()
	if err != nil {
		return err
	}
	p.accept(tPunct, ";")
	return c.define(p, &Alias{Name: nameTok.text, Type: t, Doc: doc})
}

// define adds an alias, replacing an Imported placeholder of its name.
func (c *Contract) define(p *parser, a *Alias) error {
	if old, ok := c.Aliases[a.Name]; ok && old.Imported {
		c.Aliases[a.Name] = a
		return nil
	}
	if err := c.add(a.Name); err != nil {
		return p.errorf("%v", err)
	}
	c.Aliases[a.Name] = a
	return nil
}

// importDecl reads `import [type] { A, type B as C } from "m";` (or
// `import type { X } from "m"`), declaring each local name not declared
// yet as an opaque Imported alias.
func (p *parser) importDecl(c *Contract) error {
	p.next()
	p.accept(tIdent, "type")
	if !p.accept(tPunct, "{") {
		return p.errorf("expected { after import")
	}
	for !p.accept(tPunct, "}") {
		p.accept(tIdent, "type")
		n, err := p.expect(tIdent, "")
		if err != nil {
			return err
		}
		local := n.text
		if p.accept(tIdent, "as") {
			l, err := p.expect(tIdent, "")
			if err != nil {
				return err
			}
			local = l.text
		}
		if _, ok := c.Aliases[local]; !ok && c.Interfaces[local] == nil {
			c.Aliases[local] = &Alias{Name: local, Type: &Type{Kind: Primitive, Name: "unknown"}, Imported: true}
		}
		if !p.accept(tPunct, ",") && !p.at(tPunct, "}") {
			return p.errorf("expected , or } in import")
		}
	}
	if _, err := p.expect(tIdent, "from"); err != nil {
		return err
	}
	if _, err := p.expect(tString, ""); err != nil {
		return err
	}
	p.accept(tPunct, ";")
	return nil
}

// skipStatement skips a declaration up to its `;` (or the `}` that closes
// a class body) outside any brackets.
func (p *parser) skipStatement() error {
	depth := 0
	for {
		t := p.next()
		switch {
		case t.kind == tEOF:
			return p.errorf("unterminated declaration")
		case t.kind == tPunct && (t.text == "{" || t.text == "(" || t.text == "["):
			depth++
		case t.kind == tPunct && (t.text == "}" || t.text == ")" || t.text == "]"):
			depth--
			if depth == 0 && t.text == "}" && !p.at(tPunct, ";") && !p.at(tPunct, ",") && !p.at(tPunct, ".") && !p.at(tPunct, "[") && !p.at(tPunct, "|") {
				return nil // a class body
			}
		case t.kind == tPunct && t.text == ";" && depth == 0:
			return nil
		}
	}
}

func (c *Contract) add(name string) error {
	if _, ok := c.Interfaces[name]; ok {
		return fmt.Errorf("%s declared twice", name)
	}
	if _, ok := c.Aliases[name]; ok {
		return fmt.Errorf("%s declared twice", name)
	}
	c.Names = append(c.Names, name)
	return nil
}

// object parses `{ member* }` into an Object type.
func (p *parser) object() (*Type, error) {
	if _, err := p.expect(tPunct, "{"); err != nil {
		return nil, err
	}
	t := &Type{Kind: Object}
	seen := map[string]bool{}
	for !p.accept(tPunct, "}") {
		if p.at(tEOF, "") {
			return nil, p.errorf("unterminated object type")
		}
		doc := p.peek().doc
		p.accept(tIdent, "readonly")
		if p.accept(tPunct, "[") {
			if _, err := p.expect(tIdent, ""); err != nil {
				return nil, err
			}
			if _, err := p.expect(tPunct, ":"); err != nil {
				return nil, err
			}
			if _, err := p.typ(); err != nil {
				return nil, err
			}
			if _, err := p.expect(tPunct, "]"); err != nil {
				return nil, err
			}
			if _, err := p.expect(tPunct, ":"); err != nil {
				return nil, err
			}
			if _, err := p.typ(); err != nil {
				return nil, err
			}
			t.IndexSignature = true
		} else {
			nt := p.next()
			if nt.kind != tIdent && nt.kind != tString {
				p.pos--
				return nil, p.errorf("expected a field name")
			}
			f := &Field{Name: nt.text, Doc: doc}
			if seen[f.Name] {
				p.pos--
				return nil, p.errorf("field %s declared twice", f.Name)
			}
			seen[f.Name] = true
			f.Optional = p.accept(tPunct, "?")
			if _, err := p.expect(tPunct, ":"); err != nil {
				return nil, err
			}
			ft, err := p.typ()
			if err != nil {
				return nil, err
			}
			f.Type, f.Nullable = ft, ft.Nullable
			ft.Nullable = false
			t.Fields = append(t.Fields, f)
		}
		if !p.accept(tPunct, ";") && !p.accept(tPunct, ",") && !p.at(tPunct, "}") {
			return nil, p.errorf("expected ; or }")
		}
	}
	return t, nil
}

// typ parses a union: [|] postfix (| postfix)*.
func (p *parser) typ() (*Type, error) {
	p.accept(tPunct, "|")
	var members []*Type
	nullable := false
	for {
		m, err := p.postfix()
		if err != nil {
			return nil, err
		}
		if m.Kind == Primitive && (m.Name == "null" || m.Name == "undefined") {
			nullable = true
		} else {
			members = append(members, m)
		}
		if !p.accept(tPunct, "|") {
			break
		}
	}
	var t *Type
	switch {
	case len(members) == 0:
		t = &Type{Kind: Primitive, Name: "null"}
	case len(members) == 1:
		t = members[0]
	default:
		t = &Type{Kind: Literals}
		for _, m := range members {
			if m.Kind != Literals {
				t = &Type{Kind: Union, Union: members}
				break
			}
			t.Literals = append(t.Literals, m.Literals...)
		}
	}
	t.Nullable = t.Nullable || nullable
	return t, nil
}

func (p *parser) postfix() (*Type, error) {
	t, err := p.primary()
	if err != nil {
		return nil, err
	}
	for p.at(tPunct, "[") && p.toks[p.pos+1].kind == tPunct && p.toks[p.pos+1].text == "]" {
		p.pos += 2
		t = &Type{Kind: Array, Elem: t}
	}
	return t, nil
}

func (p *parser) primary() (*Type, error) {
	tok := p.peek()
	switch {
	case tok.kind == tString:
		p.next()
		return &Type{Kind: Literals, Literals: []string{tok.text}}, nil
	case tok.kind == tNumber:
		p.next()
		return &Type{Kind: Primitive, Name: "number"}, nil
	case tok.kind == tPunct && tok.text == "{":
		return p.object()
	case tok.kind == tPunct && tok.text == "[":
		// A tuple, as Zod's union types take their members: kept as a
		// Union of the elements, which is what its users need.
		p.next()
		t := &Type{Kind: Union}
		for !p.accept(tPunct, "]") {
			e, err := p.typ()
			if err != nil {
				return nil, err
			}
			t.Union = append(t.Union, e)
			if !p.accept(tPunct, ",") && !p.at(tPunct, "]") {
				return nil, p.errorf("expected , or ] in a tuple")
			}
		}
		return t, nil
	case tok.kind == tPunct && tok.text == "(":
		p.next()
		t, err := p.typ()
		if err != nil {
			return nil, err
		}
		if _, err := p.expect(tPunct, ")"); err != nil {
			return nil, err
		}
		return t, nil
	case tok.kind == tIdent:
		p.next()
		switch tok.text {
		case "string", "number", "boolean", "unknown", "any", "null", "undefined", "object":
			return &Type{Kind: Primitive, Name: tok.text}, nil
		case "true", "false":
			return &Type{Kind: Primitive, Name: "boolean"}, nil
		case "Record":
			args, err := p.typeArgs(2)
			if err != nil {
				return nil, err
			}
			return &Type{Kind: Record, Key: args[0], Elem: args[1]}, nil
		case "Array", "ReadonlyArray":
			args, err := p.typeArgs(1)
			if err != nil {
				return nil, err
			}
			return &Type{Kind: Array, Elem: args[0]}, nil
		case "readonly":
			return p.postfix()
		case "typeof":
			n, err := p.expect(tIdent, "")
			if err != nil {
				return nil, err
			}
			return &Type{Kind: Ref, Name: n.text}, nil
		case "Readonly":
			args, err := p.typeArgs(1)
			if err != nil {
				return nil, err
			}
			return args[0], nil
		}
		name := tok.text
		for p.at(tPunct, ".") && p.toks[p.pos+1].kind == tIdent {
			p.pos++
			name += "." + p.next().text
		}
		if strings.HasPrefix(name, "z.") {
			return p.zod(name)
		}
		if p.at(tPunct, "<") {
			return nil, p.errorf("generic type %s is not supported", name)
		}
		return &Type{Kind: Ref, Name: name}, nil
	}
	return nil, p.errorf("expected a type")
}

// zodScalars are the Zod 4 schema types of one JSON primitive.
var zodScalars = map[string]string{
	"z.ZodString": "string", "z.ZodBase64": "string", "z.ZodEmail": "string", "z.ZodURL": "string", "z.ZodUUID": "string",
	"z.ZodNumber": "number", "z.ZodInt": "number",
	"z.ZodBoolean": "boolean",
	"z.ZodNull":    "null",
	"z.ZodUnknown": "unknown", "z.ZodAny": "unknown", "z.ZodJSONSchema": "unknown",
}

// zod translates a Zod 4 schema type (the declared type of an exported
// schema constant) into the JSON shape it parses to.
func (p *parser) zod(name string) (*Type, error) {
	if prim, ok := zodScalars[name]; ok {
		return &Type{Kind: Primitive, Name: prim}, nil
	}
	if strings.HasPrefix(name, "z.core.$") {
		// The unknown-key mode of a ZodObject; read by the ZodObject case.
		return &Type{Kind: Primitive, Name: name}, nil
	}
	arity := map[string]int{
		"z.output": 1, "z.infer": 1, "z.input": 1, "z.ZodLiteral": 1, "z.ZodEnum": 1, "z.ZodOptional": 1,
		"z.ZodNullable": 1, "z.ZodArray": 1, "z.ZodSet": 1, "z.ZodReadonly": 1, "z.ZodObject": 2,
		"z.ZodRecord": 2, "z.ZodDiscriminatedUnion": 2, "z.ZodUnion": 1,
	}
	n, ok := arity[name]
	if !ok {
		return nil, p.errorf("zod type %s is not supported", name)
	}
	var args []*Type
	var err error
	if name == "z.ZodObject" && p.at(tPunct, "<") {
		// The mode argument is optional: take one or two.
		args, err = p.typeArgs(-1)
	} else {
		args, err = p.typeArgs(n)
	}
	if err != nil {
		return nil, err
	}
	a := args[0]
	switch name {
	case "z.output", "z.infer", "z.input", "z.ZodReadonly", "z.ZodLiteral":
		return a, nil
	case "z.ZodEnum":
		if a.Kind != Object {
			return nil, p.errorf("z.ZodEnum wants an object of literals")
		}
		t := &Type{Kind: Literals}
		for _, f := range a.Fields {
			if f.Type.Kind != Literals {
				return nil, p.errorf("z.ZodEnum member %s is not a literal", f.Name)
			}
			t.Literals = append(t.Literals, f.Type.Literals...)
		}
		return t, nil
	case "z.ZodOptional":
		c := *a
		c.optional = true
		return &c, nil
	case "z.ZodNullable":
		c := *a
		c.Nullable = true
		return &c, nil
	case "z.ZodArray", "z.ZodSet":
		return &Type{Kind: Array, Elem: a}, nil
	case "z.ZodRecord":
		return &Type{Kind: Record, Key: a, Elem: args[1]}, nil
	case "z.ZodDiscriminatedUnion", "z.ZodUnion":
		if a.Kind != Union {
			return nil, p.errorf("%s wants a tuple of members", name)
		}
		return a, nil
	case "z.ZodObject":
		if a.Kind != Object || len(args) > 2 {
			return nil, p.errorf("z.ZodObject wants an object shape and a mode")
		}
		t := &Type{Kind: Object, Fields: a.Fields}
		for _, f := range t.Fields {
			f.Optional = f.Optional || f.Type.optional
			f.Type.optional = false
		}
		if len(args) == 2 {
			switch args[1].Name {
			case "z.core.$strict", "z.core.$strip":
				// $strip drops unknown keys, so its output has none either.
			case "z.core.$loose", "z.core.$catchall":
				t.IndexSignature = true
			default:
				return nil, p.errorf("z.ZodObject mode %s is not supported", args[1])
			}
		}
		return t, nil
	}
	return nil, p.errorf("zod type %s is not supported", name)
}

func (p *parser) typeArgs(n int) ([]*Type, error) {
	if _, err := p.expect(tPunct, "<"); err != nil {
		return nil, err
	}
	var args []*Type
	for {
		t, err := p.typ()
		if err != nil {
			return nil, err
		}
		args = append(args, t)
		if !p.accept(tPunct, ",") {
			break
		}
	}
	if _, err := p.expect(tPunct, ">"); err != nil {
		return nil, err
	}
	if n >= 0 && len(args) != n {
		return nil, p.errorf("want %d type arguments, got %d", n, len(args))
	}
	return args, nil
}
