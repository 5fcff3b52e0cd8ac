package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestConfigContexts: config get-contexts lists the contexts login saved
// (never their tokens) and use-context switches which server and token
// later commands use, keeping the file 0600 (issue 10 §4).
func TestConfigContexts(t *testing.T) {
	cfgDir := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", cfgDir)
	t.Setenv("BERTH_TOKEN", "")
	srvA, srvB := liveServer(t), liveServer(t)
	toks := map[string]string{}
	for name, srv := range map[string]string{"a": srvA, "b": srvB} {
		toks[name] = strings.TrimSpace(mustRun(t, "", "--server", srv, "--password", "opw", "token", "mint", "ops-"+name, "--admin", "view", "--all-deployments"))
	}
	mustRun(t, toks["a"]+"\n", "login", "--server", srvA, "--token-stdin", "--name", "a")
	mustRun(t, toks["b"]+"\n", "login", "--server", srvB, "--token-stdin", "--name", "b")

	out := mustRun(t, "", "config", "get-contexts")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[1], " ") || !strings.Contains(lines[1], srvA) || !strings.HasPrefix(lines[2], "*") || !strings.Contains(lines[2], srvB) {
		t.Errorf("get-contexts:\n%s", out)
	}
	js := mustRun(t, "", "config", "get-contexts", "-o", "json")
	for _, tok := range toks {
		if strings.Contains(out, tok) || strings.Contains(js, tok) {
			t.Fatalf("get-contexts printed a token:\n%s\n%s", out, js)
		}
	}
	if !strings.Contains(js, `"current": true`) || !strings.Contains(js, `"has_token": true`) {
		t.Errorf("get-contexts -o json: %s", js)
	}
	if got := mustRun(t, "", "config", "get-contexts", "-o", "name"); got != "context/a\ncontext/b\n" {
		t.Errorf("get-contexts -o name = %q", got)
	}
	if got := mustRun(t, "", "whoami"); !strings.Contains(got, srvB) || !strings.Contains(got, "ops-b") {
		t.Errorf("whoami in context b: %q", got)
	}

	if got := mustRun(t, "", "config", "use-context", "a"); got != "Switched to context \"a\".\n" {
		t.Errorf("use-context: %q", got)
	}
	if got := mustRun(t, "", "config", "current-context"); got != "a\n" {
		t.Errorf("current-context = %q", got)
	}
	if got := mustRun(t, "", "whoami"); !strings.Contains(got, srvA) || !strings.Contains(got, "ops-a") {
		t.Errorf("whoami after use-context a: %q", got)
	}
	fi, err := os.Stat(filepath.Join(cfgDir, "berth", "config.json"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("config file after use-context: %v, %v; want mode 0600", fi.Mode(), err)
	}
	if code, _, errs := berth(t, "", "config", "use-context", "nope"); code != 1 || !strings.Contains(errs, `no login context "nope"`) {
		t.Errorf("use-context nope: exit %d, %q", code, errs)
	}
	if code, _, errs := berth(t, "", "config", "set-context", "x"); code != 2 || !strings.Contains(errs, "unknown subcommand") {
		t.Errorf("config set-context: exit %d, %q", code, errs)
	}
}
