package registry

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/spec"
	"github.com/berth-dev/berth/internal/vm"
)

// TestPoolMounts: a vm spec's mounts reach its pool as Config.Mounts,
// which asks Options.Mounts at each create with the deployment and its
// MountSpecs; without a resolver the create fails saying nothing pulls
// them; a spec without mounts has none.
func TestPoolMounts(t *testing.T) {
	s := &apitype.DeploymentSpec{ID: "app", VM: &apitype.VmSpec{Driver: apitype.DriverContainer, Image: "img", Port: 8080,
		Mounts: []apitype.MountSpec{{Path: "/data", Store: "/srv/art", Ref: "v1"}, {Path: "/rw", Store: "/srv/art", Ref: "v2", ReadOnly: new(false)}}}}
	var gotID string
	var gotSpecs []apitype.MountSpec
	trees := map[string]string{"v1": "/var/lib/berth/mounts/aa", "v2": "/var/lib/berth/mounts/bb"}
	r := &Registry{o: Options{Mounts: func(ctx context.Context, id string, ms []apitype.MountSpec) ([]vm.Mount, error) {
		gotID, gotSpecs = id, ms
		return MountTargets(ms, func(m apitype.MountSpec) (string, error) {
			if tr, ok := trees[m.Ref]; ok {
				return tr, nil
			}
			return "", errors.New("not pulled yet")
		})
	}}}
	cfg := r.poolConfig(s)
	if cfg.Mounts == nil {
		t.Fatal("no Config.Mounts for a spec with mounts")
	}
	got, err := cfg.Mounts(t.Context())
	want := []vm.Mount{{Source: "/var/lib/berth/mounts/aa", Target: "/data", ReadOnly: true}, {Source: "/var/lib/berth/mounts/bb", Target: "/rw"}}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("Mounts = %v, %v; want %v", got, err, want)
	}
	if gotID != "app" || len(gotSpecs) != 2 || gotSpecs[0].Path != "/data" {
		t.Errorf("the resolver got %q, %v", gotID, gotSpecs)
	}
	s.VM.Mounts[1].Ref = "v3"
	if _, err := r.poolConfig(s).Mounts(t.Context()); err == nil || !strings.Contains(err.Error(), "vm.mounts[1] (/rw): not pulled yet") {
		t.Errorf("Mounts with a tree missing: %v", err)
	}

	r = &Registry{}
	if _, err := r.poolConfig(s).Mounts(t.Context()); err == nil || !strings.Contains(err.Error(), "nothing on this server pulls them") {
		t.Errorf("Mounts without a resolver: %v", err)
	}
	s.VM.Mounts = nil
	if r.poolConfig(s).Mounts != nil {
		t.Error("Config.Mounts for a spec without mounts")
	}
}

// TestMountDigests: Put stamps each mount's digest from MountDigest
// (overwriting the client's); a vm deployment with a mount without one
// has no pool and its data plane view says why; once every digest is
// there, a Put makes the pool, and an unpulled edit takes it away again.
func TestMountDigests(t *testing.T) {
	r := newRig(t)
	ctx := t.Context()
	digests := map[string]string{}
	var mu sync.Mutex
	r.reg = New(Options{
		Store: r.st, Publisher: r.tables, Pools: r.fleet,
		Spec: spec.Options{BaseDomain: "apps.test", Drivers: []string{"process"}},
		MountDigest: func(_ context.Context, id string, m apitype.MountSpec) string {
			mu.Lock()
			defer mu.Unlock()
			return digests[id+m.Path+m.Ref]
		},
		Mounts: func(context.Context, string, []apitype.MountSpec) ([]vm.Mount, error) { return nil, nil },
	})
	s := vmSpec("app", "app.example")
	s.VM.Mounts = []apitype.MountSpec{{Path: "/data", Store: "local", Ref: "v1", Digest: "forged"}}
	e, _, err := r.reg.Put(ctx, s, PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if e.Spec.VM.Mounts[0].Digest != "" || e.VMPool != nil || !strings.Contains(e.dp.Unavailable, "mounts are being pulled") {
		t.Fatalf("unpulled: digest %q, pool %v, unavailable %q", e.Spec.VM.Mounts[0].Digest, e.VMPool, e.dp.Unavailable)
	}
	mu.Lock()
	digests["app/datav1"] = "aa"
	mu.Unlock()
	if e, _, err = r.reg.Put(ctx, e.Spec, PutOptions{IfMatch: e.ETag}); err != nil {
		t.Fatal(err)
	}
	if e.Spec.VM.Mounts[0].Digest != "aa" || e.VMPool == nil || e.dp.Unavailable != "" {
		t.Fatalf("pulled: digest %q, pool %v", e.Spec.VM.Mounts[0].Digest, e.VMPool)
	}
	s.VM.Mounts[0].Ref = "v2"
	if e, _, err = r.reg.Put(ctx, s, PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, ok := r.fleet.Pool("app"); e.VMPool != nil || ok {
		t.Errorf("an edit to an unpulled ref kept the pool")
	}
}
