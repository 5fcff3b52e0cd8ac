package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestApplyStrictJSON: JSON (a .json file, or content starting with { or
// [) is parsed as JSON and refused with JSON's error and position where it
// is not JSON, instead of being accepted as YAML; YAML files stay YAML.
func TestApplyStrictJSON(t *testing.T) {
	for _, tt := range []struct {
		name, file, content string
		wantErr             string // "" means applied
	}{
		{"trailing comma, .json", "spec.json", "{\n  \"id\": \"web\",\n  \"routes\": [],\n}\n", "spec.json: invalid JSON at line 4, column 1: invalid character '}'"},
		{"trailing comma in a list, stdin", "-", `[{"id":"web","routes":[]},]`, "stdin: invalid JSON at line 1, column 27: invalid character ']'"},
		{"comment, no extension", "spec", "{\"id\":\"web\", // why\n\"routes\":[]}", "invalid JSON at line 1, column 14"},
		{"yaml in a .json file", "spec.json", "id: web\nroutes: []\n", "spec.json: invalid JSON at line 1, column 1"},
		{"truncated", "spec.json", "{\"id\":\"web\",\n\"routes\":[", "invalid JSON at line 2, column 10: unexpected end of input"},
		{"flow yaml in a .yaml file", "spec.yaml", "{id: web, routes: [],}\n", ""},
		{"json in a .yml file", "spec.yml", `{"id":"web","routes":[]}`, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := newFakeServer(t)
			stdin, path := tt.content, "-"
			if tt.file != "-" {
				path = filepath.Join(t.TempDir(), tt.file)
				if err := os.WriteFile(path, []byte(tt.content), 0o600); err != nil {
					t.Fatal(err)
				}
				stdin = ""
			}
			r := run(t, srv, stdin, "apply", "-f", path)
			if tt.wantErr == "" {
				if r.code != 0 || len(posted(t, srv)) != 1 {
					t.Fatalf("exit %d, stderr %q, posted %d; want applied", r.code, r.stderr, len(posted(t, srv)))
				}
				return
			}
			if r.code != 1 || !strings.Contains(r.stderr, tt.wantErr) {
				t.Errorf("exit %d, stderr %q; want 1 and %q", r.code, r.stderr, tt.wantErr)
			}
			if n := len(posted(t, srv)); n != 0 {
				t.Errorf("%d specs posted, want none", n)
			}
		})
	}
}
