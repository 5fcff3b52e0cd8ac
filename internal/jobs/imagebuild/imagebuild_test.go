package imagebuild_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/artifact"
	"github.com/berth-dev/berth/internal/build"
	"github.com/berth-dev/berth/internal/image"
	"github.com/berth-dev/berth/internal/jobs"
	"github.com/berth-dev/berth/internal/jobs/imagebuild"
	"github.com/berth-dev/berth/internal/store"
)

// fakeBuilder "builds" by reading the recipe (a store's) or logging the
// request (a repo's), then importing an empty tree.
type fakeBuilder struct {
	mu   sync.Mutex
	reqs []build.Request
	df   string // the recipe's Dockerfile, as fetched
}

func (b *fakeBuilder) Build(ctx context.Context, req build.Request, logf func(string)) (build.Result, error) {
	b.mu.Lock()
	b.reqs = append(b.reqs, req)
	b.mu.Unlock()
	res := build.Result{Ref: req.Ref, Dockerfile: "Dockerfile", Config: build.Config{Cmd: []string{"run"}, Env: []string{"A=1"}, Port: 9000}}
	if req.Recipe != nil {
		df, rc, err := req.Recipe.Fetch(ctx)
		if err != nil {
			return build.Result{}, err
		}
		if rc != nil {
			rc.Close()
		}
		b.df = string(df)
	} else {
		res.Repo, res.Commit = req.Repo, strings.Repeat("ab", 20)
		if req.Auth != nil {
			logf("using token " + req.Auth.Token + " as " + req.Auth.Username)
		}
	}
	return res, req.ImportResult(ctx, "/nonexistent", res)
}

type images struct {
	mu  sync.Mutex
	got map[string]image.Config
}

func (im *images) ImportBuilt(_ context.Context, name, _ string, c image.Config) (image.Image, error) {
	im.mu.Lock()
	defer im.mu.Unlock()
	im.got[name] = c
	return image.Image{Name: name}, nil
}

func (im *images) Exists(name string) bool {
	im.mu.Lock()
	defer im.mu.Unlock()
	_, ok := im.got[name]
	return ok
}

type secrets map[string]string

func (s secrets) ResolveEnv(_ context.Context, _ string, refs []apitype.SecretEnv) (map[string]string, error) {
	return map[string]string{"X": s[refs[0].Secret+"/"+refs[0].Key]}, nil
}

