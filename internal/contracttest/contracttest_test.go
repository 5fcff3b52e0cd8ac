package contracttest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const sample = `/**
 * File header.
 */
export type Colour = "red" | "green";
/** A thing. */
export interface Thing {
    /** The id. */
    id: string;
    // a line comment
    count?: number;
    colour: Colour;
    parts: Part[];
    more?: Array<Part>;
    labels?: Record<string, string>;
    byName: Record<string, Part>;
    raw?: unknown;
    when: number | null;
    maybe?: string | null;
    inline: {
        a: boolean;
        b?: "x" | "y";
    }[];
    open?: {
        k: string;
        [extra: string]: unknown;
    };
    either?: Colour | Colour[];
    "quoted-key"?: string;
}
export interface Part {
    name: string;
}
export interface Child extends Thing {
    extra_field: boolean;
    [extra: string]: unknown;
}
`

func mustParse(t *testing.T, src string) *Contract {
	t.Helper()
	c, err := Parse("sample.d.ts", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestParse(t *testing.T) {
	c := mustParse(t, sample)
	if diff := cmp.Diff([]string{"Colour", "Thing", "Part", "Child"}, c.Names); diff != "" {
		t.Errorf("Names (-want +got):\n%s", diff)
	}
	a, ok := c.Alias("Colour")
	if !ok || a.Type.Kind != Literals || !reflect.DeepEqual(a.Type.Literals, []string{"red", "green"}) {
		t.Errorf("Colour = %+v", a)
	}
	if a.Doc != "File header." {
		t.Errorf("Colour doc = %q", a.Doc)
	}
	it, ok := c.Interface("Thing")
	if !ok {
		t.Fatal("no Thing")
	}
	if it.Doc != "A thing." || it.Fields[0].Doc != "The id." {
		t.Errorf("docs: %q, %q", it.Doc, it.Fields[0].Doc)
	}
	got := map[string]string{}
	for _, f := range it.Fields {
		s := f.Type.String()
		if f.Optional {
			s = "?" + s
		}
		if f.Nullable {
			s += " | null"
		}
		got[f.Name] = s
	}
	want := map[string]string{
		"id":         "string",
		"count":      "?number",
		"colour":     "Colour",
		"parts":      "Part[]",
		"more":       "?Part[]",
		"labels":     "?Record<string, string>",
		"byName":     "Record<string, Part>",
		"raw":        "?unknown",
		"when":       "number | null",
		"maybe":      "?string | null",
		"inline":     "{...}[]",
		"open":       "?{...}",
		"either":     "?Colour | Colour[]",
		"quoted-key": "?string",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("fields (-want +got):\n%s", diff)
	}
	inline := it.Fields[10].Type.Elem
	if inline.Kind != Object || len(inline.Fields) != 2 || inline.IndexSignature || inline.Fields[1].Type.Kind != Literals {
		t.Errorf("inline = %+v", inline)
	}
	if open := it.Fields[11].Type; !open.IndexSignature || len(open.Fields) != 1 {
		t.Errorf("open = %+v", open)
	}
	child, _ := c.Interface("Child")
	if !child.IndexSignature || !reflect.DeepEqual(child.Extends, []string{"Thing"}) {
		t.Errorf("Child = %+v", child)
	}
	if n := len(c.Fields("Child")); n != len(it.Fields)+1 {
		t.Errorf("Fields(Child) has %d, want %d", n, len(it.Fields)+1)
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct{ src, want string }{
		{`export interface A { a: string `, "expected ; or }"},
		{`export interface A { a: string;`, "unterminated object"},
		{`export interface A { a string; }`, "expected :"},
		{`export interface A { a: B; }`, "undeclared type B"},
		{`export interface A extends B { }`, "extends undeclared interface B"},
		{`export interface A { a: string; a: number; }`, "declared twice"},
		{`export interface A {} export type A = "x";`, "declared twice"},
		{`export const x = 1;`, "expected interface or type"},
		{`interface A {}`, "expected export"},
		{`export type A = Promise<string>;`, "not supported"},
		{`export type A = Record<string>;`, "want 2 type arguments"},
		{`/* never closed`, "unterminated comment"},
		{`export type A = "open`, "unterminated string"},
		{`export type A = #;`, "unexpected character"},
		{`export type A = ;`, "expected a type"},
	}
	for _, tt := range tests {
		_, err := Parse("bad.d.ts", []byte(tt.src))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Parse(%q) = %v, want an error containing %q", tt.src, err, tt.want)
		}
	}
}

func TestParseRealContract(t *testing.T) {
	c := MustLoad(t)
	if len(c.Names) < 90 {
		t.Errorf("only %d declarations in %s", len(c.Names), c.Path)
	}
	spec, ok := c.Interface("DeploymentSpec")
	if !ok || !spec.IndexSignature {
		t.Fatalf("DeploymentSpec = %+v", spec)
	}
	if fs := c.Fields("MintedToken"); len(fs) < 2 || fs[len(fs)-1].Name != "token" || fs[0].Name != "id" {
		t.Errorf("MintedToken fields do not include TokenSummary's: %d", len(fs))
	}
}

func TestCheckJSON(t *testing.T) {
	c := mustParse(t, sample)
	base := `"id":"a","colour":"red","parts":[{"name":"p"}],"byName":{"k":{"name":"n"}},"when":null,"inline":[{"a":true}]`
	tests := []struct {
		name string
		typ  string
		doc  string
		want []string // every problem, in order; nil means valid
	}{
		{"valid", "Thing", `{` + base + `}`, nil},
		{"valid with all optional", "Thing", `{` + base + `,"count":1,"more":[],"labels":{"x":"y"},"raw":{"anything":[1]},"maybe":null,"open":{"k":"v","free":1},"either":["red"],"quoted-key":"q"}`, nil},
		{"union, string member", "Thing", `{` + base + `,"either":"green"}`, nil},
		{"array root", "Thing", `[{` + base + `},{` + base + `,"zz":1}]`, []string{"Thing[1].zz: not declared"}},
		{"top-level key", "Thing", `{` + base + `,"foo":1}`, []string{"Thing.foo: not declared"}},
		{"nested in array", "Thing", `{"id":"a","colour":"red","parts":[{"name":"p"},{"name":"q","x":1}],"byName":{},"when":1,"inline":[]}`, []string{"Thing.parts[1].x: not declared"}},
		{"nested in record", "Thing", `{"id":"a","colour":"red","parts":[],"byName":{"team-a":{"name":"n","y":2}},"when":1,"inline":[]}`, []string{`Thing.byName["team-a"].y: not declared`}},
		{"nested inline object", "Thing", `{"id":"a","colour":"red","parts":[],"byName":{},"when":1,"inline":[{"a":true,"c":3}]}`, []string{"Thing.inline[0].c: not declared"}},
		{"index signature only at its level", "Thing", `{` + base + `,"open":{"k":"v","free":{"deep":1}}}`, nil},
		{"index signature does not cover parent", "Thing", `{` + base + `,"open":{"k":"v"},"nope":1}`, []string{"Thing.nope: not declared"}},
		{"inherited plus index", "Child", `{` + base + `,"extra_field":true,"anything":1}`, nil},
		{"index does not cover nested", "Child", `{` + base + `,"extra_field":true,"parts":[{"name":"p","bad":1}]}`, []string{"Child.parts[0].bad: not declared"}},
		{"quoted key path", "Thing", `{` + base + `,"we-ird":1}`, []string{`Thing["we-ird"]: not declared`}},
		{"wrong kinds", "Thing", `{"id":1,"colour":true,"parts":{},"byName":[],"when":"x","inline":[5]}`, []string{
			"Thing.byName: got array", "Thing.colour: got boolean", "Thing.id: got number",
			"Thing.inline[0]: got number", "Thing.parts: got object", "Thing.when: got string",
		}},
		{"null where not allowed", "Thing", `{` + base + `,"count":null}`, []string{"Thing.count: null, but the contract says number"}},
		{"union mismatch", "Thing", `{` + base + `,"either":5}`, []string{"Thing.either: got number"}},
		{"literal values not checked", "Thing", `{"id":"a","colour":"purple","parts":[],"byName":{},"when":1,"inline":[]}`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := c.CheckJSON(tt.typ, []byte(tt.doc))
			if tt.want == nil {
				if err != nil {
					t.Fatalf("unexpected: %v", err)
				}
				return
			}
			var p Problems
			if !errors.As(err, &p) {
				t.Fatalf("err = %v, want Problems", err)
			}
			if len(p) != len(tt.want) {
				t.Fatalf("got %d problems, want %d:\n%v", len(p), len(tt.want), err)
			}
			for i, w := range tt.want {
				if !strings.HasPrefix(p[i], w) {
					t.Errorf("problem %d = %q, want prefix %q", i, p[i], w)
				}
			}
			if !strings.Contains(err.Error(), tt.want[0]) {
				t.Errorf("Error() = %q does not list %q", err.Error(), tt.want[0])
			}
		})
	}
}

func TestCheckJSONBadInput(t *testing.T) {
	c := mustParse(t, sample)
	for _, tt := range []struct{ typ, doc, want string }{
		{"Nope", `{}`, "not declared in the contract"},
		{"Thing", `{`, "invalid JSON"},
		{"Thing", `{} {}`, "data after the first value"},
		{"Thing", ``, "invalid JSON"},
		{"Thing", `"str"`, "got string"},
	} {
		err := c.CheckJSON(tt.typ, []byte(tt.doc))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("CheckJSON(%s, %q) = %v, want %q", tt.typ, tt.doc, err, tt.want)
		}
	}
}

