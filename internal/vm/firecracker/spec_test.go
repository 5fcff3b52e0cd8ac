package firecracker

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// The tests check every request body the driver sends, and every answer the
// fake VMM gives, against Firecracker's own OpenAPI 2.0 description of its
// API. This file is a small validator for the parts of Swagger 2.0 that
// spec uses: paths with {parameters}, body parameters, $ref into
// definitions, object/string/integer/number/boolean/array types, required,
// enum, minimum/maximum, items and additionalProperties. Firecracker
// rejects unknown fields (its types deny them), so a property the spec does
// not declare is an error unless the schema has additionalProperties.

// envAPISpec names the variable that, when set, is the path of the spec.
const envAPISpec = "BERTH_FIRECRACKER_API"

// specRel is where the spec sits relative to the folder the repository is
// cloned into (X/main next to X/shared).
const specRel = "shared/reference/firecracker-api.yaml"

// findSpec returns $BERTH_FIRECRACKER_API if set, otherwise the first
// <dir>/shared/reference/firecracker-api.yaml walking up from the working
// directory.
func findSpec() (string, error) {
	if p := os.Getenv(envAPISpec); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("$%s: %w", envAPISpec, err)
		}
		return p, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for dir := wd; ; {
		p := filepath.Join(dir, specRel)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no %s in %s or any parent directory (set $%s to the file)", specRel, wd, envAPISpec)
		}
		dir = parent
	}
}

type schema struct {
	Ref                  string             `yaml:"$ref"`
	Type                 string             `yaml:"type"`
	Required             []string           `yaml:"required"`
	Properties           map[string]*schema `yaml:"properties"`
	AdditionalProperties yaml.Node          `yaml:"additionalProperties"`
	Enum                 []any              `yaml:"enum"`
	Items                *schema            `yaml:"items"`
	Minimum              *float64           `yaml:"minimum"`
	Maximum              *float64           `yaml:"maximum"`
}

type specParam struct {
	Name     string  `yaml:"name"`
	In       string  `yaml:"in"`
	Required bool    `yaml:"required"`
	Schema   *schema `yaml:"schema"`
}

type specOp struct {
	Parameters []specParam `yaml:"parameters"`
	Responses  map[string]struct {
		Schema *schema `yaml:"schema"`
	} `yaml:"responses"`
}

// apiSpec is the parsed spec.
type apiSpec struct {
	Paths       map[string]map[string]specOp `yaml:"paths"`
	Definitions map[string]*schema           `yaml:"definitions"`
}

var (
	specOnce   = make(chan struct{}, 1)
	loadedSpec *apiSpec
	specErr    error
)

// loadSpec finds and parses the spec once per test binary. It fails the
// test, rather than skipping, when the spec is missing: CI always has it.
func loadSpec(t testing.TB) *apiSpec {
	t.Helper()
	select {
	case specOnce <- struct{}{}:
		loadedSpec, specErr = parseSpecFile()
	default:
	}
	if specErr != nil {
		t.Fatalf("loading the Firecracker API spec: %v", specErr)
	}
	return loadedSpec
}

func parseSpecFile() (*apiSpec, error) {
	p, err := findSpec()
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	var s apiSpec
	if err := yaml.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	if len(s.Paths) == 0 || len(s.Definitions) == 0 {
		return nil, fmt.Errorf("%s: no paths or definitions", p)
	}
	return &s, nil
}

// route finds the operation for method and a concrete path, and the values
// of the path's {parameters}.
func (s *apiSpec) route(method, path string) (specOp, map[string]string, error) {
	segs := strings.Split(strings.Trim(path, "/"), "/")
	for tmpl, ops := range s.Paths {
		tsegs := strings.Split(strings.Trim(tmpl, "/"), "/")
		if len(tsegs) != len(segs) {
			continue
		}
		params := map[string]string{}
		ok := true
		for i, ts := range tsegs {
			if strings.HasPrefix(ts, "{") && strings.HasSuffix(ts, "}") && segs[i] != "" {
				params[ts[1:len(ts)-1]] = segs[i]
			} else if ts != segs[i] {
				ok = false
				break
			}
		}
		if !ok {
			continue
		}
		op, found := ops[strings.ToLower(method)]
		if !found {
			return specOp{}, nil, fmt.Errorf("%s %s: the spec has no %s operation on %s", method, path, method, tmpl)
		}
		return op, params, nil
	}
	return specOp{}, nil, fmt.Errorf("%s %s: no such path in the spec", method, path)
}

