package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/server"
	"github.com/berth-dev/berth/internal/server/servertest"
)

// TestMain keeps every test away from the user's own login contexts and
// credentials.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "berth-cli-test")
	if err != nil {
		panic(err)
	}
	os.Setenv("XDG_CONFIG_HOME", dir)
	os.Setenv("HOME", dir)
	for _, v := range []string{"BERTH_CONFIG", "BERTH_TOKEN", "BERTH_USER", "BERTH_PASSWORD", "BERTH_CONTEXT", "BERTH_SERVER"} {
		os.Unsetenv(v)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// liveServer is a real, gated berth on loopback.
func liveServer(t *testing.T) string {
	t.Helper()
	return runServer(t, server.Options{}, nil)
}

// runServer starts a real berth with opts and the operator password opw
// (see servertest.Start).
func runServer(t *testing.T, opts server.Options, before func(url string)) string {
	t.Helper()
	opts.AdminPassword = "opw"
	return servertest.Start(t, opts, before)
}

// berth runs one CLI command with stdin and returns its exit code and
// output.
func berth(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Run(context.Background(), args, strings.NewReader(stdin), &out, &errb)
	return code, out.String(), errb.String()
}

func mustRun(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	code, out, errs := berth(t, stdin, args...)
	if code != 0 {
		t.Fatalf("berth %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, out, errs)
	}
	return out
}

// TestLoginTokenSecretFlow walks the README's lock-down story against a
// real server: the operator mints a namespace token, a team member logs in
// with it, and works behind the namespace wall.
func TestLoginTokenSecretFlow(t *testing.T) {
	cfgDir := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", cfgDir)
	srv := liveServer(t)
	t.Setenv("BERTH_PASSWORD", "opw") // the operator, for now

	// No credential: refused.
	if code, _, errs := berth(t, "", "--server", srv, "--password", "", "whoami"); code != 1 || !strings.Contains(errs, "authentication required") {
		t.Fatalf("whoami without a credential: exit %d, %q", code, errs)
	}
	out := mustRun(t, "", "--server", srv, "whoami")
	if !strings.Contains(out, "operator") {
		t.Errorf("operator whoami: %q", out)
	}
	mustRun(t, `{"id":"web","namespace":"team-a","routes":[{"host":"web.test"}],"upstreams":["127.0.0.1:1"]}`, "--server", srv, "apply", "-f", "-")
	tok := strings.TrimSpace(mustRun(t, "", "--server", srv, "token", "mint", "team-a-admin", "--admin", "admin", "--namespace", "team-a", "--expires-in", "30d"))
	if !strings.HasPrefix(tok, "berth_") || strings.Contains(tok, "\n") {
		t.Fatalf("mint printed %q, want the token alone", tok)
	}
	if code, _, errs := berth(t, "", "--server", srv, "token", "mint", "x", "--admin", "view"); code != 2 || !strings.Contains(errs, "-d DEP") {
		t.Errorf("mint without deployments: exit %d, %q", code, errs)
	}

	// The team member logs in with the token.
	t.Setenv("BERTH_PASSWORD", "")
	out = mustRun(t, tok+"\n", "login", "--server", srv, "--token-stdin", "--name", "team-a")
	if !strings.Contains(out, `token "team-a-admin"`) || !strings.Contains(out, "namespace team-a") {
		t.Errorf("login said %q", out)
	}
	cfgPath := filepath.Join(cfgDir, "berth", "config.json")
	fi, err := os.Stat(cfgPath)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("config file mode %v, %v; want 0600", fi.Mode(), err)
	}
	var cfg config
	b, _ := os.ReadFile(cfgPath)
	if err := json.Unmarshal(b, &cfg); err != nil || cfg.Current != "team-a" || len(cfg.Contexts) != 1 || cfg.Contexts[0].Token != tok || cfg.Contexts[0].Server != srv {
		t.Fatalf("config %s: %+v, %v", b, cfg, err)
	}
	// From now on no --server or credential: the context supplies both.
	out = mustRun(t, "", "whoami")
	if !strings.Contains(out, "team-a-admin") || !strings.Contains(out, "every deployment in namespace team-a") {
		t.Errorf("whoami with the context: %q", out)
	}
	out = mustRun(t, "s3cr3t-value\n", "create", "secret", "db", "--from-stdin", "password")
	if !strings.Contains(out, "namespace team-a") {
		t.Errorf("create secret: %q", out)
	}
	t.Setenv("API_TOKEN_FOR_TEST", "from-env")
	mustRun(t, "", "create", "secret", "api", "--from-env", "token=API_TOKEN_FOR_TEST", "plain=v")
	out = mustRun(t, "", "get", "secrets")
	if !strings.Contains(out, "db") || !strings.Contains(out, "password") || strings.Contains(out, "s3cr3t") || !strings.Contains(out, "plain,token") {
		t.Errorf("get secrets: %q", out)
	}
	if code, _, errs := berth(t, "", "get", "secrets", "-n", "default"); code != 1 || !strings.Contains(errs, "cannot reach") {
		t.Errorf("secrets of another namespace: exit %d, %q", code, errs)
	}
	out = mustRun(t, "", "get", "namespaces")
	if !strings.Contains(out, "team-a") || strings.Contains(out, "default") {
		t.Errorf("get namespaces: %q", out)
	}
	// A token for CI, minted by the namespace admin.
	ci := strings.TrimSpace(mustRun(t, "", "token", "mint", "ci", "--admin", "view", "--namespace", "team-a"))
	out = mustRun(t, "", "token", "list")
	if !strings.Contains(out, "ci") || !strings.Contains(out, "team-a-admin") {
		t.Errorf("token list: %q", out)
	}
	// Who minted it comes from berth's own provenance route.
	if out = mustRun(t, "", "token", "list", "-o", "wide"); !strings.Contains(out, "MINTED-BY") || !strings.Contains(out, "token:") {
		t.Errorf("token list -o wide: %q", out)
	}
	var who struct {
		Token struct{ ID string } `json:"token"`
	}
	if err := json.Unmarshal([]byte(mustRun(t, "", "--token", ci, "whoami", "-o", "json")), &who); err != nil || who.Token.ID == "" {
		t.Fatalf("whoami -o json with --token: %v", err)
	}
	mustRun(t, "", "token", "revoke", who.Token.ID)
	if code, _, _ := berth(t, "", "--token", ci, "whoami"); code != 1 {
		t.Error("a revoked token still works")
	}
	mustRun(t, "", "delete", "secret", "db")
	if code, _, errs := berth(t, "", "delete", "secret", "db"); code != 1 || !strings.Contains(errs, `no secret "db"`) {
		t.Errorf("second delete: exit %d, %q", code, errs)
	}
	// The context's token is never sent to another server.
	other := liveServer(t)
	if code, _, errs := berth(t, "", "--server", other, "whoami"); code != 1 || !strings.Contains(errs, "authentication required") {
		t.Errorf("whoami on another server: exit %d, %q", code, errs)
	}
	mustRun(t, "", "logout")
	if code, _, errs := berth(t, "", "--server", srv, "whoami"); code != 1 || !strings.Contains(errs, "authentication required") {
		t.Errorf("whoami after logout: exit %d, %q", code, errs)
	}
	b, _ = os.ReadFile(cfgPath)
	if strings.Contains(string(b), tok) {
		t.Error("logout left the token in the config file")
	}
}

func TestLoginRefusals(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	srv := liveServer(t)
	for _, tt := range []struct {
		stdin, want string
	}{
		{"", "no token given"},
		{"applb_0123456789ab_" + strings.Repeat("A", 43), "not a berth app-token"},
		{"berth_0123456789ab_" + strings.Repeat("A", 43), "refused this token"},
	} {
		code, _, errs := berth(t, tt.stdin, "login", "--server", srv, "--token-stdin")
		if code == 0 || !strings.Contains(errs, tt.want) {
			t.Errorf("login with %q: exit %d, %q; want %q", tt.stdin, code, errs, tt.want)
		}
	}
}

func TestParseLifetime(t *testing.T) {
	for in, want := range map[string]time.Duration{"90d": 90 * 24 * time.Hour, "1d12h": 36 * time.Hour, "45m": 45 * time.Minute} {
		if got, err := parseLifetime(in); err != nil || got != want {
			t.Errorf("parseLifetime(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "d", "-1h", "x3d", "0s"} {
		if _, err := parseLifetime(bad); err == nil {
			t.Errorf("parseLifetime(%q) accepted", bad)
		}
	}
}
