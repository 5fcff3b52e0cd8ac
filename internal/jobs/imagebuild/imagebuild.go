// Package imagebuild is the image-build job kind (POST
// /deployments/{id}/build, body {ref?}): a vm deployment's build section
// names a recipe — a git repository (build.repo at build.ref, or the
// body's ref for this build; build.dockerfile and build.context in it) or
// a Dockerfile manifest (heyvm.dockerfile.v1) in an artifact store
// (build.store at build.ref) — which package build builds with buildah.
// The root filesystem is imported into the image store as
//
//	<build.image_name, else the deployment id>-<12 hex>
//
// where the hex is the commit built (a git source whose dockerfile and
// context are the defaults), else the sha256 of commit, dockerfile and
// context, else (a store) the manifest's digest: a new source is a new
// image name, so switching the deployment to it is a vm.image edit that
// replaces the pool while the old image's replicas drain
// (SwitchVMImage). The same source built again reuses the image already
// imported under its name. The image keeps the Dockerfile's run
// configuration (image.Store.ImportBuilt): a deployment with no
// start_command runs its ENTRYPOINT+CMD, with its ENV, WORKDIR and first
// exposed port as defaults. Images of earlier builds stay in the store,
// unpinned and (once switched away from) unused: a rollback is a vm.image
// edit until the image store's sweep (POST /images/sweep, down to berth
// serve --image-budget) removes them, oldest first; pin one to keep it.
//
// build.auth is resolved in the deployment's namespace: for a repo, the
// git token (the SecretRef's username, else the builder's default
// "x-access-token"); for a store, the store's API key. It is redacted
// from the log before anything is logged. A local repository (a path or
// file://, which berth serve allows only with --allow-local-repos) is
// built only for a fleet-wide caller: a confined one may not make berth
// read the host's disk.
//
// The record: repo, ref, commit, dockerfile (git sources), store, artifact
// and digest (store sources), image, rolled_out.
package imagebuild

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/artifact"
	"github.com/berth-dev/berth/internal/build"
	"github.com/berth-dev/berth/internal/image"
	"github.com/berth-dev/berth/internal/jobs"
)

// Builder builds a request (*build.Builder).
type Builder interface {
	Build(ctx context.Context, req build.Request, logf func(line string)) (build.Result, error)
}

// Images is the image store (*image.Store).
type Images interface {
	ImportBuilt(ctx context.Context, name, src string, c image.Config) (image.Image, error)
	Exists(name string) bool
}

// Secrets resolves build.auth (*secrets.Store).
type Secrets interface {
	ResolveEnv(ctx context.Context, ns string, refs []apitype.SecretEnv) (map[string]string, error)
}

// Options configure the kind; all but Secrets are required.
type Options struct {
	Builder Builder
	Images  Images
	Secrets Secrets
	// Open returns the Source a store names for namespace ns, with key the
	// store's API key ("" none): the server's ArtifactSource.
	Open func(store, ns, key string) (artifact.Source, error)
	// SwitchVMImage points vm deployment id at image, replacing its pool,
	// and reports whether it changed the spec.
	SwitchVMImage func(ctx context.Context, id, image, op string) (bool, error)
}

// Kind returns the image-build kind, to register under
// apitype.JobImageBuild.
func Kind(o Options) jobs.Kind {
	return func(ctx context.Context, req jobs.Request) (jobs.Run, error) { return o.prepare(ctx, req) }
}

// Body is the start route's body.
type Body struct {
	Ref string `json:"ref,omitempty"`
}

// Local reports whether repo names the host's disk (a path or file://).
func Local(repo string) bool {
	return strings.HasPrefix(repo, "/") || strings.HasPrefix(strings.ToLower(repo), "file:")
}

// ImageName is the image a build of deployment id is imported as; key is
// the source's identity (a commit's or a manifest's hex digest).
func ImageName(id string, b *apitype.BuildSpec, key string) string {
	base := cmp.Or(b.ImageName, id)
	if len(base) > 115 {
		base = base[:115]
	}
	return base + "-" + key[:min(12, len(key))]
}