// checkRequest validates one request against the spec: the path and method
// exist, the body is present exactly when the operation takes one, and it
// matches the body parameter's schema. A body property named like a path
// parameter (drive_id, iface_id) must equal it, as Firecracker demands.
func (s *apiSpec) checkRequest(method, path string, body []byte) error {
	op, params, err := s.route(method, path)
	if err != nil {
		return err
	}
	var bodyParam *specParam
	for i := range op.Parameters {
		if op.Parameters[i].In == "body" {
			bodyParam = &op.Parameters[i]
		}
	}
	if len(bytes.TrimSpace(body)) == 0 {
		if bodyParam != nil && bodyParam.Required {
			return fmt.Errorf("%s %s: the spec requires a body", method, path)
		}
		return nil
	}
	if bodyParam == nil {
		return fmt.Errorf("%s %s: the spec takes no body, got %s", method, path, body)
	}
	v, err := decodeJSON(body)
	if err != nil {
		return fmt.Errorf("%s %s: body is not JSON: %w", method, path, err)
	}
	var problems []string
	s.validate("body", v, bodyParam.Schema, &problems)
	if m, ok := v.(map[string]any); ok {
		for name, val := range params {
			if got, ok := m[name]; ok && got != val {
				problems = append(problems, fmt.Sprintf("body.%s: %v differs from the path's %s %q", name, got, name, val))
			}
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%s %s: %s", method, path, strings.Join(problems, "; "))
	}
	return nil
}

// checkResponse validates an answer: its status must be one the operation
// declares (or covered by default), and its body must match that schema.
func (s *apiSpec) checkResponse(method, path string, status int, body []byte) error {
	op, _, err := s.route(method, path)
	if err != nil {
		return err
	}
	resp, ok := op.Responses[fmt.Sprint(status)]
	if !ok {
		if resp, ok = op.Responses["default"]; !ok {
			return fmt.Errorf("%s %s: status %d is not in the spec", method, path, status)
		}
	}
	if resp.Schema == nil {
		if len(bytes.TrimSpace(body)) > 0 {
			return fmt.Errorf("%s %s: status %d has no body in the spec, got %s", method, path, status, body)
		}
		return nil
	}
	v, err := decodeJSON(body)
	if err != nil {
		return fmt.Errorf("%s %s: answer is not JSON: %w", method, path, err)
	}
	var problems []string
	s.validate("answer", v, resp.Schema, &problems)
	if len(problems) > 0 {
		return fmt.Errorf("%s %s: %s", method, path, strings.Join(problems, "; "))
	}
	return nil
}

func decodeJSON(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, fmt.Errorf("more than one JSON value")
	}
	return v, nil
}

// resolve follows $ref into the definitions.
func (s *apiSpec) resolve(sc *schema) (*schema, error) {
	for depth := 0; sc != nil && sc.Ref != ""; depth++ {
		name, ok := strings.CutPrefix(sc.Ref, "#/definitions/")
		if !ok || depth > 16 {
			return nil, fmt.Errorf("unsupported $ref %q", sc.Ref)
		}
		if sc = s.Definitions[name]; sc == nil {
			return nil, fmt.Errorf("$ref to unknown definition %q", name)
		}
	}
	return sc, nil
}

