// Package artifactpull is the artifact-pull job kind (POST
// /deployments/{id}/pull, body {ref?, operation_id?, force?}): the
// deployment's artifact section names a blob in a store (artifact.store,
// artifact.ref, or the body's ref for this pull; auth a secret of the
// deployment's namespace, sent as the store's key), which is resolved,
// fetched and verified, then put into effect:
//
//   - a site's blob is a bundle: unpacked with strip_components into the
//     shared, content-addressed trees (artifact.Trees), recorded (Records,
//     the pulls table, path "") and the site is switched to serve from
//     that tree (SwitchSite: the data plane's view is replaced whole, so
//     requests in flight finish on the tree they started with, which is
//     never modified). The record: store, artifact (the ref), digest,
//     bytes (fetched), reused (the tree was there), site_root, files.
//   - a vm deployment's blob is a rootfs tarball: fetched whole into a
//     temporary file (so its digest is verified before anything is
//     imported), imported into the image store as
//     "<artifact.image_name, else the deployment id>-<12 hex of the digest>"
//     — a new digest is always a new image name, so switching to it is a
//     vm.image edit, which replaces the pool (SwitchVMImage) while
//     replicas of the old image drain — and recorded. The record: store,
//     artifact, digest, bytes, reused (that digest is imported already:
//     nothing is fetched), image, rolled_out (the spec was switched).
//
// force fetches and imports or verifies again even when the digest was
// pulled already. operation_id (a rollout's) is refused: berth has no
// rollouts.
package artifactpull

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/artifact"
	"github.com/berth-dev/berth/internal/image"
	"github.com/berth-dev/berth/internal/jobs"
	"github.com/berth-dev/berth/internal/store"
)

// Trees unpacks blobs into shared trees (*artifact.Trees).
type Trees interface {
	Unpack(ctx context.Context, src artifact.Source, digest string, strip int) (artifact.Tree, error)
}

// Images is the image store (*image.Store).
type Images interface {
	ImportTar(ctx context.Context, name string, r io.Reader, source string) (image.Image, error)
	Exists(name string) bool
}

// Secrets resolves artifact.auth (*secrets.Store).
type Secrets interface {
	ResolveEnv(ctx context.Context, ns string, refs []apitype.SecretEnv) (map[string]string, error)
}

// Records keeps what a deployment's artifact resolved to (*store.Store).
type Records interface {
	ArtifactPull(ctx context.Context, deployment string) (store.MountPull, bool, error)
	PutArtifactPull(ctx context.Context, p store.MountPull) error
}

// Options configure the kind; all but Secrets are required.
type Options struct {
	// Open returns the Source a store names for namespace ns, with key the
	// store's API key ("" none): the server's ArtifactSource.
	Open    func(store, ns, key string) (artifact.Source, error)
	Trees   Trees
	Images  Images
	Records Records
	Secrets Secrets
	// TempDir holds a rootfs tarball while it is fetched and verified.
	TempDir string
	// SwitchVMImage points vm deployment id at image, replacing its pool
	// through a rollout (with operation id op when it is not ""), and
	// reports whether it changed the spec.
	SwitchVMImage func(ctx context.Context, id, image, op string) (bool, error)
	// CheckOperation judges a pull's operation_id before the job starts:
	// its form, and that deployment has no rollout of that id yet. It
	// returns a *jobs.Error to answer with. nil: operation_id is refused.
	CheckOperation func(ctx context.Context, deployment, op string) error
	// SwitchSite makes site deployment id serve the tree its recorded pull
	// names.
	SwitchSite func(ctx context.Context, id string) error
}

// Kind returns the artifact-pull kind, to register under
// apitype.JobArtifactPull.
func Kind(o Options) jobs.Kind {
	return func(ctx context.Context, req jobs.Request) (jobs.Run, error) { return o.prepare(ctx, req) }
}

// Body is the start route's body.
type Body struct {
	Ref         string `json:"ref,omitempty"`
	OperationID string `json:"operation_id,omitempty"`
	Force       bool   `json:"force,omitempty"`
}

// Strip is a's strip_components, 0 when unset.
func Strip(a *apitype.ArtifactSpec) int {
	if a.StripComponents == nil {
		return 0
	}
	return *a.StripComponents
}

