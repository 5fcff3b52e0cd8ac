//go:build unix

package site

import (
	"path/filepath"
	"syscall"
	"testing"
)

// TestFIFO checks that a named pipe in the root is answered as missing
// instead of blocking the request in open(2) waiting for a writer. A hang
// here fails the test through the test binary's -timeout.
func TestFIFO(t *testing.T) {
	root := tree(t)
	for _, name := range []string{"pipe", "index.html.d/index.html"} {
		if err := syscall.Mkfifo(filepath.Join(root, filepath.FromSlash(name)), 0o644); err != nil {
			t.Skipf("mkfifo: %v", err)
		}
	}
	tests := []struct {
		name   string
		cfg    Config
		target string
	}{
		{"file", config(root), "/pipe"},
		{"index", Config{Root: root, Index: "index.html"}, "/index.html.d/"},
		{"not_found page", Config{Root: root, NotFound: "pipe"}, "/missing"},
		{"spa index", Config{Root: root, Index: "pipe", SPA: true}, "/missing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := do(t, New(tt.cfg), "GET", tt.target)
			if rec.Code != 404 || rec.Body.String() != "not found\n" {
				t.Errorf("GET %s = %d %q, want 404 not found", tt.target, rec.Code, rec.Body)
			}
		})
	}
}