// validate checks v against sc, adding one line per problem.
func (s *apiSpec) validate(where string, v any, sc *schema, problems *[]string) {
	add := func(format string, args ...any) {
		*problems = append(*problems, where+": "+fmt.Sprintf(format, args...))
	}
	sc, err := s.resolve(sc)
	if err != nil {
		add("%v", err)
		return
	}
	if sc == nil {
		return
	}
	typ := sc.Type
	if typ == "" && sc.Properties != nil {
		typ = "object"
	}
	switch typ {
	case "object":
		m, ok := v.(map[string]any)
		if !ok {
			add("want an object, got %s", kind(v))
			return
		}
		for _, r := range sc.Required {
			if _, ok := m[r]; !ok {
				add("required property %q is missing", r)
			}
		}
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			if p, ok := sc.Properties[k]; ok {
				s.validate(where+"."+k, m[k], p, problems)
				continue
			}
			switch ap := sc.AdditionalProperties; {
			case ap.Kind == 0 || ap.Kind == yaml.ScalarNode && ap.Value == "false":
				add("unknown property %q", k)
			case ap.Kind == yaml.MappingNode:
				var extra schema
				if err := ap.Decode(&extra); err != nil {
					add("additionalProperties: %v", err)
				} else {
					s.validate(where+"."+k, m[k], &extra, problems)
				}
			}
		}
	case "array":
		a, ok := v.([]any)
		if !ok {
			add("want an array, got %s", kind(v))
			return
		}
		for i, e := range a {
			s.validate(fmt.Sprintf("%s[%d]", where, i), e, sc.Items, problems)
		}
	case "string":
		if _, ok := v.(string); !ok {
			add("want a string, got %s", kind(v))
			return
		}
	case "integer", "number":
		n, ok := v.(json.Number)
		if !ok {
			add("want %s, got %s", typ, kind(v))
			return
		}
		f, err := n.Float64()
		if err != nil || typ == "integer" && (strings.ContainsAny(n.String(), ".eE") || f != math.Trunc(f)) {
			add("want %s, got %s", typ, n)
			return
		}
		if sc.Minimum != nil && f < *sc.Minimum {
			add("%s is below the minimum %v", n, *sc.Minimum)
		}
		if sc.Maximum != nil && f > *sc.Maximum {
			add("%s is above the maximum %v", n, *sc.Maximum)
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			add("want a boolean, got %s", kind(v))
			return
		}
	case "":
	default:
		add("unsupported schema type %q", typ)
		return
	}
	if len(sc.Enum) > 0 {
		for _, e := range sc.Enum {
			if fmt.Sprint(e) == fmt.Sprint(v) {
				return
			}
		}
		add("%v is not one of %v", v, sc.Enum)
	}
}

func kind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	}
	return fmt.Sprintf("%T", v)
}

