package cli

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestArtifactLive pushes, tags, lists and fetches through a real server,
// as a namespace's admin, and checks that another namespace's token is
// refused.
func TestArtifactLive(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	srv := liveServer(t)
	op := []string{"--server", srv, "--password", "opw"}
	tokA := strings.TrimSpace(mustRun(t, "", append(op, "token", "mint", "a", "--admin", "admin", "--namespace", "team-a")...))
	tokB := strings.TrimSpace(mustRun(t, "", append(op, "token", "mint", "b", "--admin", "admin", "--namespace", "team-b")...))
	asA := []string{"--server", srv, "--token", tokA}

	dir := t.TempDir()
	file := filepath.Join(dir, "site.tar.gz")
	body := []byte(strings.Repeat("artifact bytes ", 1000))
	os.WriteFile(file, body, 0o600)
	want := fmt.Sprintf("sha256:%x", sha256.Sum256(body))

	// -n defaults to the token's namespace.
	if out := strings.TrimSpace(mustRun(t, "", append(asA, "artifact", "push", file, "--tag", "site/v1")...)); out != want {
		t.Fatalf("push printed %q, want %q", out, want)
	}
	out := mustRun(t, "", append(asA, "artifact", "tags", "-n", "team-a", "--prefix", "site/")...)
	if !strings.Contains(out, "site/v1") || !strings.Contains(out, want) {
		t.Errorf("tags:\n%s", out)
	}
	if out := mustRun(t, "", append(asA, "artifact", "tags", "-o", "json")...); !strings.Contains(out, `"tag": "site/v1"`) && !strings.Contains(out, `"tag":"site/v1"`) {
		t.Errorf("tags -o json:\n%s", out)
	}
	got := filepath.Join(dir, "got.tar.gz")
	mustRun(t, "", append(asA, "artifact", "get", "site/v1", "-o", got)...)
	if b, err := os.ReadFile(got); err != nil || string(b) != string(body) {
		t.Errorf("get -o: %d bytes, %v", len(b), err)
	}
	if out := mustRun(t, "", append(asA, "artifact", "get", want)...); out != string(body) {
		t.Errorf("get by digest to stdout: %d bytes", len(out))
	}
	// The operator reads any namespace's.
	if out := mustRun(t, "", append(op, "artifact", "tags", "-n", "team-a")...); !strings.Contains(out, "site/v1") {
		t.Errorf("operator tags:\n%s", out)
	}

	// team-b: its own namespace has nothing; team-a's is a 403.
	asB := []string{"--server", srv, "--token", tokB}
	if code, _, errs := berth(t, "", append(asB, "artifact", "get", "site/v1", "-n", "team-a")...); code == 0 || !strings.Contains(errs, "cannot reach namespace") {
		t.Errorf("team-b reading team-a's: exit %d, %s", code, errs)
	}
	if code, _, errs := berth(t, "", append(asB, "artifact", "get", want)...); code == 0 || !strings.Contains(errs, "no blob") {
		t.Errorf("team-b fetching team-a's digest: exit %d, %s", code, errs)
	}
	if code, _, errs := berth(t, "", append(asA, "artifact", "get", "nope", "-o", filepath.Join(dir, "nope"))...); code == 0 || !strings.Contains(errs, "no tag") {
		t.Errorf("missing tag: exit %d, %s", code, errs)
	}
	if _, err := os.Stat(filepath.Join(dir, "nope")); err == nil {
		t.Errorf("a failed get left its output file")
	}
	if code, _, _ := berth(t, "", append(asA, "artifact", "push")...); code != 2 {
		t.Errorf("push without FILE: exit %d, want 2 (usage)", code)
	}
}
