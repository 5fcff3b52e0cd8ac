package image

import (
	"path/filepath"
	"reflect"
	"testing"

	"github.com/berth-dev/berth/internal/store"
)

// TestImportBuiltKeepsConfig: a built image's run defaults are its
// Config, survive a reopen, and go with a plain re-import or a delete.
func TestImportBuiltKeepsConfig(t *testing.T) {
	dbDir, dir := t.TempDir(), filepath.Join(t.TempDir(), "images")
	st, err := store.Open(dbDir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	s, err := New(t.Context(), Options{Dir: dir, Catalog: st})
	if err != nil {
		t.Fatal(err)
	}
	want := Config{Cmd: []string{"/bin/busybox", "httpd", "-f"}, Env: map[string]string{"A": "1"}, WorkDir: "/srv", Port: 8080}
	if _, err := s.ImportBuilt(t.Context(), "app-1", tree(t, "one"), want); err != nil {
		t.Fatal(err)
	}
	if c, ok := s.Config("app-1"); !ok || !reflect.DeepEqual(c, want) {
		t.Errorf("Config = %+v, %v; want %+v", c, ok, want)
	}
	s2, err := New(t.Context(), Options{Dir: dir, Catalog: st})
	if err != nil {
		t.Fatal(err)
	}
	if c, ok := s2.Config("app-1"); !ok || !reflect.DeepEqual(c, want) {
		t.Errorf("after a reopen: Config = %+v, %v", c, ok)
	}
	if _, err := s2.Import(t.Context(), "app-1", tree(t, "two")); err != nil {
		t.Fatal(err)
	}
	if c, ok := s2.Config("app-1"); ok {
		t.Errorf("a plain import kept the built config %+v", c)
	}
	if _, err := s2.ImportBuilt(t.Context(), "app-2", tree(t, "three"), want); err != nil {
		t.Fatal(err)
	}
	if err := s2.Delete(t.Context(), "app-2"); err != nil {
		t.Fatal(err)
	}
	if _, ok := s2.Config("app-2"); ok {
		t.Error("a deleted image kept its config")
	}
	if m, _ := st.ImageConfigs(t.Context()); len(m) != 0 {
		t.Errorf("image_configs rows left: %v", m)
	}
}
