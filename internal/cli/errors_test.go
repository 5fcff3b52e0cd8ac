package cli

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestErrorHints: the errors a new user meets first say what to do, in
// the CLI's own terms (issue 10 §4): a refused connection names the
// address and how to change it, a 401 how to log in, and the server's
// "pass force=true" becomes --force.
func TestErrorHints(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv("BERTH_PASSWORD", "")
	t.Setenv("BERTH_TOKEN", "")

	dead := httptest.NewServer(http.NotFoundHandler())
	addr := dead.URL
	dead.Close()
	code, _, errs := berth(t, "", "--server", addr, "get", "deployments")
	want := "error: no berth server answers at " + addr + " — is 'berth serve' running? (set --server or BERTH_SERVER)\n"
	if code != 1 || errs != want {
		t.Errorf("refused: exit %d, stderr %q; want 1, %q", code, errs, want)
	}

	srv := liveServer(t)
	code, _, errs = berth(t, "", "--server", srv, "get", "deployments")
	if code != 1 || !strings.Contains(errs, "authentication required") || !strings.Contains(errs, "berth login --server "+srv+" --token-stdin") {
		t.Errorf("401: exit %d, stderr %q; want how to log in", code, errs)
	}

	op := []string{"--server", srv, "--password", "opw"}
	mustRun(t, "", append(op, "create", "secret", "db", "k=v")...)
	mustRun(t, `{"id":"web","routes":[{"host":"web.test"}],"vm":{"driver":"process","port":8080,"env_from":[{"secret":"db","key":"k","as":"K"}]}}`,
		append(op, "apply", "-f", "-")...)
	code, _, errs = berth(t, "", append(op, "delete", "secret", "db")...)
	if code != 1 || !strings.Contains(errs, "add --force to delete it anyway") || strings.Contains(errs, "force=true") {
		t.Errorf("referenced secret: exit %d, stderr %q; want the --force hint, not force=true", code, errs)
	}
	mustRun(t, "", append(op, "delete", "secret", "db", "--force")...)
}

func TestFlagHints(t *testing.T) {
	for in, want := range map[string]string{
		`secret "db" is referenced by deployment web; pass force=true to delete it anyway`:                       `secret "db" is referenced by deployment web; add --force to delete it anyway`,
		`upstream "a" is the last healthy accepting upstream of "x"; pass force to drain it anyway`:              `upstream "a" is the last healthy accepting upstream of "x"; add --force to drain it anyway`,
		`no capacity to run Computer "c" now (limit 2); retry in 3 seconds, or start it with wait=true to queue`: `no capacity to run Computer "c" now (limit 2); retry in 3 seconds, or start it with --wait to queue`,
		`deployment "web" has no running VM (pass wake=true to start one)`:                                       `deployment "web" has no running VM (leave out --no-wake to start one)`,
	} {
		if got := flagHints(in); got != want {
			t.Errorf("flagHints(%q) = %q, want %q", in, got, want)
		}
	}
}
