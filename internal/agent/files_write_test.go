//go:build linux

package agent_test

import (
	"errors"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"

	"golang.org/x/sys/unix"

	"github.com/berth-dev/berth/internal/agent"
)

// TestWriteFileAsTheAgent writes through the exported WriteFile and, in a
// twin tree, through an agent serving it, and wants the same answer, error
// status and message, and the same tree after each path.
func TestWriteFileAsTheAgent(t *testing.T) {
	ctx := t.Context()
	for _, tc := range []struct {
		path string
		mode fs.FileMode
		want int // status; 0 for success
	}{
		{"/new.txt", 0, 0},
		{"/new.txt", 0o600, 0},
		{"/in/ok.txt", 0, 0}, // keeps 0644
		{"/in/ok.txt", 0o751, 0},
		{"/in/okl", 0, 0},      // replaces the link, inside the root
		{"/in/dangling", 0, 0}, // the same
		{"/in/loop/x", 0, 0},   // a link inside leading inside
		{"in/rel", 0, http.StatusBadRequest},
		{"", 0, http.StatusBadRequest},
		{"/", 0, http.StatusBadRequest},
		{"/in/..", 0, http.StatusBadRequest},
		{"/a\x00b", 0, http.StatusBadRequest},
		{"/in", 0, http.StatusConflict},
		{"/missing/x", 0, http.StatusNotFound},
		{"/in/ok.txt/x", 0, http.StatusBadRequest},
		{"/in/self/x", 0, http.StatusBadRequest},
		{"/../outside/secret", 0, http.StatusForbidden},
		{"/in/../../outside/secret", 0, http.StatusForbidden},
		{"/escdir/secret", 0, http.StatusForbidden},
		{"/absdir/secret", 0, http.StatusForbidden},
		{"/chaindir/secret", 0, http.StatusForbidden},
		{"/in/deep/secret", 0, http.StatusForbidden},
		{"/in/updangler/x", 0, http.StatusForbidden},
	} {
		base, root := escapeTree(t)
		_, aroot := escapeTree(t)
		c, _ := serve(t, agent.Options{Root: aroot})
		outside := outsideState(t, base)

		got, err := agent.WriteFile(root, tc.path, strings.NewReader("planted"), tc.mode)
		want, werr := c.WriteFile(ctx, tc.path, strings.NewReader("planted"), tc.mode)
		var ge, we *agent.Error
		switch {
		case errors.As(err, &ge) != errors.As(werr, &we):
			t.Errorf("%q: WriteFile = %v, the agent %v", tc.path, err, werr)
			continue
		case err != nil && (ge.Status != tc.want || ge.Status != we.Status || ge.Message != we.Message):
			t.Errorf("%q: WriteFile = %d %q, the agent %d %q, want %d", tc.path, ge.Status, ge.Message, we.Status, we.Message, tc.want)
		case err == nil && tc.want != 0:
			t.Errorf("%q: WriteFile succeeded, want %d", tc.path, tc.want)
		case err == nil:
			got.ModTime = want.ModTime // written at different instants
			if got != want {
				t.Errorf("%q: WriteFile = %+v, the agent %+v", tc.path, got, want)
			}
		}
		if s := outsideState(t, base); s != outside {
			t.Errorf("%q: the outside changed:\n%s\nwant\n%s", tc.path, s, outside)
		}
		if a, b := treeState(t, root), treeState(t, aroot); a != b {
			t.Errorf("%q: the root differs from the agent's:\n%s\nagent's:\n%s", tc.path, a, b)
		}
	}
}

// treeState describes root's entries: names, types, modes and contents.
func treeState(t *testing.T, root string) string {
	t.Helper()
	var b strings.Builder
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		b.WriteString(rel + " " + fi.Mode().String())
		if fi.Mode().IsRegular() {
			data, _ := os.ReadFile(p)
			b.WriteString(" " + string(data))
		}
		b.WriteString("\n")
		return nil
	})
	return b.String()
}

// FuzzWriteFileConfined writes to arbitrary paths of a root full of links
// leading out: nothing outside may change, and every failure is an
// *agent.Error with a status a client can act on.
func FuzzWriteFileConfined(f *testing.F) {
	for _, p := range []string{
		"/x", "/esc", "/escdir/x", "/absdir/x", "/chain1", "/chaindir/x", "/in/deep/x",
		"/in/updangler/x", "/../x", "/in/../../x", "//in//ok.txt", "/in/./okl", "/in/loop/loop/x", "/.",
	} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, p string) {
		base, root := escapeTree(t)
		outside := outsideState(t, base)
		_, err := agent.WriteFile(root, p, strings.NewReader("planted"), 0)
		if err != nil {
			var ae *agent.Error
			if !errors.As(err, &ae) {
				t.Fatalf("%q: error %v is not an *agent.Error", p, err)
			}
			switch ae.Status {
			case http.StatusBadRequest, http.StatusForbidden, http.StatusNotFound, http.StatusConflict:
			default:
				t.Errorf("%q: status %d (%s)", p, ae.Status, ae.Message)
			}
		}
		if s := outsideState(t, base); s != outside {
			t.Fatalf("%q: the outside changed:\n%s\nwant\n%s", p, s, outside)
		}
	})
}

// TestWriteFileTakesTheRootFlock: a writer in another process (berth on
// the host, the agent in the sandbox) holding the root directory's flock
// holds WriteFile's replace back until it lets go; one that never lets go
// delays it by a bounded time only.
func TestWriteFileTakesTheRootFlock(t *testing.T) {
	flock := func(t *testing.T, root string) *os.File {
		d, err := os.Open(root)
		if err != nil {
			t.Fatal(err)
		}
		if err := unix.Flock(int(d.Fd()), unix.LOCK_EX); err != nil {
			t.Fatal(err)
		}
		return d
	}
	t.Run("released", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			root := t.TempDir()
			d := flock(t, root)
			done := make(chan error)
			go func() {
				_, err := agent.WriteFile(root, "/f", strings.NewReader("new"), 0)
				done <- err
			}()
			synctest.Wait() // the writer waits for the lock
			if _, err := os.Lstat(filepath.Join(root, "f")); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("the file was replaced while another process held the lock (%v)", err)
			}
			d.Close()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if b, err := os.ReadFile(filepath.Join(root, "f")); string(b) != "new" {
				t.Errorf("f = %q, %v; want new", b, err)
			}
		})
	})
	t.Run("held", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			root := t.TempDir()
			defer flock(t, root).Close()
			if _, err := agent.WriteFile(root, "/f", strings.NewReader("new"), 0); err != nil {
				t.Fatal(err)
			}
			if b, err := os.ReadFile(filepath.Join(root, "f")); string(b) != "new" {
				t.Errorf("f = %q, %v; want new", b, err)
			}
		})
	})
}
