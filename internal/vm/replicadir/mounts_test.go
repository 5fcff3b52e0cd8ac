package replicadir_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/replicadir"
)

func TestCheckMounts(t *testing.T) {
	src := t.TempDir()
	file := filepath.Join(src, "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	ro := func(target string) vm.Mount { return vm.Mount{Source: src, Target: target, ReadOnly: true} }
	for _, tt := range []struct {
		name      string
		mounts    []vm.Mount
		workspace string
		writable  bool
		want      string // "" for none
	}{
		{"ok", []vm.Mount{ro("/data"), ro("/opt/model"), ro("/data2")}, "", false, ""},
		{"writable allowed", []vm.Mount{{Source: src, Target: "/rw"}}, "", true, ""},
		{"writable refused", []vm.Mount{ro("/data"), {Source: src, Target: "/rw"}}, "", false, "mounts[1] (mount " + src + " at /rw): this driver attaches mounts read-only only"},
		{"relative source", []vm.Mount{{Source: "tree", Target: "/d", ReadOnly: true}}, "", false, "mounts[0] (mount tree at /d): the source is not an absolute path"},
		{"missing source", []vm.Mount{{Source: src + "/none", Target: "/d", ReadOnly: true}}, "", false, "mounts[0] (mount " + src + "/none at /d): the source: "},
		{"file source", []vm.Mount{{Source: file, Target: "/d", ReadOnly: true}}, "", false, "the source is not a directory"},
		{"relative target", []vm.Mount{ro("d")}, "", false, "the target must be an absolute path"},
		{"unclean target", []vm.Mount{ro("/d/")}, "", false, "the target must be a clean path"},
		{"dotdot target", []vm.Mount{ro("/d/../e")}, "", false, "the target must be a clean path"},
		{"root target", []vm.Mount{ro("/")}, "", false, "cannot mount over /"},
		{"nested", []vm.Mount{ro("/d/e"), ro("/d")}, "", false, "mounts[1] (mount " + src + " at /d): the target nests with mounts[0]"},
		{"equal", []vm.Mount{ro("/d"), ro("/d")}, "", false, "nests with mounts[0]"},
		{"workspace itself", []vm.Mount{ro("/workspace")}, src, false, "collides with the workspace at /workspace"},
		{"in the workspace", []vm.Mount{ro("/workspace/m")}, src, false, "collides with the workspace"},
		{"over the workspace", []vm.Mount{ro("/")}, src, false, "cannot mount over /"},
		{"workspace name without one", []vm.Mount{ro("/workspace")}, "", false, ""},
		{"prefix is no nesting", []vm.Mount{ro("/workspacex"), ro("/data"), ro("/data-2")}, src, false, ""},
	} {
		err := replicadir.CheckMounts(vm.Spec{Mounts: tt.mounts, Workspace: tt.workspace}, tt.writable, "/workspace")
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: %v", tt.name, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: error %v, want one saying %q", tt.name, err, tt.want)
		}
	}
	if err := replicadir.NoMounts("process", vm.Spec{}); err != nil {
		t.Errorf("NoMounts without mounts: %v", err)
	}
	if err := replicadir.NoMounts("process", vm.Spec{Mounts: []vm.Mount{ro("/d")}}); err == nil || !strings.Contains(err.Error(), "the process driver cannot attach mounts (mount "+src+" at /d)") {
		t.Errorf("NoMounts: %v", err)
	}
}
