package cli

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berth-dev/berth/internal/server"
)

// TestJobsCLI: berth update --follow runs a static deployment's host
// update on a real server and prints its log; get jobs and logs job show
// it afterwards; a failing update exits non-zero.
func TestJobsCLI(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv("BERTH_PASSWORD", "opw")
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer up.Close()
	srv := runServer(t, server.Options{HostUpdates: true}, nil)
	t.Setenv("BERTH_SERVER", srv)
	dir := t.TempDir()
	spec := filepath.Join(dir, "web.json")
	os.WriteFile(spec, fmt.Appendf(nil, `{"id":"web","routes":[{"host":"web.test"}],"upstreams":[%q],
		"update":{"working_dir":%q,"commands":["echo built > stamp","cat stamp"],"verify_timeout_secs":10}}`, strings.TrimPrefix(up.URL, "http://"), dir), 0o600)
	mustRun(t, "", "apply", "-f", spec)

	out := mustRun(t, "", "update", "web", "--follow")
	if !strings.Contains(out, "$ cat stamp\nbuilt\n") || !strings.Contains(out, "is healthy") {
		t.Fatalf("update --follow printed %q", out)
	}
	table := mustRun(t, "", "get", "jobs", "-d", "web")
	lines := strings.Split(strings.TrimSpace(table), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "ID ") || !strings.Contains(lines[1], "host-update") || !strings.Contains(lines[1], "succeeded") {
		t.Fatalf("get jobs:\n%s", table)
	}
	id := strings.Fields(lines[1])[0]
	if got := mustRun(t, "", "logs", "job", id); got != out {
		t.Fatalf("logs job %s printed %q, want %q", id, got, out)
	}
	if got := mustRun(t, "", "get", "job", id, "-o", "name"); got != "job/"+id+"\n" {
		t.Fatalf("get job -o name: %q", got)
	}
	if got := mustRun(t, "", "get", "jobs"); !strings.Contains(got, id) {
		t.Fatalf("get jobs: %q", got)
	}

	os.WriteFile(spec, fmt.Appendf(nil, `{"id":"web","routes":[{"host":"web.test"}],"upstreams":[%q],
		"update":{"working_dir":%q,"commands":["echo one","exit 3","echo never"]}}`, strings.TrimPrefix(up.URL, "http://"), dir), 0o600)
	mustRun(t, "", "apply", "-f", spec)
	code, out, errs := berth(t, "", "update", "web", "-f")
	if code == 0 || strings.Contains(out, "never") || !strings.Contains(errs, "command 2 of 3 (exit 3): exited with status 3") {
		t.Fatalf("failing update: exit %d\nstdout: %s\nstderr: %s", code, out, errs)
	}

	// The pull commands reach their routes: a static deployment has no
	// mounts to pull.
	if code, _, errs := berth(t, "", "mounts", "pull", "web", "--force", "-f"); code == 0 || !strings.Contains(errs, `deployment "web" has no vm.mounts to pull`) {
		t.Fatalf("mounts pull: exit %d, stderr %s", code, errs)
	}
	if code, _, errs := berth(t, "", "build", "web", "--ref", "v2", "-f"); code == 0 || !strings.Contains(errs, `deployment "web" has no build section`) {
		t.Fatalf("build: exit %d, stderr %s", code, errs)
	}
	if code, _, errs := berth(t, "", "mounts", "web"); code == 0 || !strings.Contains(errs, "berth mounts pull ID") {
		t.Fatalf("mounts without pull: exit %d, stderr %s", code, errs)
	}
}
