package artifactpull_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/artifact"
	"github.com/berth-dev/berth/internal/image"
	"github.com/berth-dev/berth/internal/jobs"
	"github.com/berth-dev/berth/internal/jobs/artifactpull"
	"github.com/berth-dev/berth/internal/store"
)

// images is an image store in memory.
type images struct {
	mu  sync.Mutex
	got map[string][]byte
}

func (im *images) ImportTar(_ context.Context, name string, r io.Reader, _ string) (image.Image, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return image.Image{}, err
	}
	im.mu.Lock()
	defer im.mu.Unlock()
	im.got[name] = b
	return image.Image{Name: name}, nil
}

func (im *images) Exists(name string) bool {
	im.mu.Lock()
	defer im.mu.Unlock()
	_, ok := im.got[name]
	return ok
}

// TestArtifactPull runs the kind on real stores: a vm's rootfs is
// imported as <image_name>-<digest12> and switched to, then reused; a
// site's bundle is unpacked and switched to; bad starts are refused.
func TestArtifactPull(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	st, err := store.Open(filepath.Join(dir, "db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, id := range []string{"vm", "site"} {
		if _, err := st.PutDeployment(ctx, store.Deployment{ID: id, Spec: []byte(`{}`)}, true, 0); err != nil {
			t.Fatal(err)
		}
	}
	arts, _ := artifact.NewStore(filepath.Join(dir, "artifacts"), artifact.StoreOptions{})
	trees, _ := artifact.OpenTrees(filepath.Join(dir, "trees"))
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	tw.WriteHeader(&tar.Header{Name: "dist/index.html", Mode: 0o644, Size: 2, Typeflag: tar.TypeReg})
	tw.Write([]byte("hi"))
	tw.Close()
	blob := b.Bytes()
	d := fmt.Sprintf("%x", sha256.Sum256(blob))
	arts.PutBlob(d, bytes.NewReader(blob), "default")
	arts.PutTag("default/rel", artifact.TagRecord{Digest: d})
	ims := &images{got: map[string][]byte{}}
	var switched []string
	sites := 0
	m, err := jobs.New(ctx, jobs.Options{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	m.Register(apitype.JobArtifactPull, artifactpull.Kind(artifactpull.Options{
		Open: func(s, ns, key string) (artifact.Source, error) {
			return artifact.Open(s, ns, key, artifact.OpenOptions{Local: arts})
		},
		Trees: trees, Images: ims, Records: st, TempDir: dir,
		SwitchVMImage: func(_ context.Context, id, im, _ string) (bool, error) {
			switched = append(switched, im)
			return len(switched) == 1, nil
		},
		SwitchSite: func(context.Context, string) error { sites++; return nil },
	}))
	run := func(dep jobs.Deployment, body string) apitype.JobRecord {
		t.Helper()
		rec, err := m.Start(ctx, apitype.JobArtifactPull, jobs.Request{Deployment: dep, Body: []byte(body)})
		if err != nil {
			t.Fatal(err)
		}
		end, err := m.Follow(ctx, rec.ID, true, func(string) error { return nil })
		if err != nil {
			t.Fatal(err)
		}
		return end
	}
	vm := jobs.Deployment{ID: "vm", Namespace: "default", Kind: apitype.KindVM, Spec: apitype.DeploymentSpec{ID: "vm", VM: &apitype.VmSpec{},
		Artifact: &apitype.ArtifactSpec{Store: "local", Ref: "rel", ImageName: "web"}}}
	rec := run(vm, `{}`)
	want := "web-" + d[:12]
	if rec.Status != apitype.JobSucceeded || rec.Image != want || !*rec.RolledOut || *rec.Reused || *rec.Bytes != int64(len(blob)) || !bytes.Equal(ims.got[want], blob) {
		t.Fatalf("vm pull: %+v", rec)
	}
	rec = run(vm, `{"ref":"`+d+`"}`)
	if rec.Status != apitype.JobSucceeded || !*rec.Reused || *rec.RolledOut || *rec.Bytes != 0 || rec.Artifact != d {
		t.Errorf("vm pull again: %+v", rec)
	}
	one := 1
	site := jobs.Deployment{ID: "site", Namespace: "default", Kind: apitype.KindSite, Spec: apitype.DeploymentSpec{ID: "site",
		Artifact: &apitype.ArtifactSpec{Store: "local", Ref: "rel", StripComponents: &one}}}
	rec = run(site, ``)
	if rec.Status != apitype.JobSucceeded || rec.SiteRoot == "" || *rec.Files != 1 || sites != 1 || rec.Image != "" {
		t.Errorf("site pull: %+v", rec)
	}
	if p, ok, _ := st.ArtifactPull(ctx, "site"); !ok || p.Tree != rec.SiteRoot || p.StripComponents != 1 {
		t.Errorf("recorded %+v", p)
	}
	rec = run(site, `{"ref":"nope"}`)
	if rec.Status != apitype.JobFailed || !strings.Contains(*rec.Error, `no tag "nope" in namespace "default"`) {
		t.Errorf("missing tag: %+v", rec)
	}
	for _, c := range []struct {
		dep  jobs.Deployment
		body string
		msg  string
	}{
		{vm, `{"operation_id":"o"}`, "operation_id: needs ref"},
		{vm, `{"ref":"r","operation_id":"o"}`, "operation_id: this server records no rollouts"},
		{site, `{"ref":"r","operation_id":"o"}`, "operation_id: a site switches to its pulled bundle at once"},
		{vm, `{"force":"yes"}`, "the body must be"},
		{jobs.Deployment{ID: "x", Kind: apitype.KindVM}, ``, `deployment "x" has no artifact section to pull`},
		{jobs.Deployment{ID: "x", Kind: apitype.KindVM, Spec: apitype.DeploymentSpec{Artifact: &apitype.ArtifactSpec{Store: "local", Ref: "r", Auth: &apitype.SecretRef{Secret: "s"}}}}, ``, "artifact.auth: secrets are not enabled"},
	} {
		_, err := m.Start(ctx, apitype.JobArtifactPull, jobs.Request{Deployment: c.dep, Body: []byte(c.body)})
		var je *jobs.Error
		if !errors.As(err, &je) || !strings.Contains(je.Msg, c.msg) {
			t.Errorf("start %s: %v, want %q", c.body, err, c.msg)
		}
	}
}
