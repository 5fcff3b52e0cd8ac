package agent

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// renameFailFS is a real file system whose nth rename fails, to drive
// commitPatch into its rollback.
type renameFailFS struct {
	fsys
	failAt, renames int
}

func (f *renameFailFS) Rename(oldname, newname string) error {
	if f.renames++; f.renames == f.failAt {
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: syscall.EIO}
	}
	return f.fsys.Rename(oldname, newname)
}

func TestCommitPatchRollsBack(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	write("a", "a0")
	write("b", "b0")
	write("d", "d0")
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()

	files := []*patchFile{
		{path: "/a", name: "a", origExists: true, orig: []byte("a0"), origMode: 0o640, exists: true, data: []byte("a1"), mode: 0o640},
		{path: "/new/c", name: "new/c", exists: true, data: []byte("c1"), mode: 0o644},
		{path: "/d", name: "d", origExists: true, orig: []byte("d0"), origMode: 0o640},
		{path: "/b", name: "b", origExists: true, orig: []byte("b0"), origMode: 0o640, exists: true, data: []byte("b1"), mode: 0o640},
	}
	// Renames: a, new/c, then b fails, after d was removed.
	err = commitPatch(&renameFailFS{fsys: root, failAt: 3}, files)
	var he *httpError
	if !errors.As(err, &he) || he.status != http.StatusInternalServerError || !strings.Contains(he.msg, "restored") {
		t.Fatalf("commitPatch = %v, want a 500 saying the files were restored", err)
	}
	for name, want := range map[string]string{"a": "a0", "b": "b0", "d": "d0"} {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || string(got) != want {
			t.Errorf("%s = %q, %v; want the original %q", name, got, err, want)
		}
		if st, err := os.Stat(filepath.Join(dir, name)); err == nil && st.Mode().Perm() != 0o640 {
			t.Errorf("%s mode %v, want 0640 restored", name, st.Mode())
		}
	}
	ents, _ := os.ReadDir(dir)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if got := strings.Join(names, " "); got != "a b d" {
		t.Errorf("directory holds %q after the rollback, want just a b d (no new dir, no temp files)", got)
	}

	// Without the fault the same change goes through.
	if err := commitPatch(root, files); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"a": "a1", "b": "b1", "new/c": "c1"} {
		if got, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(got) != want {
			t.Errorf("%s = %q, %v; want %q", name, got, err, want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "d")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("d: %v, want removed", err)
	}
}
