package mountpull_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/artifact"
	"github.com/berth-dev/berth/internal/jobs"
	"github.com/berth-dev/berth/internal/jobs/mountpull"
	"github.com/berth-dev/berth/internal/store"
)

type noSecrets struct{}

func (noSecrets) ResolveEnv(_ context.Context, ns string, refs []apitype.SecretEnv) (map[string]string, error) {
	return nil, fmt.Errorf("no secret %q in namespace %q", refs[0].Secret, ns)
}

func tarOf(t *testing.T, name, body string) []byte {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg})
	tw.Write([]byte(body))
	tw.Close()
	return b.Bytes()
}

// TestMountPull runs the kind on real stores: both mounts are unpacked
// (one with strip_components), recorded and applied; a second run reuses
// both trees and changes nothing; bad starts are refused with a status.
func TestMountPull(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	st, err := store.Open(filepath.Join(dir, "db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.PutDeployment(ctx, store.Deployment{ID: "app", Spec: []byte(`{"id":"app"}`)}, true, 0); err != nil {
		t.Fatal(err)
	}
	arts, err := artifact.NewStore(filepath.Join(dir, "artifacts"), artifact.StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	trees, err := artifact.OpenTrees(filepath.Join(dir, "trees"))
	if err != nil {
		t.Fatal(err)
	}
	put := func(blob []byte, tag string) string {
		d := fmt.Sprintf("%x", sha256.Sum256(blob))
		if _, _, err := arts.PutBlob(d, bytes.NewReader(blob), "default"); err != nil {
			t.Fatal(err)
		}
		if _, err := arts.PutTag("default/"+tag, artifact.TagRecord{Digest: d}); err != nil {
			t.Fatal(err)
		}
		return d
	}
	da := put(tarOf(t, "top/a.txt", "A"), "a")
	db := put(tarOf(t, "b.txt", "BB"), "b")
	applied := 0
	m, err := jobs.New(ctx, jobs.Options{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	m.Register(apitype.JobMountPull, mountpull.Kind(mountpull.Options{
		Open: func(s, ns, key string) (artifact.Source, error) {
			return artifact.Open(s, ns, key, artifact.OpenOptions{Local: arts})
		},
		Trees:   trees,
		Records: st,
		Secrets: noSecrets{},
		Apply:   func(context.Context, string) error { applied++; return nil },
	}))
	one := 1
	dep := jobs.Deployment{ID: "app", Namespace: "default", Kind: apitype.KindVM, Spec: apitype.DeploymentSpec{ID: "app", VM: &apitype.VmSpec{
		Mounts: []apitype.MountSpec{{Path: "/a", Store: "local", Ref: "a", StripComponents: &one}, {Path: "/b", Store: "local", Ref: "b"}},
	}}}
	run := func(body string) apitype.JobRecord {
		t.Helper()
		rec, err := m.Start(ctx, apitype.JobMountPull, jobs.Request{Deployment: dep, Body: []byte(body)})
		if err != nil {
			t.Fatal(err)
		}
		end, err := m.Follow(ctx, rec.ID, true, func(string) error { return nil })
		if err != nil {
			t.Fatal(err)
		}
		return end
	}
	rec := run(`{}`)
	if rec.Status != apitype.JobSucceeded || len(rec.Mounts) != 2 || applied != 1 {
		t.Fatalf("first pull: %+v (applied %d)", rec, applied)
	}
	a, b := rec.Mounts[0], rec.Mounts[1]
	if a.Digest != da || b.Digest != db || !*a.Changed || *a.Reused || *a.Files != 1 || *b.Unpacked != 2 {
		t.Errorf("outcomes %+v %+v", a, b)
	}
	if got, _ := os.ReadFile(filepath.Join(a.Tree, "a.txt")); string(got) != "A" {
		t.Errorf("stripped tree: %q", got)
	}
	ps, _ := st.MountPulls(ctx, "app")
	if len(ps) != 2 || ps[0].Path != "/a" || ps[0].StripComponents != 1 || ps[0].Tree != a.Tree {
		t.Errorf("recorded %+v", ps)
	}
	rec = run(``)
	if a := rec.Mounts[0]; rec.Status != apitype.JobSucceeded || !*a.Reused || *a.Changed || *a.Bytes != 0 || a.Files != nil {
		t.Errorf("second pull: %+v %+v", rec, a)
	}
	rec = run(`{"force":true}`)
	if a := rec.Mounts[0]; !*a.Reused || *a.Bytes == 0 {
		t.Errorf("forced pull fetched nothing: %+v", a)
	}

	for _, c := range []struct {
		dep    jobs.Deployment
		body   string
		status int
		msg    string
	}{
		{dep, `{"force":1}`, 400, "the body must be {force?}"},
		{dep, `{"ref":"x"}`, 400, `unknown field "ref"`},
		{jobs.Deployment{ID: "s", Kind: apitype.KindStatic}, ``, 400, `deployment "s" has no vm.mounts to pull`},
		{jobs.Deployment{ID: "app", Namespace: "default", Kind: apitype.KindVM, Spec: apitype.DeploymentSpec{VM: &apitype.VmSpec{
			Mounts: []apitype.MountSpec{{Path: "/a", Store: "local", Ref: "a", Auth: &apitype.SecretRef{Secret: "art"}}}}}},
			``, 400, `vm.mounts[0].auth: no secret "art" in namespace "default"`},
	} {
		_, err := m.Start(ctx, apitype.JobMountPull, jobs.Request{Deployment: c.dep, Body: []byte(c.body)})
		var je *jobs.Error
		if !errors.As(err, &je) || je.Status != c.status || !strings.Contains(je.Msg, c.msg) {
			t.Errorf("start %s: %v, want %d %q", c.body, err, c.status, c.msg)
		}
	}
}
