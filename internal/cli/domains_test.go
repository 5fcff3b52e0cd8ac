package cli

import (
	"strings"
	"testing"
)

// TestCreateNamespaceDomains: create namespace --domain assigns domains
// (issue 9); a namespace token may then route hosts under them only.
func TestCreateNamespaceDomains(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	srv := liveServer(t)
	t.Setenv("BERTH_PASSWORD", "opw")
	mustRun(t, "", "--server", srv, "create", "namespace", "team-a", "--domain", "a.test", "--domain", "a.example")
	out := mustRun(t, "", "--server", srv, "get", "namespaces", "-o", "json")
	if !strings.Contains(out, `"domains": [`) || !strings.Contains(out, `"a.example"`) {
		t.Errorf("get namespaces: %s", out)
	}
	tok := strings.TrimSpace(mustRun(t, "", "--server", srv, "token", "mint", "a", "--admin", "admin", "--namespace", "team-a"))
	t.Setenv("BERTH_PASSWORD", "")
	mustRun(t, `{"id":"web","routes":[{"host":"www.a.test"}],"upstreams":["127.0.0.1:1"]}`, "--server", srv, "--token", tok, "apply", "-f", "-")
	if code, _, errs := berth(t, `{"id":"web2","routes":[{"host":"www.b.test"}],"upstreams":["127.0.0.1:1"]}`, "--server", srv, "--token", tok, "apply", "-f", "-"); code != 1 || !strings.Contains(errs, "not under a domain") {
		t.Errorf("apply outside the domains: exit %d, %q", code, errs)
	}
	if code, _, errs := berth(t, "", "--server", srv, "create", "secret", "s", "k=v", "--domain", "x.test"); code != 2 || !strings.Contains(errs, "--domain") {
		t.Errorf("--domain on a secret: exit %d, %q", code, errs)
	}
}
