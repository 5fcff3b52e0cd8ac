package cli

import (
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// TestOutputName: -o name prints KIND/NAME lines for every resource a
// command prints (issue 10 §4), and is refused up front where the output
// names nothing, so that no token is minted and thrown away.
func TestOutputName(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	srv := liveServer(t)
	op := []string{"--server", srv, "--password", "opw"}
	run := func(stdin string, args ...string) string {
		t.Helper()
		return mustRun(t, stdin, append(op, args...)...)
	}

	specs := `[{"id":"a","routes":[{"host":"a.test"}],"upstreams":["127.0.0.1:1"]},{"id":"b","routes":[{"host":"b.test"}],"upstreams":["127.0.0.1:2"]}]`
	if got := run(specs, "apply", "-f", "-", "-o", "name"); got != "deployment/a\ndeployment/b\n" {
		t.Errorf("apply -o name = %q", got)
	}
	if got := run("", "get", "deployments", "-o", "name"); got != "deployment/a\ndeployment/b\n" {
		t.Errorf("get deployments -o name = %q", got)
	}
	if got := run("", "get", "deploy", "b", "-o", "name"); got != "deployment/b\n" {
		t.Errorf("get deploy b -o name = %q", got)
	}
	run("", "create", "secret", "db", "k=v")
	if got := run("", "get", "secrets", "-o", "name"); got != "secret/db\n" {
		t.Errorf("get secrets -o name = %q", got)
	}
	if got := run("", "get", "namespaces", "-o", "name"); got != "namespace/default\n" {
		t.Errorf("get namespaces -o name = %q", got)
	}
	if got := run("", "token", "list", "-o", "name"); got != "" {
		t.Errorf("token list -o name with no tokens = %q", got)
	}

	for _, args := range [][]string{{"token", "mint", "x", "--admin", "view", "--all-deployments"}, {"status"}, {"whoami"}, {"version"}} {
		code, out, errs := berth(t, "", append(append(op, args...), "-o", "name")...)
		if code != 2 || out != "" || !strings.Contains(errs, "-o name is for resources") {
			t.Errorf("%v -o name: exit %d, stdout %q, stderr %q; want a usage error", args, code, out, errs)
		}
	}
	if got := run("", "token", "list", "-o", "json"); strings.TrimSpace(got) != "[]" {
		t.Errorf("token mint -o name minted a token: %s", got)
	}

	// -o yaml wherever -o json works: the same documents.
	var docs []map[string]any
	if err := yaml.Unmarshal([]byte(run("", "get", "deployments", "-o", "yaml")), &docs); err != nil || len(docs) != 2 {
		t.Errorf("get deployments -o yaml: %v, %d docs", err, len(docs))
	}
	if got := run("", "token", "list", "-o", "yaml"); got != "[]\n" {
		t.Errorf("token list -o yaml = %q, want []", got)
	}
}
