package cli

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/server"
)

// TestTelemetryCLI: a host update's output reaches the telemetry store,
// and `berth logs --since --grep` reads it back (oldest first, the level
// filter applied); `berth top` lists the namespace's deployment; bad
// flags are usage errors.
func TestTelemetryCLI(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv("BERTH_PASSWORD", "opw")
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer up.Close()
	srv := runServer(t, server.Options{HostUpdates: true}, nil)
	t.Setenv("BERTH_SERVER", srv)
	dir := t.TempDir()
	spec := filepath.Join(dir, "web.json")
	os.WriteFile(spec, fmt.Appendf(nil, `{"id":"web","routes":[{"host":"web.test"}],"upstreams":[%q],
		"update":{"working_dir":%q,"commands":["echo first-marker","echo second-marker"],"verify_timeout_secs":10}}`, strings.TrimPrefix(up.URL, "http://"), dir), 0o600)
	mustRun(t, "", "apply", "-f", spec)
	mustRun(t, "", "update", "web", "--follow")

	// The writer commits within its flush interval; wait for it (the test's
	// own timeout bounds the wait).
	var out string
	for !strings.Contains(out, "second-marker") {
		time.Sleep(20 * time.Millisecond)
		out = mustRun(t, "", "logs", "web", "--since", "1h", "--grep", "MARKER")
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || !strings.HasSuffix(lines[0], " - job $ echo first-marker") || !strings.HasSuffix(lines[1], " - job first-marker") ||
		!strings.HasSuffix(lines[3], " - job second-marker") {
		t.Errorf("logs --grep printed %q, want the job's four marker lines oldest first", out)
	}
	if out := mustRun(t, "", "logs", "web", "--since", "7d", "--level", "error"); strings.Contains(out, "marker") {
		t.Errorf("--level error printed %q", out)
	}
	if out := mustRun(t, "", "logs", "web", "-n", "default", "--grep", "first-marker", "--limit", "1"); !strings.Contains(out, "first-marker") {
		t.Errorf("-n default: %q", out)
	}
	top := mustRun(t, "", "top")
	if rows := strings.Split(strings.TrimSpace(top), "\n"); len(rows) != 2 || !strings.HasPrefix(rows[0], "DEPLOYMENT ") || !strings.HasPrefix(rows[1], "web ") {
		t.Errorf("top printed %q", top)
	}
	for _, bad := range [][]string{
		{"logs", "web", "--since", "soon"},
		{"logs", "web", "--grep", "x", "-f"},
		{"top", "extra"},
	} {
		if code, _, errs := berth(t, "", bad...); code != 2 || errs == "" {
			t.Errorf("%v: exit %d, stderr %q; want a usage error", bad, code, errs)
		}
	}
	if code, _, errs := berth(t, "", "top", "--window", "2h"); code != 1 || !strings.Contains(errs, "window") {
		t.Errorf("top --window 2h: exit %d, stderr %q", code, errs)
	}
}