// ImageName is the image a vm deployment's artifact of digest (hex) is
// imported as.
func ImageName(id string, a *apitype.ArtifactSpec, digest string) string {
	base := cmp.Or(a.ImageName, id)
	if len(base) > 115 {
		base = base[:115]
	}
	return base + "-" + digest[:12]
}

func (o Options) prepare(ctx context.Context, req jobs.Request) (jobs.Run, error) {
	d := req.Deployment
	a := d.Spec.Artifact
	if a == nil {
		return nil, jobs.Errorf(http.StatusBadRequest, "deployment %q has no artifact section to pull", d.ID)
	}
	if d.Kind != apitype.KindVM && d.Kind != apitype.KindSite {
		return nil, jobs.Errorf(http.StatusBadRequest, "deployment %q is a %s deployment; artifacts are for vm and site deployments", d.ID, d.Kind)
	}
	var body Body
	if len(req.Body) > 0 {
		dec := json.NewDecoder(bytes.NewReader(req.Body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&body); err != nil {
			return nil, jobs.Errorf(http.StatusBadRequest, "the body must be {ref?, operation_id?, force?}: %v", err)
		}
	}
	switch {
	case body.OperationID != "" && body.Ref == "":
		return nil, jobs.Errorf(http.StatusBadRequest, "operation_id: needs ref")
	case body.OperationID != "" && d.Kind != apitype.KindVM:
		return nil, jobs.Errorf(http.StatusBadRequest, "operation_id: a site switches to its pulled bundle at once, with no rollout to name; send ref alone")
	case body.OperationID != "" && o.CheckOperation == nil:
		return nil, jobs.Errorf(http.StatusBadRequest, "operation_id: this server records no rollouts; send ref alone")
	case body.Ref != "" && len(body.Ref) > 256:
		return nil, jobs.Errorf(http.StatusBadRequest, "ref: longer than 256 bytes")
	}
	if body.OperationID != "" {
		if err := o.CheckOperation(ctx, d.ID, body.OperationID); err != nil {
			return nil, err
		}
	}
	ref := cmp.Or(body.Ref, a.Ref)
	var key string
	if a.Auth != nil {
		if o.Secrets == nil {
			return nil, jobs.Errorf(http.StatusServiceUnavailable, "artifact.auth: secrets are not enabled on this server")
		}
		v, err := o.Secrets.ResolveEnv(ctx, d.Namespace, []apitype.SecretEnv{{Secret: a.Auth.Secret, Key: a.Auth.Key}})
		if err != nil {
			return nil, jobs.Errorf(http.StatusBadRequest, "artifact.auth: %v", err)
		}
		if len(v) != 1 {
			return nil, jobs.Errorf(http.StatusBadRequest, "artifact.auth: secret %q holds %d keys; name one with key", a.Auth.Secret, len(v))
		}
		for _, val := range v {
			key = val
		}
	}
	return func(ctx context.Context, j *jobs.Job) error {
		j.Redact(key)
		return o.run(ctx, j, d, a, ref, key, body.OperationID, body.Force)
	}, nil
}

func (o Options) run(ctx context.Context, j *jobs.Job, d jobs.Deployment, a *apitype.ArtifactSpec, ref, key, op string, force bool) error {
	j.Set(func(r *apitype.JobRecord) { r.Store, r.Artifact = a.Store, ref })
	src, err := o.Open(a.Store, d.Namespace, key)
	if err != nil {
		return err
	}
	digest, err := src.Resolve(ctx, ref)
	if err != nil {
		return err
	}
	j.Logf("%s %s is sha256:%s", a.Store, ref, digest)
	j.Set(func(r *apitype.JobRecord) { r.Digest = digest })
	prev, had, err := o.Records.ArtifactPull(ctx, d.ID)
	if err != nil {
		return err
	}
	cs := &artifact.Counting{Source: src}
	if d.Kind == apitype.KindSite {
		return o.site(ctx, j, d, a, ref, digest, cs, force)
	}
	name := ImageName(d.ID, a, digest)
	reused := !force && had && prev.Digest == digest && prev.Tree == name && o.Images.Exists(name)
	start := time.Now()
	if reused {
		j.Logf("image %s holds sha256:%s already", name, digest)
	} else if err := o.importImage(ctx, cs, digest, name, a.Store+" "+ref); err != nil {
		return err
	} else {
		el := time.Since(start)
		n := cs.Bytes()
		j.Logf("imported %d bytes as image %s in %s (%.1f MiB/s)", n, name, el.Round(time.Millisecond), float64(n)/(1<<20)/max(el.Seconds(), 1e-6))
	}
	n := cs.Bytes()
	j.Set(func(r *apitype.JobRecord) { r.Image, r.Bytes, r.Reused = name, &n, &reused })
	if err := o.Records.PutArtifactPull(ctx, store.MountPull{Deployment: d.ID, Store: a.Store, Ref: ref, Digest: digest, Tree: name}); err != nil {
		return err
	}
	rolled, err := o.SwitchVMImage(ctx, d.ID, name, op)
	if err != nil {
		return fmt.Errorf("image %s was imported, but the deployment could not be switched to it: %w", name, err)
	}
	switch {
	case rolled && op != "":
		j.Logf("switched vm.image to %s: rollout %s replaces the replicas (GET /deployments/%s/rollouts/%s)", name, op, d.ID, op)
	case rolled:
		j.Logf("switched vm.image to %s: the replicas are being replaced", name)
	}
	j.Set(func(r *apitype.JobRecord) { r.RolledOut = &rolled })
	return nil
}

// importImage fetches blob digest whole into a temporary file, so it is
// verified before anything is imported, then imports it as name.
func (o Options) importImage(ctx context.Context, src artifact.Source, digest, name, source string) error {
	rc, _, err := src.Fetch(ctx, digest)
	if err != nil {
		return err
	}
	defer rc.Close()
	f, err := os.CreateTemp(o.TempDir, "artifact-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	if _, err := io.Copy(f, artifact.ContextReader(ctx, rc)); err != nil {
		return fmt.Errorf("fetching sha256:%s: %w", digest, err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	if _, err := o.Images.ImportTar(ctx, name, f, "artifact "+source+" sha256:"+digest); err != nil {
		return fmt.Errorf("importing sha256:%s as image %s: %w", digest, name, err)
	}
	return nil
}

func (o Options) site(ctx context.Context, j *jobs.Job, d jobs.Deployment, a *apitype.ArtifactSpec, ref, digest string, cs *artifact.Counting, force bool) error {
	start := time.Now()
	if force {
		// Fetched and verified again; the tree of a digest is immutable
		// and may be serving, so it is reused, not rebuilt.
		rc, _, err := cs.Fetch(ctx, digest)
		if err != nil {
			return err
		}
		_, err = io.Copy(io.Discard, artifact.ContextReader(ctx, rc))
		if cerr := rc.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("fetching sha256:%s: %w", digest, err)
		}
	}
	tr, err := o.Trees.Unpack(ctx, cs, digest, Strip(a))
	if err != nil {
		return err
	}
	n := cs.Bytes()
	el := time.Since(start)
	if tr.Reused {
		j.Logf("reusing %s (%d files; %d bytes fetched)", tr.Dir, tr.Files, n)
	} else {
		j.Logf("unpacked %d files, %d bytes from %d fetched into %s in %s", tr.Files, tr.Bytes, n, tr.Dir, el.Round(time.Millisecond))
	}
	j.Set(func(r *apitype.JobRecord) {
		r.Bytes, r.Reused, r.SiteRoot, r.Files = &n, new(tr.Reused), tr.Dir, new(tr.Files)
	})
	if err := o.Records.PutArtifactPull(ctx, store.MountPull{Deployment: d.ID, Store: a.Store, Ref: ref, StripComponents: Strip(a), Digest: digest, Tree: tr.Dir}); err != nil {
		return err
	}
	if err := o.SwitchSite(ctx, d.ID); err != nil {
		return fmt.Errorf("the bundle was unpacked, but the site could not be switched to it: %w", err)
	}
	j.Logf("the site serves %s", tr.Dir)
	return nil
}