// TestSpecValidator proves the validator rejects what Firecracker would:
// each bad request must be refused with a message naming the problem, and
// each good one accepted.
func TestSpecValidator(t *testing.T) {
	s := loadSpec(t)
	tests := []struct {
		method, path, body string
		want               string // "" for valid
	}{
		{"PUT", "/machine-config", `{"vcpu_count":2,"mem_size_mib":2048}`, ""},
		{"PUT", "/machine-config", `{"vcpu_count":2}`, `required property "mem_size_mib" is missing`},
		{"PUT", "/machine-config", `{"vcpu_count":"2","mem_size_mib":2048}`, "want integer, got a string"},
		{"PUT", "/machine-config", `{"vcpu_count":1.5,"mem_size_mib":2048}`, "want integer, got 1.5"},
		{"PUT", "/machine-config", `{"vcpu_count":33,"mem_size_mib":2048}`, "above the maximum 32"},
		{"PUT", "/machine-config", `{"vcpu_count":0,"mem_size_mib":2048}`, "below the minimum 1"},
		{"PUT", "/machine-config", `{"vcpu_count":1,"mem_size_mib":128,"vcpus":1}`, `unknown property "vcpus"`},
		{"PUT", "/machine-config", `{"vcpu_count":1,"mem_size_mib":128,"huge_pages":"1G"}`, "is not one of"},
		{"PUT", "/machine-config", `{"vcpu_count":1,"mem_size_mib":128,"cpu_template":"T2"}`, ""},
		{"PUT", "/machine-config", `{"vcpu_count":1,"mem_size_mib":128,"cpu_template":"T9"}`, "is not one of"},
		{"PUT", "/drives/rootfs", `{"drive_id":"rootfs","path_on_host":"/r","is_root_device":true,"is_read_only":false}`, ""},
		{"PUT", "/drives/rootfs", `{"drive_id":"other","path_on_host":"/r","is_root_device":true,"is_read_only":false}`, "differs from the path's drive_id"},
		{"PUT", "/drives/rootfs", `{"drive_id":"rootfs","is_root_device":"yes"}`, "want a boolean"},
		{"PUT", "/actions", `{"action_type":"InstanceStart"}`, ""},
		{"PUT", "/actions", `{"action_type":"Reboot"}`, "is not one of"},
		{"PUT", "/actions", ``, "requires a body"},
		{"PATCH", "/vm", `{"state":"Paused"}`, ""},
		{"PATCH", "/vm", `{"state":"Stopped"}`, "is not one of"},
		{"PUT", "/vm", `{"state":"Paused"}`, "no PUT operation"},
		{"PUT", "/snapshot/load", `{"snapshot_path":"/s","mem_backend":{"backend_type":"File","backend_path":"/m"},"resume_vm":true}`, ""},
		{"PUT", "/snapshot/load", `{"snapshot_path":"/s","mem_backend":{"backend_type":"Disk","backend_path":"/m"}}`, "body.mem_backend.backend_type"},
		{"PUT", "/snapshot/load", `{"snapshot_path":"/s","network_overrides":[{"iface_id":"eth0"}]}`, `body.network_overrides[0]: required property "host_dev_name"`},
		{"PUT", "/vsock", `{"guest_cid":2,"uds_path":"/v"}`, "below the minimum 3"},
		{"PUT", "/metrics", `{"metrics_path":"/m","properties":{"a":"b"}}`, ""},
		{"PUT", "/metrics", `{"metrics_path":"/m","properties":{"a":1}}`, "body.properties.a: want a string"},
		{"PUT", "/boot-source", `[]`, "want an object, got an array"},
		{"PUT", "/nonsense", `{}`, "no such path"},
		{"GET", "/", `{"x":1}`, "takes no body"},
		{"GET", "/", ``, ""},
	}
	for _, tt := range tests {
		err := s.checkRequest(tt.method, tt.path, []byte(tt.body))
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s %s %s: %v, want it valid", tt.method, tt.path, tt.body, err)
		case tt.want != "" && err == nil:
			t.Errorf("%s %s %s: valid, want an error with %q", tt.method, tt.path, tt.body, tt.want)
		case tt.want != "" && !strings.Contains(err.Error(), tt.want):
			t.Errorf("%s %s %s: %v, want an error with %q", tt.method, tt.path, tt.body, err, tt.want)
		}
	}

	answers := []struct {
		method, path string
		status       int
		body, want   string
	}{
		{"GET", "/", 200, `{"app_name":"Firecracker","id":"x","state":"Running","vmm_version":"1.12.0"}`, ""},
		{"GET", "/", 200, `{"app_name":"Firecracker","id":"x","state":"Booting","vmm_version":"1"}`, "is not one of"},
		{"PUT", "/actions", 204, ``, ""},
		{"PUT", "/actions", 400, `{"fault_message":"no"}`, ""},
		{"PUT", "/actions", 204, `{}`, "has no body"},
		{"PUT", "/actions", 400, `{"fault":"no"}`, `unknown property "fault"`},
	}
	for _, tt := range answers {
		err := s.checkResponse(tt.method, tt.path, tt.status, []byte(tt.body))
		if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("answer %d to %s %s %s: error %v, want %q", tt.status, tt.method, tt.path, tt.body, err, tt.want)
		}
	}
}