func (o Options) prepare(ctx context.Context, req jobs.Request) (jobs.Run, error) {
	d := req.Deployment
	b := d.Spec.Build
	if b == nil {
		return nil, jobs.Errorf(http.StatusBadRequest, "deployment %q has no build section", d.ID)
	}
	if d.Kind != apitype.KindVM {
		return nil, jobs.Errorf(http.StatusBadRequest, "deployment %q is a %s deployment; only vm deployments are built", d.ID, d.Kind)
	}
	var body Body
	if len(bytes.TrimSpace(req.Body)) > 0 {
		dec := json.NewDecoder(bytes.NewReader(req.Body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&body); err != nil {
			return nil, jobs.Errorf(http.StatusBadRequest, "the body must be {ref?}: %v", err)
		}
	}
	if len(body.Ref) > 256 || strings.HasPrefix(body.Ref, "-") || strings.ContainsFunc(body.Ref, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return nil, jobs.Errorf(http.StatusBadRequest, "ref: %q is not a ref", body.Ref)
	}
	if b.Repo != "" && Local(b.Repo) && !req.Fleet {
		// The spec was written by a fleet-wide writer (a confined one
		// cannot name a local path); a confined caller still may not make
		// berth read the host's disk.
		return nil, jobs.Errorf(http.StatusForbidden, "build.repo %q is a local repository: only a fleet-wide token may build from the host's disk", b.Repo)
	}
	ref := cmp.Or(body.Ref, b.Ref)
	var secret string
	if b.Auth != nil {
		if o.Secrets == nil {
			return nil, jobs.Errorf(http.StatusServiceUnavailable, "build.auth: secrets are not enabled on this server")
		}
		v, err := o.Secrets.ResolveEnv(ctx, d.Namespace, []apitype.SecretEnv{{Secret: b.Auth.Secret, Key: b.Auth.Key}})
		if err != nil {
			return nil, jobs.Errorf(http.StatusBadRequest, "build.auth: %v", err)
		}
		if len(v) != 1 {
			return nil, jobs.Errorf(http.StatusBadRequest, "build.auth: secret %q holds %d keys; name one with key", b.Auth.Secret, len(v))
		}
		for _, val := range v {
			secret = val
		}
	}
	return func(ctx context.Context, j *jobs.Job) error {
		j.Redact(secret)
		return o.run(ctx, j, d, b, ref, secret)
	}, nil
}

func (o Options) run(ctx context.Context, j *jobs.Job, d jobs.Deployment, b *apitype.BuildSpec, ref, secret string) error {
	req := build.Request{Ref: ref, Dockerfile: b.Dockerfile, Context: b.Context}
	var key string // the source's identity, for the image name
	if b.Repo != "" {
		req.Repo = b.Repo
		if secret != "" {
			req.Auth = &build.Credential{Token: secret}
			if b.Auth.Username != "" {
				req.Auth.Username = b.Auth.Username
			}
		}
		j.Set(func(r *apitype.JobRecord) { r.Repo, r.Ref = b.Repo, ref })
	} else {
		req.Ref = ""
		src, err := o.Open(b.Store, d.Namespace, secret)
		if err != nil {
			return err
		}
		digest, err := src.Resolve(ctx, ref)
		if err != nil {
			return err
		}
		j.Logf("%s %s is sha256:%s", b.Store, ref, digest)
		j.Set(func(r *apitype.JobRecord) { r.Store, r.Artifact, r.Digest, r.Ref = b.Store, ref, digest, ref })
		req.Recipe = recipe{src: src, digest: digest}
		key = digest
	}
	var name string
	reused := false
	req.ImportResult = func(ctx context.Context, rootfs string, res build.Result) error {
		k := key
		if res.Commit != "" {
			k = res.Commit
			if b.Dockerfile != "" || b.Context != "" {
				h := sha256.Sum256([]byte(res.Commit + "\x00" + b.Dockerfile + "\x00" + b.Context))
				k = hex.EncodeToString(h[:])
			}
		}
		name = ImageName(d.ID, b, k)
		if o.Images.Exists(name) {
			reused = true
			j.Logf("image %s exists already (this source was built before); reusing it", name)
			return nil
		}
		_, err := o.Images.ImportBuilt(ctx, name, rootfs, imageConfig(res.Config))
		return err
	}
	res, err := o.Builder.Build(ctx, req, func(line string) { j.Logf("%s", line) })
	if err != nil {
		return err // a *build.BuildError: its message ends with the last log lines
	}
	j.Set(func(r *apitype.JobRecord) {
		if res.Commit != "" {
			r.Commit, r.Dockerfile = res.Commit, res.Dockerfile
		}
		r.Image = name
	})
	if !reused {
		j.Logf("imported %d bytes as image %s (fetch %s, build %s, import %s)", res.Bytes, name, res.Fetch.Round(1e6), res.Buildah.Round(1e6), res.Import.Round(1e6))
	}
	rolled, err := o.SwitchVMImage(ctx, d.ID, name, "")
	if err != nil {
		return err
	}
	j.Set(func(r *apitype.JobRecord) { r.RolledOut = &rolled })
	if rolled {
		j.Logf("deployment %s switched to image %s", d.ID, name)
	} else {
		j.Logf("deployment %s runs image %s already", d.ID, name)
	}
	return nil
}

// imageConfig is the image store's form of a build's run configuration.
func imageConfig(c build.Config) image.Config {
	out := image.Config{Entrypoint: c.Entrypoint, Cmd: c.Cmd, WorkDir: c.WorkingDir, User: c.User, Port: c.Port}
	for _, kv := range c.Env {
		k, v, _ := strings.Cut(kv, "=")
		if k == "" {
			continue
		}
		if out.Env == nil {
			out.Env = map[string]string{}
		}
		out.Env[k] = v
	}
	return out
}

// recipe is a Dockerfile manifest in an artifact store (build.Recipe).
type recipe struct {
	src    artifact.Source
	digest string
}

func (r recipe) Fetch(ctx context.Context) ([]byte, io.ReadCloser, error) {
	rc, _, err := r.src.Fetch(ctx, r.digest)
	if err != nil {
		return nil, nil, err
	}
	m, err := artifact.ParseDockerfileManifest(rc)
	if err == nil {
		// Read to the end so the source verifies the digest.
		_, err = io.Copy(io.Discard, rc)
	}
	if cerr := rc.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, nil, fmt.Errorf("manifest sha256:%s: %w", r.digest, err)
	}
	if m.ContextDigest == "" {
		return []byte(m.Dockerfile), nil, nil
	}
	ctxRC, _, err := r.src.Fetch(ctx, m.ContextDigest)
	if err != nil {
		return nil, nil, fmt.Errorf("context sha256:%s: %w", m.ContextDigest, err)
	}
	return []byte(m.Dockerfile), ctxRC, nil
}
