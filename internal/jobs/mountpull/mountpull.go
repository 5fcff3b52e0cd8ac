// Package mountpull is the mount-pull job kind (POST
// /deployments/{id}/mounts/pull, body {force?}): for each vm.mounts entry
// of a vm deployment, in spec order, ref is resolved through its store
// (with auth, a secret of the deployment's namespace, as the store's key),
// the blob is fetched and verified while it streams, and unpacked with
// strip_components into the shared, content-addressed trees
// (artifact.Trees) the replicas mount read-only.
//
// When every mount is done, what each resolved to is recorded (Records:
// the mount_pulls table) and Apply is called: the server stamps the
// digests into the deployment's spec, which replaces its pool if a digest
// changed (the pool's template is the vm section) and creates it if the
// deployment had none because a mount had not been pulled. A failing
// mount fails the job and records nothing, so the deployment keeps
// serving from the trees it had.
//
// The record: mounts, one MountOutcome per mount. A tree already unpacked
// for the digest is reused (reused, bytes 0, no files). force fetches
// and verifies every blob again even so (bytes counts it); the tree of a
// digest is immutable and shared by running replicas, so a verified
// fetch reuses it rather than rebuilding it under them.
package mountpull

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/artifact"
	"github.com/berth-dev/berth/internal/jobs"
	"github.com/berth-dev/berth/internal/store"
)

// Trees unpacks blobs into shared trees (*artifact.Trees).
type Trees interface {
	Unpack(ctx context.Context, src artifact.Source, digest string, strip int) (artifact.Tree, error)
}

// Secrets resolves a mount's auth (*secrets.Store).
type Secrets interface {
	ResolveEnv(ctx context.Context, ns string, refs []apitype.SecretEnv) (map[string]string, error)
}

// Records keeps what each mount resolved to (*store.Store).
type Records interface {
	MountPulls(ctx context.Context, deployment string) ([]store.MountPull, error)
	PutMountPulls(ctx context.Context, deployment string, ps []store.MountPull) error
}

// Options configure the kind. Open, Trees and Records are required.
type Options struct {
	// Open returns the Source a mount's store names for namespace ns, with
	// key the store's API key ("" none): the server's ArtifactSource.
	Open    func(store, ns, key string) (artifact.Source, error)
	Trees   Trees
	Records Records
	Secrets Secrets // nil: a mount with auth is refused
	// Apply puts the pulls recorded for deployment id into effect (stamps
	// the digests into its spec, replacing its pool when one changed).
	Apply func(ctx context.Context, id string) error
}

// Kind returns the mount-pull kind, to register under apitype.JobMountPull.
func Kind(o Options) jobs.Kind {
	return func(ctx context.Context, req jobs.Request) (jobs.Run, error) { return o.prepare(ctx, req) }
}

// Body is the start route's body.
type Body struct {
	Force bool `json:"force,omitempty"`
}

// Strip is a mount's strip_components, 0 when unset.
func Strip(m apitype.MountSpec) int {
	if m.StripComponents == nil {
		return 0
	}
	return *m.StripComponents
}

// Matches reports whether recorded pull p is of mount m as the spec names
// it now (same path, store, ref and strip_components).
func Matches(p store.MountPull, m apitype.MountSpec) bool {
	return p.Path == m.Path && p.Store == m.Store && p.Ref == m.Ref && p.StripComponents == Strip(m)
}

