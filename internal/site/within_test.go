package site

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWithin: a root confined to a directory cannot be, or pass through, a
// symbolic link that leads out of it (issue 9: a tenant's site root
// symlinked to /etc or to berth's data directory); links that stay inside
// still work.
func TestWithin(t *testing.T) {
	base := t.TempDir()
	within := filepath.Join(base, "sites", "team-a")
	outside := filepath.Join(base, "data")
	for _, d := range []string{filepath.Join(within, "ok"), outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(within, "ok", "index.html"), []byte(indexHTML), 0o644)
	os.WriteFile(filepath.Join(within, "index.html"), []byte(indexHTML), 0o644)
	os.WriteFile(filepath.Join(outside, "index.html"), []byte(secret), 0o644)
	os.WriteFile(filepath.Join(outside, "secret.key"), []byte(secret), 0o644)
	links := map[string]string{
		"etc":      "/etc",           // absolute, out
		"data":     "../../data",     // relative, out
		"up":       "..",             // the sites directory itself: out of team-a
		"inside":   "ok",             // stays inside
		"via/deep": "../../../data/", // a component of the root
	}
	os.MkdirAll(filepath.Join(within, "via"), 0o755)
	for name, to := range links {
		if err := os.Symlink(to, filepath.Join(within, name)); err != nil {
			t.Fatal(err)
		}
	}

	for _, tt := range []struct {
		root string
		ok   bool
	}{
		{"ok", true},
		{"inside", true},
		{".", true},
		{"etc", false},
		{"data", false},
		{"up", false},
		{"via/deep", false},
		{"../../data", false},
	} {
		c := Config{Root: filepath.Join(within, tt.root), Within: within, Index: "index.html"}
		st := c.Inspect()
		for _, p := range []string{"/", "/index.html", "/secret.key", "/passwd", "/shadow"} {
			rec := do(t, New(c), "GET", p)
			if strings.Contains(rec.Body.String(), secret) || strings.Contains(rec.Body.String(), "root:") {
				t.Errorf("root %s: GET %s served a file from outside: %d %q", tt.root, p, rec.Code, rec.Body)
			}
			if !tt.ok && (rec.Code != 404 || rec.Header().Get(HeaderSite) != "root-unreadable") {
				t.Errorf("root %s: GET %s = %d %s=%q, want 404 root-unreadable", tt.root, p, rec.Code, HeaderSite, rec.Header().Get(HeaderSite))
			}
		}
		if tt.ok {
			if st.Status != StatusOK {
				t.Errorf("root %s: status %+v, want ok", tt.root, st)
			}
			if rec := do(t, New(c), "GET", "/"); rec.Code != 200 || rec.Body.String() != indexHTML {
				t.Errorf("root %s: GET / = %d %q", tt.root, rec.Code, rec.Body)
			}
		} else if st.Status != StatusUnreadable {
			t.Errorf("root %s: status %+v, want unreadable", tt.root, st)
		}
	}
	// Without Within the same link is followed: the confinement is what
	// refuses it.
	if rec := do(t, New(Config{Root: filepath.Join(within, "data")}), "GET", "/secret.key"); rec.Code != 200 {
		t.Errorf("unconfined control: %d, want 200", rec.Code)
	}
	// A missing root under Within is missing, not unreadable.
	if st := (Config{Root: filepath.Join(within, "nope"), Within: within}).Inspect(); st.Status != StatusMissing {
		t.Errorf("missing root: %+v", st)
	}
}
