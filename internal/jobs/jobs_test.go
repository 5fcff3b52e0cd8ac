package jobs_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/jobs"
	"github.com/berth-dev/berth/internal/store"
)

func openStore(t *testing.T, dir string) *store.Store {
	t.Helper()
	st, err := store.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func newManager(t *testing.T, st jobs.Store, o jobs.Options) *jobs.Manager {
	t.Helper()
	o.Store = st
	m, err := jobs.New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func dep(id string) jobs.Request {
	return jobs.Request{Deployment: jobs.Deployment{ID: id, Namespace: "default", Kind: apitype.KindStatic}, Fleet: true}
}

// gated is a kind whose job logs "started", waits for release, then
// logs "done" and returns err.
func gated(started chan<- string, release <-chan error) jobs.Kind {
	return func(ctx context.Context, req jobs.Request) (jobs.Run, error) {
		return func(ctx context.Context, j *jobs.Job) error {
			j.Log("started")
			started <- j.ID()
			select {
			case err := <-release:
				j.Log("done")
				return err
			case <-ctx.Done():
				return ctx.Err()
			}
		}, nil
	}
}

// wait follows job id to its end and returns its record.
func wait(t *testing.T, m *jobs.Manager, id string) apitype.JobRecord {
	t.Helper()
	rec, err := m.Follow(context.Background(), id, true, func(string) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

func statusOf(err error) int {
	var je *jobs.Error
	if errors.As(err, &je) {
		return je.Status
	}
	return 0
}

func TestOneJobPerDeploymentAndDurableRecord(t *testing.T) {
	dir := t.TempDir()
	st := openStore(t, dir)
	m := newManager(t, st, jobs.Options{})
	started, release := make(chan string, 1), make(chan error)
	m.Register(apitype.JobHostUpdate, gated(started, release))

	rec, err := m.Start(context.Background(), apitype.JobHostUpdate, dep("web"))
	if err != nil {
		t.Fatal(err)
	}
	if rec.Status != apitype.JobRunning || rec.Deployment != "web" || rec.Kind != apitype.JobHostUpdate || rec.ID == "" {
		t.Fatalf("start record %+v", rec)
	}
	<-started
	_, err = m.Start(context.Background(), apitype.JobHostUpdate, dep("web"))
	if !errors.Is(err, jobs.ErrBusy) || statusOf(err) != http.StatusConflict || !strings.Contains(err.Error(), `deployment "web" is already running`) {
		t.Fatalf("second start: %v", err)
	}
	// Another deployment is not held up.
	m.Register(apitype.JobMountPull, gated(started, make(chan error)))
	if _, err := m.Start(context.Background(), apitype.JobMountPull, dep("api")); err != nil {
		t.Fatal(err)
	}
	<-started
	release <- nil
	got := wait(t, m, rec.ID)
	if got.Status != apitype.JobSucceeded || got.FinishedAt == nil || got.Error != nil || strings.Join(got.Log, "|") != "started|done" {
		t.Fatalf("finished record %+v", got)
	}
	// Finished means committed: a fresh manager on a fresh store handle sees it.
	m.Close()
	st.Close()
	st2 := openStore(t, dir)
	defer st2.Close()
	m2 := newManager(t, st2, jobs.Options{})
	in, err := m2.Get(context.Background(), rec.ID)
	if err != nil || in.Record.Status != apitype.JobSucceeded || len(in.Record.Log) != 2 || in.Namespace != "default" {
		t.Fatalf("after reopen: %+v %v", in, err)
	}
	// The api job was cancelled by Close and says why.
	l, _ := m2.List(context.Background(), "api")
	if len(l) != 1 || l[0].Record.Status != apitype.JobFailed || !strings.Contains(*l[0].Record.Error, "shut down") {
		t.Fatalf("api jobs after Close: %+v", l)
	}
	if _, err := m2.Get(context.Background(), "job-nope"); statusOf(err) != 404 || !strings.Contains(err.Error(), `no job "job-nope"`) {
		t.Fatalf("missing job: %v", err)
	}
}

func TestRunningAtStartIsMarkedFailed(t *testing.T) {
	dir := t.TempDir()
	st := openStore(t, dir)
	defer st.Close()
	// A record left running, as a berth killed mid-job leaves it.
	if err := st.InsertJob(context.Background(), store.Job{ID: "job-1", Deployment: "web", Namespace: "default", Kind: "host-update", Status: "running", StartedAt: 5,
		Record: []byte(`{"id":"job-1","deployment":"web","kind":"host-update","status":"running","started_at":5,"log":["halfway"]}`)}, 20, 2000); err != nil {
		t.Fatal(err)
	}
	m := newManager(t, st, jobs.Options{})
	in, err := m.Get(context.Background(), "job-1")
	if err != nil {
		t.Fatal(err)
	}
	r := in.Record
	if r.Status != apitype.JobFailed || r.FinishedAt == nil || r.Error == nil || !strings.Contains(*r.Error, "berth restarted while the job ran") || r.Log[0] != "halfway" {
		t.Fatalf("%+v", r)
	}
}

func TestUnknownKindAndRefusal(t *testing.T) {
	st := openStore(t, t.TempDir())
	defer st.Close()
	m := newManager(t, st, jobs.Options{})
	defer m.Close()
	if _, err := m.Start(context.Background(), apitype.JobImageBuild, dep("web")); statusOf(err) != 501 || !errors.Is(err, jobs.ErrUnknownKind) {
		t.Fatalf("unregistered kind: %v", err)
	}
	m.Register(apitype.JobImageBuild, func(ctx context.Context, req jobs.Request) (jobs.Run, error) {
		return nil, jobs.Errorf(400, "deployment %q has no build section", req.Deployment.ID)
	})
	if _, err := m.Start(context.Background(), apitype.JobImageBuild, dep("web")); statusOf(err) != 400 {
		t.Fatalf("refused: %v", err)
	}
	// A refusal records nothing and leaves the deployment free.
	if l, _ := m.List(context.Background(), ""); len(l) != 0 {
		t.Fatalf("jobs after a refusal: %+v", l)
	}
	m.Register(apitype.JobImageBuild, func(ctx context.Context, req jobs.Request) (jobs.Run, error) { panic("prepare bug") })
	if _, err := m.Start(context.Background(), apitype.JobImageBuild, dep("web")); statusOf(err) != 500 || !strings.Contains(err.Error(), "prepare bug") {
		t.Fatalf("panicking preparation: %v", err)
	}
	m.Register(apitype.JobImageBuild, func(ctx context.Context, req jobs.Request) (jobs.Run, error) {
		return func(ctx context.Context, j *jobs.Job) error { panic("kind bug") }, nil
	})
	rec, err := m.Start(context.Background(), apitype.JobImageBuild, dep("web"))
	if err != nil {
		t.Fatal(err)
	}
	if r := wait(t, m, rec.ID); r.Status != apitype.JobFailed || !strings.Contains(*r.Error, "kind bug") {
		t.Fatalf("panicking job: %+v", r)
	}
}

// TestSecretsNeverStored: a redacted value never reaches the record, the
// error or the database file.
func TestSecretsNeverStored(t *testing.T) {
	dir := t.TempDir()
	st := openStore(t, dir)
	m := newManager(t, st, jobs.Options{})
	const secret = "hunter2-SECRET-value"
	const pem = "-----BEGIN KEY-----\nMIIEpAIBAAKCAQEAx\n-----END KEY-----"
	m.Register(apitype.JobHostUpdate, func(ctx context.Context, req jobs.Request) (jobs.Run, error) {
		return func(ctx context.Context, j *jobs.Job) error {
			j.Redact(secret, "", pem)
			j.Logf("token is %s, twice: %s", secret, secret)
			j.Log("multi\nline " + secret + "\n")
			j.Log("key: " + pem)       // whole
			j.Log("MIIEpAIBAAKCAQEAx") // a line of it, as a command's output comes

			return fmt.Errorf("failed with %s", secret)
		}, nil
	})
	rec, err := m.Start(context.Background(), apitype.JobHostUpdate, dep("web"))
	if err != nil {
		t.Fatal(err)
	}
	r := wait(t, m, rec.ID)
	all := strings.Join(r.Log, "\n") + *r.Error
	if strings.Contains(all, secret) || strings.Contains(all, "MIIE") || !strings.Contains(all, "[redacted]") || len(r.Log) != 5 {
		t.Fatalf("record: %q", all)
	}
	m.Close()
	st.Close()
	for _, f := range []string{"berth.db", "berth.db-wal"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(secret)) || bytes.Contains(b, []byte("MIIE")) {
			t.Fatalf("%s holds the secret", f)
		}
	}
}

func TestHistoryAndLogBounds(t *testing.T) {
	st := openStore(t, t.TempDir())
	defer st.Close()
	m := newManager(t, st, jobs.Options{PerDeployment: 2, Total: 3, LogLines: 5})
	defer m.Close()
	m.Register(apitype.JobHostUpdate, func(ctx context.Context, req jobs.Request) (jobs.Run, error) {
		return func(ctx context.Context, j *jobs.Job) error {
			for i := range 8 {
				j.Logf("line %d", i)
			}
			return nil
		}, nil
	})
	var ids []string
	for _, d := range []string{"a", "a", "a", "b", "c"} {
		rec, err := m.Start(context.Background(), apitype.JobHostUpdate, dep(d))
		if err != nil {
			t.Fatal(err)
		}
		r := wait(t, m, rec.ID)
		if len(r.Log) != 5 || r.Log[0] != "line 3" {
			t.Fatalf("log %q", r.Log)
		}
		ids = append(ids, rec.ID)
	}
	l, err := m.List(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, in := range l {
		got = append(got, in.Record.ID)
	}
	// Newest first; a's oldest went at its third, then the total bound
	// took a's second.
	want := []string{ids[4], ids[3], ids[2]}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("history %v, want %v", got, want)
	}
}

// TestFollow streams a running job's lines as they are logged, then ends
// with the job.
func TestFollow(t *testing.T) {
	st := openStore(t, t.TempDir())
	defer st.Close()
	m := newManager(t, st, jobs.Options{})
	defer m.Close()
	step := make(chan struct{})
	m.Register(apitype.JobHostUpdate, func(ctx context.Context, req jobs.Request) (jobs.Run, error) {
		return func(ctx context.Context, j *jobs.Job) error {
			for i := range 3 {
				<-step
				j.Logf("line %d", i)
			}
			<-step
			return errors.New("boom")
		}, nil
	})
	rec, err := m.Start(context.Background(), apitype.JobHostUpdate, dep("web"))
	if err != nil {
		t.Fatal(err)
	}
	lines := make(chan string)
	done := make(chan apitype.JobRecord)
	go func() {
		r, _ := m.Follow(context.Background(), rec.ID, true, func(l string) error { lines <- l; return nil })
		done <- r
	}()
	for i := range 3 {
		step <- struct{}{}
		if l := <-lines; l != fmt.Sprintf("line %d", i) {
			t.Fatalf("line %d: %q", i, l)
		}
	}
	step <- struct{}{}
	if r := <-done; r.Status != apitype.JobFailed || *r.Error != "boom" {
		t.Fatalf("%+v", r)
	}
	// Without follow, a finished job's log comes whole.
	var n int
	m.Follow(context.Background(), rec.ID, false, func(string) error { n++; return nil })
	if n != 3 {
		t.Fatalf("%d lines", n)
	}
}

func TestCancelOnDelete(t *testing.T) {
	st := openStore(t, t.TempDir())
	defer st.Close()
	m := newManager(t, st, jobs.Options{})
	defer m.Close()
	started := make(chan string, 1)
	m.Register(apitype.JobHostUpdate, gated(started, make(chan error)))
	rec, err := m.Start(context.Background(), apitype.JobHostUpdate, dep("web"))
	if err != nil {
		t.Fatal(err)
	}
	<-started
	m.Cancel("web")
	r := wait(t, m, rec.ID)
	if r.Status != apitype.JobFailed || !strings.Contains(*r.Error, "deployment was deleted") {
		t.Fatalf("%+v", r)
	}
	// The deployment is free again.
	m.Register(apitype.JobHostUpdate, func(ctx context.Context, req jobs.Request) (jobs.Run, error) {
		return func(ctx context.Context, j *jobs.Job) error { return nil }, nil
	})
	if _, err := m.Start(context.Background(), apitype.JobHostUpdate, dep("web")); err != nil {
		t.Fatal(err)
	}
}

// TestIdle: Idle is closed at once for a deployment with no job, and for
// a busy one only once its job ended, when a start is no longer refused;
// a refused preparation frees the deployment too.
func TestIdle(t *testing.T) {
	st := openStore(t, t.TempDir())
	defer st.Close()
	m := newManager(t, st, jobs.Options{})
	defer m.Close()
	select {
	case <-m.Idle("web"):
	default:
		t.Fatal("Idle of a deployment with no job is not closed")
	}
	started, release := make(chan string, 1), make(chan error)
	m.Register(apitype.JobHostUpdate, gated(started, release))
	rec, err := m.Start(context.Background(), apitype.JobHostUpdate, dep("web"))
	if err != nil {
		t.Fatal(err)
	}
	<-started
	idle, other := m.Idle("web"), m.Idle("api")
	select {
	case <-idle:
		t.Fatal("Idle closed while the job runs")
	default:
	}
	select {
	case <-other:
	default:
		t.Fatal("another deployment's Idle waits for web's job")
	}
	release <- nil
	<-idle
	if got := wait(t, m, rec.ID); got.Status != apitype.JobSucceeded {
		t.Fatalf("job %+v", got)
	}
	// The deployment is free when Idle says so: this start is not ErrBusy.
	m.Register(apitype.JobMountPull, func(context.Context, jobs.Request) (jobs.Run, error) {
		return nil, jobs.Errorf(http.StatusBadRequest, "refused")
	})
	if _, err := m.Start(context.Background(), apitype.JobMountPull, dep("web")); errors.Is(err, jobs.ErrBusy) || statusOf(err) != http.StatusBadRequest {
		t.Fatalf("a start once idle: %v", err)
	}
	select {
	case <-m.Idle("web"):
	default:
		t.Fatal("a refused preparation left the deployment busy")
	}
}