func (o Options) prepare(ctx context.Context, req jobs.Request) (jobs.Run, error) {
	d := req.Deployment
	if d.Kind != apitype.KindVM || d.Spec.VM == nil || len(d.Spec.VM.Mounts) == 0 {
		return nil, jobs.Errorf(http.StatusBadRequest, "deployment %q has no vm.mounts to pull", d.ID)
	}
	var body Body
	if len(req.Body) > 0 {
		dec := json.NewDecoder(bytes.NewReader(req.Body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&body); err != nil {
			return nil, jobs.Errorf(http.StatusBadRequest, "the body must be {force?}: %v", err)
		}
	}
	mounts := d.Spec.VM.Mounts
	keys := make([]string, len(mounts))
	for i, m := range mounts {
		if m.Auth == nil {
			continue
		}
		if o.Secrets == nil {
			return nil, jobs.Errorf(http.StatusServiceUnavailable, "vm.mounts[%d].auth: secrets are not enabled on this server", i)
		}
		// Resolved now, so a missing secret refuses the start (the error
		// names the secret and key, never a value).
		v, err := o.Secrets.ResolveEnv(ctx, d.Namespace, []apitype.SecretEnv{{Secret: m.Auth.Secret, Key: m.Auth.Key}})
		if err != nil {
			return nil, jobs.Errorf(http.StatusBadRequest, "vm.mounts[%d].auth: %v", i, err)
		}
		if len(v) != 1 {
			return nil, jobs.Errorf(http.StatusBadRequest, "vm.mounts[%d].auth: secret %q holds %d keys; name one with key", i, m.Auth.Secret, len(v))
		}
		for _, val := range v {
			keys[i] = val
		}
	}
	return func(ctx context.Context, j *jobs.Job) error {
		j.Redact(keys...)
		return o.run(ctx, j, d, mounts, keys, body.Force)
	}, nil
}

func (o Options) run(ctx context.Context, j *jobs.Job, d jobs.Deployment, mounts []apitype.MountSpec, keys []string, force bool) error {
	prev, err := o.Records.MountPulls(ctx, d.ID)
	if err != nil {
		return err
	}
	before := map[string]store.MountPull{}
	for _, p := range prev {
		before[p.Path] = p
	}
	var outs []apitype.MountOutcome
	var pulls []store.MountPull
	for i, m := range mounts {
		out, pull, err := o.one(ctx, j, d, i, m, keys[i], force, before[m.Path])
		if err != nil {
			return fmt.Errorf("vm.mounts[%d] (%s): %w", i, m.Path, err)
		}
		outs = append(outs, out)
		pulls = append(pulls, pull)
		snap := append([]apitype.MountOutcome(nil), outs...)
		j.Set(func(r *apitype.JobRecord) { r.Mounts = snap })
	}
	if err := o.Records.PutMountPulls(ctx, d.ID, pulls); err != nil {
		return err
	}
	if o.Apply != nil {
		if err := o.Apply(ctx, d.ID); err != nil {
			return fmt.Errorf("the mounts were pulled, but the deployment could not be switched to them: %w", err)
		}
	}
	return nil
}

func (o Options) one(ctx context.Context, j *jobs.Job, d jobs.Deployment, i int, m apitype.MountSpec, key string, force bool, prev store.MountPull) (apitype.MountOutcome, store.MountPull, error) {
	out := apitype.MountOutcome{Path: m.Path, Store: m.Store, Ref: m.Ref}
	src, err := o.Open(m.Store, d.Namespace, key)
	if err != nil {
		return out, store.MountPull{}, err
	}
	digest, err := src.Resolve(ctx, m.Ref)
	if err != nil {
		return out, store.MountPull{}, err
	}
	strip := Strip(m)
	j.Logf("vm.mounts[%d] %s: %s %s is sha256:%s", i, m.Path, m.Store, m.Ref, digest)
	cs := &artifact.Counting{Source: src}
	start := time.Now()
	if force {
		rc, _, err := cs.Fetch(ctx, digest)
		if err != nil {
			return out, store.MountPull{}, err
		}
		_, err = io.Copy(io.Discard, rc)
		if cerr := rc.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return out, store.MountPull{}, fmt.Errorf("fetching sha256:%s: %w", digest, err)
		}
	}
	tr, err := o.Trees.Unpack(ctx, cs, digest, strip)
	if err != nil {
		return out, store.MountPull{}, err
	}
	n := cs.Bytes()
	changed := prev.Digest != digest || prev.Tree != tr.Dir || !Matches(prev, m)
	out.Digest, out.Tree = digest, tr.Dir
	out.Bytes, out.Unpacked, out.Reused, out.Changed = &n, new(tr.Bytes), new(tr.Reused), &changed
	if !tr.Reused {
		out.Files = new(tr.Files)
	}
	el := time.Since(start)
	if tr.Reused {
		j.Logf("vm.mounts[%d] %s: reusing %s (%d bytes fetched, %s)", i, m.Path, tr.Dir, n, el.Round(time.Millisecond))
	} else {
		j.Logf("vm.mounts[%d] %s: unpacked %d files, %d bytes from %d fetched into %s in %s (%.1f MiB/s)", i, m.Path,
			tr.Files, tr.Bytes, n, tr.Dir, el.Round(time.Millisecond), float64(n)/(1<<20)/max(el.Seconds(), 1e-6))
	}
	return out, store.MountPull{Deployment: d.ID, Path: m.Path, Store: m.Store, Ref: m.Ref, StripComponents: strip, Digest: digest, Tree: tr.Dir}, nil
}
