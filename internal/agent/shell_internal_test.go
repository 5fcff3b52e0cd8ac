//go:build linux

package agent

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestSplitPlain(t *testing.T) {
	tests := []struct {
		line string
		want []string // nil: needs the shell
	}{
		{"prog", []string{"prog"}},
		{"exec /usr/bin/prog --port=8080 a,b x@y 50% +1", []string{"/usr/bin/prog", "--port=8080", "a,b", "x@y", "50%", "+1"}},
		{"  exec\tprog  a  ", []string{"prog", "a"}},
		{"./bin/app serve", []string{"./bin/app", "serve"}},
		{"", nil},
		{"exec", nil},
		{"exec -a name prog", nil},
		{"FOO=bar prog", nil},
		{"prog $HOME", nil},
		{"prog 'a b'", nil},
		{`prog "a"`, nil},
		{`prog a\ b`, nil},
		{"prog *.go", nil},
		{"prog a?", nil},
		{"prog [ab]", nil},
		{"prog ~/x", nil},
		{"prog > out", nil},
		{"prog < in", nil},
		{"prog | cat", nil},
		{"prog; other", nil},
		{"prog && other", nil},
		{"prog &", nil},
		{"prog # comment", nil},
		{"prog `x`", nil},
		{"(prog)", nil},
		{"{ prog; }", nil},
		{"prog\nother", nil},
		{"prog é", nil},
		{"echo hi", nil},
		{"true", nil},
		{"cd /tmp", nil},
		{"exit 3", nil},
		{"if", nil},
		{"exec exec prog", nil},
	}
	for _, tt := range tests {
		got, ok := splitPlain(tt.line)
		if ok != (tt.want != nil) || !slices.Equal(got, tt.want) {
			t.Errorf("splitPlain(%q) = %q, %v; want %q", tt.line, got, ok, tt.want)
		}
	}
}

func TestShellFree(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	os.Mkdir(bin, 0o755)
	os.WriteFile(filepath.Join(bin, "prog"), []byte("#!/bin/sh\n"), 0o755)
	os.WriteFile(filepath.Join(bin, "noexec"), []byte("#!/bin/sh\n"), 0o644)
	os.Mkdir(filepath.Join(bin, "adir"), 0o755)
	env := []string{"PATH=/nonexistent", "PATH=" + bin}
	tests := []struct {
		line, dir string
		path      string // "" needs the shell
		argv      []string
	}{
		{"exec prog a b", "", filepath.Join(bin, "prog"), []string{"prog", "a", "b"}},
		{"bin/prog", dir, "bin/prog", []string{"bin/prog"}},
		{"./bin/prog x", dir, "./bin/prog", []string{"./bin/prog", "x"}},
		{filepath.Join(bin, "prog"), "", filepath.Join(bin, "prog"), []string{filepath.Join(bin, "prog")}},
		{"noexec", "", "", nil},
		{"adir", "", "", nil},
		{"missing", "", "", nil},
		{"bin/missing", dir, "", nil},
		{"prog $X", "", "", nil},
	}
	for _, tt := range tests {
		path, argv, ok := shellFree(tt.line, env, tt.dir)
		if ok != (tt.path != "") || path != tt.path || !slices.Equal(argv, tt.argv) {
			t.Errorf("shellFree(%q, %q) = %q, %q, %v; want %q, %q", tt.line, tt.dir, path, argv, ok, tt.path, tt.argv)
		}
	}
	// Relative PATH entries are the shell's business.
	for _, p := range []string{":" + bin, "bin:" + bin, "."} {
		if path, _, ok := shellFree("prog", []string{"PATH=" + p}, dir); ok {
			t.Errorf("prog with PATH %q: %q, want the shell", p, path)
		}
	}
	if path, _, ok := shellFree("prog", []string{"PATH=" + bin + "/"}, ""); !ok || path != filepath.Join(bin, "prog") {
		t.Errorf("prog with PATH %s/: %q, %v", bin, path, ok)
	}
}

func TestMainCommandShellFree(t *testing.T) {
	cmd := mainCommand([]string{"/bin/sh", "-c", "exec /bin/cat -u x"}, "")
	if cmd.Path != "/bin/cat" || !slices.Equal(cmd.Args, []string{"/bin/cat", "-u", "x"}) {
		t.Errorf("plain: Path %q Args %q, want /bin/cat directly", cmd.Path, cmd.Args)
	}
	cmd = mainCommand([]string{"/bin/sh", "-c", "exec /bin/cat > x"}, "")
	if cmd.Path != "/bin/sh" || !slices.Equal(cmd.Args, []string{"/bin/sh", "-c", "exec /bin/cat > x"}) {
		t.Errorf("redirection: Path %q Args %q, want the shell", cmd.Path, cmd.Args)
	}
	cmd = mainCommand([]string{"/usr/bin/env", "-c", "/bin/cat"}, "")
	if cmd.Path != "/usr/bin/env" {
		t.Errorf("another program: Path %q, want it unchanged", cmd.Path)
	}
}
