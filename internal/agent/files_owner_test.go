//go:build linux

package agent_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/berth-dev/berth/internal/agent"
)

// TestFilesOwnedByTheRootsOwner: as root, what the agent (or berth on the
// host, through agent.WriteFile) makes in a root owned by a sandbox's uid
// belongs to that uid, so the sandbox can still change it.
func TestFilesOwnedByTheRootsOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown needs root")
	}
	const uid, gid = 1_000_000_123, 1_000_000_124
	root := t.TempDir()
	if err := os.Chown(root, uid, gid); err != nil {
		t.Fatal(err)
	}
	if _, err := agent.WriteFile(root, "/host.txt", strings.NewReader("x"), 0); err != nil {
		t.Fatal(err)
	}
	c, _ := serve(t, agent.Options{Root: root})
	if _, err := c.WriteFile(t.Context(), "/agent.txt", strings.NewReader("y"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Mkdir(t.Context(), "/a/b/c", 0o755, true); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Mkdir(t.Context(), "/d", 0o755, false); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"host.txt", "agent.txt", "a", "a/b", "a/b/c", "d"} {
		fi, err := os.Lstat(filepath.Join(root, p))
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != uid || st.Gid != gid {
			t.Errorf("%s is owned by %d:%d, want %d:%d", p, st.Uid, st.Gid, uid, gid)
		}
	}
}
