package cli

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestApplyDryRunLive: apply --dry-run has the server check a spec as a
// real apply would and store nothing (issue 10 §4).
func TestApplyDryRunLive(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	srv := liveServer(t)
	op := []string{"--server", srv, "--password", "opw"}
	spec := `{"id":"web","routes":[{"host":"web.test"}],"upstreams":["127.0.0.1:1"]}`

	out := mustRun(t, spec, append(op, "apply", "-f", "-", "--dry-run")...)
	if out != "deployment/web checked (server dry run; nothing stored)\n" {
		t.Errorf("dry run: %q", out)
	}
	if out := mustRun(t, "", append(op, "get", "deployments", "-o", "name")...); out != "" {
		t.Fatalf("a dry run stored: %q", out)
	}
	if out := mustRun(t, spec, append(op, "apply", "-f", "-", "--dry-run", "-o", "json")...); !strings.Contains(out, `"id": "web"`) {
		t.Errorf("dry run -o json: %s", out)
	}
	// What a real apply refuses, a dry run refuses, naming the field.
	code, _, errs := berth(t, `{"id":"web","routes":[{"host":"web.test"}],"upstreams":["127.0.0.1:1"],"scaling":{"min_replica":1}}`, append(op, "apply", "-f", "-", "--dry-run")...)
	if code != 1 || !strings.Contains(errs, "scaling.min_replica") {
		t.Errorf("dry run of a bad spec: exit %d, %q", code, errs)
	}
	// Ownership: a namespace token may not route outside its domains.
	mustRun(t, "", append(op, "create", "namespace", "team-a", "--domain", "a.test")...)
	tok := strings.TrimSpace(mustRun(t, "", append(op, "token", "mint", "a", "--admin", "admin", "--namespace", "team-a")...))
	code, _, errs = berth(t, `{"id":"w2","routes":[{"host":"www.b.test"}],"upstreams":["127.0.0.1:1"]}`, "--server", srv, "--token", tok, "apply", "-f", "-", "--dry-run")
	if code != 1 || !strings.Contains(errs, "not under a domain") {
		t.Errorf("dry run outside the namespace's domains: exit %d, %q", code, errs)
	}
	// The real apply then stores it; a dry run of a change leaves it as is.
	mustRun(t, spec, append(op, "apply", "-f", "-")...)
	mustRun(t, strings.Replace(spec, "127.0.0.1:1", "127.0.0.1:2", 1), append(op, "apply", "-f", "-", "--dry-run")...)
	if out := mustRun(t, "", append(op, "get", "deploy", "web", "-o", "json")...); !strings.Contains(out, "127.0.0.1:1") || strings.Contains(out, "127.0.0.1:2") {
		t.Errorf("a dry run changed the deployment: %s", out)
	}
	// The parameter is strictly true or false.
	req, _ := http.NewRequest("POST", srv+"/deployments?dry_run=yes", strings.NewReader(spec))
	req.SetBasicAuth("admin", "opw")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Errorf("dry_run=yes: %d, want 400", resp.StatusCode)
	}
}

// TestApplyDryRunOldServer: a server that does not advertise dry runs is
// sent no spec at all, since it would store it.
func TestApplyDryRunOldServer(t *testing.T) {
	srv := newFakeServer(t)
	r := run(t, srv, `{"id":"web","routes":[{"path_prefix":"/"}],"upstreams":["127.0.0.1:1"]}`, "apply", "-f", "-", "--dry-run")
	if r.code != 1 || !strings.Contains(r.stderr, "cannot do a dry run") {
		t.Errorf("exit %d, stderr %q", r.code, r.stderr)
	}
	for _, q := range srv.requests() {
		if q.Method == "POST" {
			t.Errorf("sent %s %s to a server without dry runs", q.Method, q.URI)
		}
	}
}

// TestApplyWaitLive: apply --wait returns once the replicas are ready,
// with progress lines; for a deployment that cannot start it fails at
// --timeout with the last create error from /metrics.
func TestApplyWaitLive(t *testing.T) {
	srv := vmLiveServer(t)
	op := func(args ...string) []string {
		return append([]string{"--server", srv, "--user", "admin", "--password", "opw"}, args...)
	}
	app := fmt.Sprintf("exec env %s=app %q -test.run=^$", agentRole, os.Args[0])
	write := func(spec string) string {
		file := filepath.Join(t.TempDir(), "spec.json")
		if err := os.WriteFile(file, []byte(spec), 0o600); err != nil {
			t.Fatal(err)
		}
		return file
	}
	good := write(fmt.Sprintf(`{"id":"web","routes":[{"host":"web.test"}],"vm":{"driver":"process","port":8080,"start_command":%q},"scaling":{"min_replicas":1,"max_replicas":1}}`, app))
	code, out, errs := berth(t, "", op("apply", "-f", good, "--wait", "--timeout", "2m")...)
	if code != 0 || out != "deployment/web applied\n" || !strings.Contains(errs, "deployment/web: 1/1 ready, 0 pending\n") {
		t.Fatalf("apply --wait: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if st := mustRun(t, "", op("get", "deploy", "web")...); !strings.Contains(st, "web") {
		t.Errorf("get: %q", st)
	}

	// Scales from zero: stored is ready.
	zero := write(`{"id":"idle","routes":[{"host":"idle.test"}],"vm":{"driver":"process","port":8080,"start_command":"true"}}`)
	if code, _, errs := berth(t, "", op("apply", "-f", zero, "--wait")...); code != 0 || !strings.Contains(errs, "scales from zero") {
		t.Errorf("apply --wait, min 0: exit %d, %q", code, errs)
	}

	// Never starts: its secret does not exist.
	bad := write(fmt.Sprintf(`{"id":"broken","routes":[{"host":"broken.test"}],"vm":{"driver":"process","port":8080,"start_command":%q,"env_from":[{"secret":"missing-secret","key":"k","as":"K"}]},"scaling":{"min_replicas":1,"max_replicas":1}}`, app))
	code, _, errs = berth(t, "", op("apply", "-f", bad, "--wait", "--timeout", "4s")...)
	if code != 1 || !strings.Contains(errs, "deployment/broken is not ready after 4s") || !strings.Contains(errs, "last create error:") || !strings.Contains(errs, "missing-secret") {
		t.Errorf("apply --wait of a deployment that cannot start: exit %d, stderr %q", code, errs)
	}
	if code, _, errs := berth(t, "", op("apply", "-f", bad, "--wait", "--dry-run")...); code != 2 {
		t.Errorf("--wait with --dry-run: exit %d, %q", code, errs)
	}
}
