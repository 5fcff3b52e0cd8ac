package hostupdate_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/jobs"
	"github.com/berth-dev/berth/internal/jobs/hostupdate"
	"github.com/berth-dev/berth/internal/store"
)

type fakeSecrets map[string]string

func (f fakeSecrets) ResolveEnv(ctx context.Context, ns string, refs []apitype.SecretEnv) (map[string]string, error) {
	out := map[string]string{}
	for _, r := range refs {
		v, ok := f[ns+"/"+r.Secret]
		if !ok {
			return nil, errors.New("env_from[0]: no secret " + strconv.Quote(r.Secret))
		}
		out[r.As] = v
	}
	return out, nil
}

func manager(t *testing.T, o hostupdate.Options) *jobs.Manager {
	t.Helper()
	st, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	m, err := jobs.New(context.Background(), jobs.Options{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(); st.Close() })
	m.Register(apitype.JobHostUpdate, hostupdate.Kind(o))
	return m
}

func request(u *apitype.UpdateSpec) jobs.Request {
	return jobs.Request{Fleet: true, Deployment: jobs.Deployment{ID: "web", Namespace: "default", Kind: apitype.KindStatic,
		Spec: apitype.DeploymentSpec{ID: "web", Update: u}}}
}

func run(t *testing.T, m *jobs.Manager, req jobs.Request) apitype.JobRecord {
	t.Helper()
	rec, err := m.Start(context.Background(), apitype.JobHostUpdate, req)
	if err != nil {
		t.Fatal(err)
	}
	rec, err = m.Follow(context.Background(), rec.ID, true, func(string) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

func TestRefusals(t *testing.T) {
	dir := t.TempDir()
	ok := &apitype.UpdateSpec{WorkingDir: dir, Commands: []string{"true"}}
	off := manager(t, hostupdate.Options{})
	if _, err := off.Start(context.Background(), apitype.JobHostUpdate, request(ok)); err == nil || !strings.Contains(err.Error(), "--host-updates") {
		t.Fatalf("off: %v", err)
	}
	m := manager(t, hostupdate.Options{Enabled: true})
	confined := request(ok)
	confined.Fleet = false
	vm := request(ok)
	vm.Deployment.Kind = apitype.KindVM
	body := request(ok)
	body.Body = []byte(`{"ref":"main"}`)
	for name, c := range map[string]struct {
		req    jobs.Request
		status int
		msg    string
	}{
		"confined":    {confined, 403, "fleet-wide admin credential"},
		"vm":          {vm, 400, "static and site"},
		"no section":  {request(nil), 400, `deployment "web" has no update section`},
		"missing dir": {request(&apitype.UpdateSpec{WorkingDir: filepath.Join(dir, "nope"), Commands: []string{"true"}}), 400, "update.working_dir: "},
		"parameters":  {body, 400, "ref: a host update takes no parameters"},
		"no secrets":  {request(&apitype.UpdateSpec{WorkingDir: dir, Commands: []string{"true"}, EnvFrom: []apitype.SecretEnv{{Secret: "x"}}}), 503, "update.env_from"},
	} {
		_, err := m.Start(context.Background(), apitype.JobHostUpdate, c.req)
		var je *jobs.Error
		if !errors.As(err, &je) || je.Status != c.status || !strings.Contains(je.Msg, c.msg) {
			t.Errorf("%s: %v, want %d with %q", name, err, c.status, c.msg)
		}
	}
}

// TestRun: the commands run in order in the working directory with the
// spec's environment and not berth's own variables; a failing command
// stops the run; the secrets are masked.
func TestRun(t *testing.T) {
	t.Setenv("BERTH_SECRET_KEY", "the-key")
	dir := t.TempDir()
	verified := 0
	m := manager(t, hostupdate.Options{Enabled: true, Secrets: fakeSecrets{"default/tok": "p4ss-w0rd"},
		Verify: func(ctx context.Context, d jobs.Deployment) error { verified++; return nil }})
	rec := run(t, m, request(&apitype.UpdateSpec{WorkingDir: dir, Env: map[string]string{"A": "1"},
		EnvFrom:  []apitype.SecretEnv{{Secret: "tok", As: "TOK"}},
		Commands: []string{"pwd", `echo "a=$A key=$BERTH_SECRET_KEY tok=$TOK"`, "echo err >&2; exit 4", "echo never"}}))
	log := strings.Join(rec.Log, "\n")
	if rec.Status != apitype.JobFailed || !strings.Contains(*rec.Error, "command 3 of 4") || !strings.Contains(*rec.Error, "exited with status 4") {
		t.Fatalf("record %+v", rec)
	}
	if !strings.Contains(log, dir) || !strings.Contains(log, "a=1 key= tok=[redacted]") || !strings.Contains(log, "err") || strings.Contains(log, "never") || strings.Contains(log, "p4ss") {
		t.Fatalf("log %q", log)
	}
	if *rec.CommandsTotal != 4 || *rec.CommandsRun != 2 || rec.Verified != nil || verified != 0 || rec.WorkingDir != dir {
		t.Fatalf("outcome %+v", rec)
	}
}

func TestVerifyFails(t *testing.T) {
	m := manager(t, hostupdate.Options{Enabled: true, Verify: func(ctx context.Context, d jobs.Deployment) error { return errors.New("connection refused") }})
	rec := run(t, m, request(&apitype.UpdateSpec{WorkingDir: t.TempDir(), Commands: []string{"true"}, VerifyTimeoutSecs: new(0)}))
	if rec.Status != apitype.JobFailed || rec.Verified == nil || *rec.Verified || *rec.CommandsRun != 1 || !strings.Contains(*rec.Error, "did not pass its health check") ||
		!strings.Contains(strings.Join(rec.Log, "\n"), "connection refused") {
		t.Fatalf("%+v", rec)
	}
}

// TestTimeoutKillsTheGroup: past timeout_secs the command's whole process
// group dies, a background child too.
func TestTimeoutKillsTheGroup(t *testing.T) {
	dir := t.TempDir()
	m := manager(t, hostupdate.Options{Enabled: true})
	rec := run(t, m, request(&apitype.UpdateSpec{WorkingDir: dir, TimeoutSecs: new(1),
		Commands: []string{"sleep 300 & echo $! > child; wait"}}))
	if rec.Status != apitype.JobFailed || !strings.Contains(*rec.Error, "ran past its timeout_secs") {
		t.Fatalf("%+v", rec)
	}
	b, err := os.ReadFile(filepath.Join(dir, "child"))
	if err != nil {
		t.Fatal(err)
	}
	stat, err := os.ReadFile("/proc/" + strings.TrimSpace(string(b)) + "/stat")
	if err == nil {
		// Killed and not yet reaped by whoever adopted it: a zombie.
		if f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:])); len(f) == 0 || f[0] != "Z" {
			t.Fatalf("the background child survived: %s", stat)
		}
	}
}