func TestCheckJSONRealContract(t *testing.T) {
	c := MustLoad(t)
	doc := `{"spec":{"id":"w","routes":[{"host":"h"}],"future":1,"vm":{"driver":"kvm","port":1,"rootfs":"shared"}},
		"kind":"vm","desired_replicas":1,"ready":1,"pending":0,"total_in_flight":0,
		"vms":[{"sandbox_id":"s","addr":"a","in_flight":0,"healthy":true,"draining":false,"foo":1}]}`
	err := c.CheckJSON("DeploymentStatus", []byte(doc))
	var p Problems
	if !errors.As(err, &p) {
		t.Fatalf("err = %v", err)
	}
	want := Problems{"DeploymentStatus.spec.vm.rootfs: not declared", "DeploymentStatus.vms[0].foo: not declared"}
	if diff := cmp.Diff(want, p); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

type goThing struct {
	ID        string            `json:"id"`
	Count     *int              `json:"count,omitempty"`
	Colour    Colour            `json:"colour"`
	Parts     []Part            `json:"parts"`
	More      []Part            `json:"more,omitempty"`
	Labels    map[string]string `json:"labels,omitempty"`
	ByName    map[string]Part   `json:"byName"`
	Raw       []byte            `json:"raw,omitempty"`
	When      *int64            `json:"when"`
	Maybe     *string           `json:"maybe,omitempty"`
	Inline    []goInline        `json:"inline"`
	Open      *goOpen           `json:"open,omitempty"`
	Either    goUnion           `json:"either,omitzero"`
	QuotedKey string            `json:"quoted-key,omitempty"`
	private   int
	Skipped   int `json:"-"`
}

// Colour stands in for the Go type of the contract's Colour.
type Colour string

// Part stands in for the Go type of the contract's Part: names must match.
type Part struct {
	Name string `json:"name"`
}

type goInline struct {
	A bool   `json:"a"`
	B string `json:"b,omitempty"`
}

type goOpen struct {
	K     string         `json:"k"`
	Extra map[string]any `json:"-"`
}

type goUnion struct{ v []string }

func (u goUnion) MarshalJSON() ([]byte, error)  { return nil, nil }
func (u *goUnion) UnmarshalJSON(b []byte) error { return nil }
func (u goUnion) IsZero() bool                  { return u.v == nil }

type goChild struct {
	goThing
	ExtraField bool `json:"extra_field"`
}

func TestCheckGoType(t *testing.T) {
	c := mustParse(t, sample)
	if p := c.CheckGoType("Thing", reflect.TypeFor[goThing]()); p != nil {
		t.Errorf("Thing: %v", p)
	}
	if p := c.CheckGoType("Thing", reflect.TypeFor[*goThing]()); p != nil {
		t.Errorf("*Thing: %v", p)
	}
	if p := c.CheckGoType("Child", reflect.TypeFor[goChild]()); p != nil {
		t.Errorf("Child (embedded Thing): %v", p)
	}
	if p := c.CheckGoType("Colour", reflect.TypeFor[Colour]()); p != nil {
		t.Errorf("Colour: %v", p)
	}
	if p := c.CheckGoType("Colour", reflect.TypeFor[int]()); len(p) != 1 || !strings.Contains(p[0], "string union") {
		t.Errorf("Colour as int: %v", p)
	}
	type badThing struct {
		ID     int        `json:"id,omitempty"`
		Count  int        `json:"count"`
		Colour int        `json:"colour"`
		Parts  []goInline `json:"parts"`
		More   string     `json:"more,omitempty"`
		Labels []string   `json:"labels,omitempty"`
		ByName map[int]Part
		When   int64      `json:"when"`
		Inline []goInline `json:"inline"`
		Open   *struct {
			J string `json:"j"`
		} `json:"open,omitempty"`
		Either []string `json:"either,omitempty"`
		Bonus  string   `json:"bonus"`
	}
	got := c.CheckGoType("Thing", reflect.TypeFor[badThing]())
	want := []string{
		"Thing.id: required in the contract",
		"Thing.id: contract says string",
		"Thing.count: optional in the contract",
		"Thing.colour: contract says Colour, Go type is int",
		"Thing.parts[]: contract says Part",
		"Thing.more: contract says Part[]",
		"Thing.labels: contract says Record<string, string>",
		"Thing.byName: declared in the contract, but",
		"Thing.raw: declared in the contract, but",
		"Thing.when: nullable in the contract",
		"Thing.maybe: declared in the contract, but",
		"Thing.open.k: declared in the contract, but",
		"Thing.either: contract says Colour | Colour[]",
		"Thing.quoted-key: declared in the contract, but",
		"Thing.ByName: Go field",
		"Thing.open.j: Go field",
		"Thing.bonus: Go field",
	}
	if len(got) != len(want) {
		t.Errorf("got %d problems, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	for _, w := range want {
		found := false
		for _, g := range got {
			found = found || strings.HasPrefix(g, w)
		}
		if !found {
			t.Errorf("no problem starts with %q; got:\n%s", w, strings.Join(got, "\n"))
		}
	}
	if p := c.CheckGoType("Thing", reflect.TypeFor[int]()); len(p) != 1 || !strings.Contains(p[0], "not a struct") {
		t.Errorf("int: %v", p)
	}
	if p := c.CheckGoType("Nope", reflect.TypeFor[goThing]()); len(p) != 1 || !strings.Contains(p[0], "not declared") {
		t.Errorf("Nope: %v", p)
	}
}

func TestFind(t *testing.T) {
	root := t.TempDir()
	contract := filepath.Join(root, "shared", "contract", "hws", "dist", "types.d.ts")
	if err := os.MkdirAll(filepath.Dir(contract), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(contract, []byte(`export type A = "a";`), 0o644); err != nil {
		t.Fatal(err)
	}
	pkg := filepath.Join(root, "main", "internal", "pkg")
	if err := os.MkdirAll(pkg, 0o755); err != nil {
		t.Fatal(err)
	}

	t.Setenv(EnvPath, "")
	t.Chdir(pkg)
	got, err := Find()
	if err != nil || got != contract {
		t.Errorf("walking up: Find() = %q, %v; want %q", got, err, contract)
	}
	c, err := Load()
	if err != nil || c.Path != contract || len(c.Names) != 1 {
		t.Errorf("Load() = %+v, %v", c, err)
	}

	other := filepath.Join(root, "elsewhere.d.ts")
	if err := os.WriteFile(other, []byte(`export type B = "b"; export type C = "c";`), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvPath, other)
	if c, err := Load(); err != nil || c.Path != other || len(c.Names) != 2 {
		t.Errorf("with $%s: Load() = %+v, %v", EnvPath, c, err)
	}

	t.Setenv(EnvPath, filepath.Join(root, "missing.d.ts"))
	if _, err := Load(); err == nil || !strings.Contains(err.Error(), EnvPath) {
		t.Errorf("missing $%s file: err = %v", EnvPath, err)
	}

	if err := os.WriteFile(other, []byte(`export nonsense`), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvPath, other)
	if _, err := Load(); err == nil || !strings.Contains(err.Error(), "elsewhere.d.ts:1") {
		t.Errorf("unparsable contract: err = %v", err)
	}
}

func TestFindNothing(t *testing.T) {
	t.Setenv(EnvPath, "")
	t.Chdir(t.TempDir())
	if _, err := Find(); err == nil || !strings.Contains(err.Error(), "no shared/contract") {
		t.Errorf("Find() err = %v", err)
	}
	tb := &fakeTB{TB: t}
	var wg sync.WaitGroup
	wg.Go(func() { MustLoad(tb) })
	wg.Wait()
	if !strings.Contains(tb.fatal, "loading the admin API contract") {
		t.Errorf("MustLoad did not fail the test: %q", tb.fatal)
	}
}

// fakeTB records Fatalf instead of failing the real test.
type fakeTB struct {
	testing.TB
	fatal string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// zodSrc is Zod 4 declaration output in the Computer contract's style.
const zodSrc = `import { z } from "zod";
import { type Elsewhere } from "./other.js";
/** A state. */
export declare const stateSchema: z.ZodDiscriminatedUnion<[z.ZodObject<{
    state: z.ZodEnum<{
        running: "running";
        sleeping: "sleeping";
    }>;
}, z.core.$strict>, z.ZodObject<{
    state: z.ZodLiteral<"queued">;
    position: z.ZodNumber;
}, z.core.$strict>], "state">;
export type State = z.output<typeof stateSchema>;
export declare const thingSchema: z.ZodObject<{
    id: z.ZodString;
    via: z.ZodOptional<z.ZodString>;
    code: z.ZodNullable<z.ZodNumber>;
    tags: z.ZodReadonly<z.ZodSet<z.ZodString>>;
    extra: z.ZodJSONSchema;
    other: z.ZodRecord<z.ZodString, z.ZodBoolean>;
}, z.core.$loose>;
type Private = Readonly<{ kind: "a"; n: number }> | Readonly<{ kind: "b" }>;
export type Uses = Readonly<{ p: Private; e: Elsewhere; list: readonly Private[] }>;
export declare class Oops extends Error {
    readonly code: "x" | "y";
    constructor(code: "x" | "y");
}
export declare function make(o: Readonly<{ f: <T>(b: () => T) => T }>): { get: () => number };
export {};
`

func TestParseZod(t *testing.T) {
	c, err := ParseFiles(Source{Name: "zod.d.ts", Src: []byte(zodSrc)})
	if err != nil {
		t.Fatal(err)
	}
	st := c.Aliases["State"]
	if st == nil || st.Type.Kind != Union || len(st.Type.Union) != 2 {
		t.Fatalf("State = %+v, want the schema's union of two objects", st)
	}
	if got := st.Type.Union[0].Fields[0].Type.Literals; len(got) != 2 || got[1] != "sleeping" {
		t.Errorf("the enum's literals = %q", got)
	}
	th := c.Aliases["thingSchema"].Type
	if th.Kind != Object || !th.IndexSignature {
		t.Fatalf("thingSchema = %s (index %v), want a loose object", th, th.IndexSignature)
	}
	want := map[string]string{"id": "string", "via": "string?", "code": "number | null", "tags": "string[]", "extra": "unknown", "other": "Record<string, boolean>"}
	for _, f := range th.Fields {
		got := f.Type.String()
		if f.Optional {
			got += "?"
		}
		if f.Nullable {
			got += " | null"
		}
		if got != want[f.Name] {
			t.Errorf("thingSchema.%s = %s, want %s", f.Name, got, want[f.Name])
		}
		delete(want, f.Name)
	}
	if len(want) != 0 {
		t.Errorf("fields not parsed: %v", want)
	}
	if a := c.Aliases["Elsewhere"]; a == nil || !a.Imported {
		t.Errorf("an imported name is not an opaque alias: %+v", a)
	}
	if _, ok := c.Aliases["Oops"]; ok {
		t.Error("a declared class became a type")
	}
	// Strict literals: the discriminator's value is checked.
	c.StrictLiterals = true
	if err := c.CheckJSON("State", []byte(`{"state":"queued","position":2}`)); err != nil {
		t.Errorf("a queued state: %v", err)
	}
	err = c.CheckJSON("State", []byte(`{"state":"paused"}`))
	if err == nil || !strings.Contains(err.Error(), `"paused", but the contract says "running" | "sleeping"`) {
		t.Errorf("an undeclared state = %v", err)
	}
	// The union member with fewest problems is the one reported.
	err = c.CheckJSON("Uses", []byte(`{"p":{"kind":"b","x":2},"e":{"any":1},"list":[]}`))
	if err == nil || strings.Contains(err.Error(), `"b", but`) || !strings.Contains(err.Error(), "Uses.p.x: not declared") {
		t.Errorf("a member with an extra key = %v", err)
	}
}

func TestLoadComputer(t *testing.T) {
	c := MustLoadComputer(t)
	f := c.Aliases["ComputerFact"]
	if f == nil || f.Type.Kind != Union || len(f.Type.Union) != 5 {
		t.Fatalf("ComputerFact = %+v, want a union of the five kinds", f)
	}
	var kinds []string
	for _, m := range f.Type.Union {
		for _, fl := range m.Fields {
			if fl.Name == "kind" {
				kinds = append(kinds, fl.Type.Literals...)
			}
		}
	}
	if strings.Join(kinds, " ") != "process.exited files.written egress lifecycle interval" {
		t.Errorf("fact kinds = %q", kinds)
	}
	for _, n := range []string{"ComputerGrant", "ComputerProvenance", "ComputerRuntimeState", "ComputerUsageInterval", "ComputerBackingChange", "HostCapacity", "hostCapacityRegistrySchema", "hostedBackingsSchema", "FleetSlotReservation"} {
		if _, ok := c.Aliases[n]; !ok {
			t.Errorf("the Computer contract has no %s", n)
		}
	}
}

// TestCheckGoObjectUnion: a flat struct carries a union of objects when it
// has every member's keys, optional where some member lacks them.
func TestCheckGoObjectUnion(t *testing.T) {
	c, err := ParseFiles(Source{Name: "zod.d.ts", Src: []byte(zodSrc)})
	if err != nil {
		t.Fatal(err)
	}
	type good struct {
		State    string `json:"state"`
		Position *int   `json:"position,omitempty"`
	}
	if p := c.CheckGoType("State", reflect.TypeFor[good]()); len(p) != 0 {
		t.Errorf("good: %q", p)
	}
	type bad struct {
		State    string `json:"state,omitempty"`
		Position *int   `json:"position"`
	}
	if p := c.CheckGoType("State", reflect.TypeFor[bad]()); len(p) != 2 {
		t.Errorf("bad: %q, want 2 problems", p)
	}
}