// TestImageBuild: a repo build's image is <id>-<commit12> with the
// build's config, switched to, the token redacted; a store build fetches
// its manifest by ref and is named by its digest; the same source again
// reuses the image; bad starts are refused before any job.
func TestImageBuild(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	st, err := store.Open(filepath.Join(dir, "db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, id := range []string{"web", "rec"} {
		if _, err := st.PutDeployment(ctx, store.Deployment{ID: id, Spec: []byte(`{}`)}, true, 0); err != nil {
			t.Fatal(err)
		}
	}
	arts, _ := artifact.NewStore(filepath.Join(dir, "artifacts"), artifact.StoreOptions{})
	mf, _ := json.Marshal(artifact.DockerfileManifest{Dockerfile: "FROM scratch\n"})
	d := fmt.Sprintf("%x", sha256.Sum256(mf))
	arts.PutBlob(d, bytes.NewReader(mf), "default")
	arts.PutTag("default/recipe", artifact.TagRecord{Digest: d, MediaType: artifact.MediaTypeDockerfile})

	b := &fakeBuilder{}
	ims := &images{got: map[string]image.Config{}}
	var switched []string
	m, err := jobs.New(ctx, jobs.Options{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	const token = "tok-SECRET-123"
	m.Register(apitype.JobImageBuild, imagebuild.Kind(imagebuild.Options{
		Builder: b, Images: ims, Secrets: secrets{"git/token": token},
		Open: func(s, ns, key string) (artifact.Source, error) {
			return artifact.Open(s, ns, key, artifact.OpenOptions{Local: arts})
		},
		SwitchVMImage: func(_ context.Context, id, im, _ string) (bool, error) {
			switched = append(switched, im)
			return true, nil
		},
	}))
	run := func(req jobs.Request) apitype.JobRecord {
		t.Helper()
		rec, err := m.Start(ctx, apitype.JobImageBuild, req)
		if err != nil {
			t.Fatal(err)
		}
		end, err := m.Follow(ctx, rec.ID, true, func(string) error { return nil })
		if err != nil {
			t.Fatal(err)
		}
		return end
	}
	web := jobs.Deployment{ID: "web", Namespace: "default", Kind: apitype.KindVM, Spec: apitype.DeploymentSpec{ID: "web", VM: &apitype.VmSpec{},
		Build: &apitype.BuildSpec{Repo: "https://git.test/web.git", Ref: "main", Auth: &apitype.SecretRef{Secret: "git", Key: "token", Username: "bot"}}}}
	rec := run(jobs.Request{Deployment: web, Body: []byte(`{"ref":"v2"}`)})
	commit := strings.Repeat("ab", 20)
	want := "web-" + commit[:12]
	if rec.Status != apitype.JobSucceeded || rec.Image != want || rec.Commit != commit || rec.Ref != "v2" || rec.Repo != "https://git.test/web.git" || rec.RolledOut == nil || !*rec.RolledOut {
		t.Fatalf("repo build: %+v", rec)
	}
	if r := b.reqs[0]; r.Ref != "v2" || r.Auth == nil || r.Auth.Token != token || r.Auth.Username != "bot" {
		t.Errorf("build request %+v", r)
	}
	if c := ims.got[want]; len(c.Cmd) != 1 || c.Env["A"] != "1" || c.Port != 9000 {
		t.Errorf("image config %+v", c)
	}
	if log := strings.Join(rec.Log, "\n"); strings.Contains(log, token) || !strings.Contains(log, "using token [redacted] as bot") {
		t.Errorf("log %q", rec.Log)
	}
	rec = run(jobs.Request{Deployment: web})
	if rec.Status != apitype.JobSucceeded || !strings.Contains(strings.Join(rec.Log, "\n"), "reusing it") {
		t.Errorf("the same commit again: %+v", rec)
	}

	recd := jobs.Deployment{ID: "rec", Namespace: "default", Kind: apitype.KindVM, Spec: apitype.DeploymentSpec{ID: "rec", VM: &apitype.VmSpec{},
		Build: &apitype.BuildSpec{Store: "local", Ref: "recipe", ImageName: "base"}}}
	rec = run(jobs.Request{Deployment: recd})
	if rec.Status != apitype.JobSucceeded || rec.Image != "base-"+d[:12] || rec.Digest != d || rec.Store != "local" || rec.Commit != "" || b.df != "FROM scratch\n" {
		t.Errorf("store build: %+v (dockerfile %q)", rec, b.df)
	}

	local := web
	local.Spec.Build = &apitype.BuildSpec{Repo: "/srv/git/web"}
	for _, c := range []struct {
		req jobs.Request
		msg string
	}{
		{jobs.Request{Deployment: local}, "only a fleet-wide token"},
		{jobs.Request{Deployment: web, Body: []byte(`{"force":true}`)}, "the body must be {ref?}"},
		{jobs.Request{Deployment: web, Body: []byte(`{"ref":"--upload-pack=x"}`)}, "is not a ref"},
		{jobs.Request{Deployment: jobs.Deployment{ID: "x", Kind: apitype.KindVM, Spec: apitype.DeploymentSpec{VM: &apitype.VmSpec{}}}}, "has no build section"},
	} {
		if _, err := m.Start(ctx, apitype.JobImageBuild, c.req); err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("start %+v: %v, want %q", c.req.Body, err, c.msg)
		}
	}
}
