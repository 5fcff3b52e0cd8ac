package image

import (
	"bufio"
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sync/singleflight"

	"github.com/berth-dev/berth/internal/store"
)

// ErrPull wraps every failure to fetch an image from its registry: the
// registry refused, the network failed, or a blob did not match its
// digest. Bad references are ErrBadName.
var ErrPull = errors.New("image: pull failed")

// RegistryOptions configure pulls from OCI registries.
type RegistryOptions struct {
	// Auth returns the credentials a namespace uses for a registry host
	// ("ghcr.io", "registry.local:5000"); nil or authn.Anonymous means
	// none.
	Auth func(ctx context.Context, namespace, host string) (authn.Authenticator, error)
	// RootCAs verify registries' TLS certificates; nil is the system's.
	RootCAs *x509.CertPool
	// Insecure lists the registry hosts ("host" or "host:port") that may
	// be reached over plain HTTP or on a loopback address. Others may not:
	// the names in vm.image are the tenants', the network is berth's.
	Insecure []string
	// Jobs bounds the layers downloaded at once per pull (default 4).
	Jobs int
}

// Config is what an image's config says about running it; a deployment
// with no start_command runs Entrypoint+Cmd (see Command).
type Config struct {
	Entrypoint []string          `json:"entrypoint,omitempty"`
	Cmd        []string          `json:"cmd,omitempty"`
	Env        map[string]string `json:"env,omitempty"`
	WorkDir    string            `json:"workdir,omitempty"`
	User       string            `json:"user,omitempty"`
	Port       int               `json:"port,omitempty"` // the first exposed TCP port, 0 for none
}

// Command is the shell command line of Entrypoint+Cmd (each word quoted),
// as vm.Spec.Command wants it; "" when the image names none.
func (c Config) Command() string {
	words := append(append([]string(nil), c.Entrypoint...), c.Cmd...)
	for i, w := range words {
		words[i] = shellQuote(w)
	}
	return strings.Join(words, " ")
}

func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+@%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// pulled is what the store remembers of a pulled image (store.PulledImage
// in memory).
type pulled struct {
	digest     string   // of what the reference resolved to (an index or a manifest)
	layers     []string // diff ids, bottom first
	config     Config
	namespaces map[string]bool // that resolved it with their own credentials
}

// PullCatalog is where pulled images' metadata lives; *store.Store is
// one. A Catalog without it cannot pull.
type PullCatalog interface {
	PulledImages(ctx context.Context) ([]store.PulledImage, error)
	PutPulledImage(ctx context.Context, p store.PulledImage) error
	AddPulledNamespace(ctx context.Context, name, namespace string) error
	DeletePulledImage(ctx context.Context, name string) error
}

// layersDir is the layer store: <Dir>/layers/sha256/<hex of diff id>/, one
// tree per uncompressed layer, whiteouts kept as the .wh. files the layer
// has. Image trees are made of hard links to it (flatten), so a layer two
// images share is on disk once, and the drivers see one plain tree as with
// an imported image.
func (s *Store) layerDir(diffID string) string {
	return filepath.Join(s.dir, "layers", "sha256", strings.TrimPrefix(diffID, DigestPrefix))
}

// Config returns the run defaults of a pulled or built image (ok false
// for a plainly imported one). It reads memory only.
func (s *Store) Config(name string) (Config, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.pulled[name]
	if !ok {
		c, ok := s.built[name]
		return c, ok
	}
	return p.config, true
}

// Usable reports whether namespace may start replicas from the image
// name without a pull: an imported image always, a pulled one once the
// namespace has resolved it with its own credentials (Pull). It reads
// memory only.
func (s *Store) Usable(name, namespace string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.digests[name]; !ok {
		return false
	}
	p, ok := s.pulled[name]
	return !ok || p.namespaces[namespace]
}

// Pull makes the registry reference ref (IsReference) usable by
// namespace and returns its image.
//
// A reference the namespace resolved before is answered from memory with
// no network traffic. One another namespace pulled is re-resolved with
// this namespace's credentials (a manifest HEAD): a private image pulled
// with A's credentials does not become B's because it is cached. Anything
// else is resolved once to a manifest digest (linux/amd64 of an index),
// and its missing layers are downloaded in parallel, each verified against
// its digest and diff id, unpacked into the layer store and kept there, so
// an interrupted pull resumes with the layers it lacks. Callers waiting on
// the same pull share it.
func (s *Store) Pull(ctx context.Context, ref, namespace string) (Image, error) {
	if !IsReference(ref) {
		return Image{}, fmt.Errorf("%w %q: not a registry reference (name a registry host, e.g. docker.io/library/alpine:3.20, or a digest)", ErrBadName, ref)
	}
	if err := checkName(ref); err != nil {
		return Image{}, err
	}
	if s.Usable(ref, namespace) {
		return s.Get(ctx, ref)
	}
	v, err, _ := s.pulls.Do(namespace+"\x00"+ref, func() (any, error) {
		// Detached from the first caller: the others wait on the same
		// pull, and a cancelled first caller must not fail them.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pullTimeout)
		defer cancel()
		return s.pull(ctx, ref, namespace)
	})
	if err != nil {
		return Image{}, err
	}
	return v.(Image), nil
}

// pullTimeout bounds one pull altogether.
const pullTimeout = 30 * time.Minute

func (s *Store) pull(ctx context.Context, ref, namespace string) (Image, error) {
	pc, ok := s.cat.(PullCatalog)
	if !ok {
		return Image{}, fmt.Errorf("%w: this image store cannot record pulls", ErrPull)
	}
	nopts := []name.Option{name.WeakValidation}
	r, err := name.ParseReference(ref, nopts...)
	if err != nil {
		return Image{}, fmt.Errorf("%w %q: %w", ErrBadName, ref, err)
	}
	if reg := r.Context().RegistryStr(); s.insecure(reg) {
		if r, err = name.ParseReference(ref, append(nopts, name.Insecure)...); err != nil {
			return Image{}, fmt.Errorf("%w %q: %w", ErrBadName, ref, err)
		}
	}
	opts, err := s.remoteOptions(ctx, r, namespace)
	if err != nil {
		return Image{}, err
	}
	fail := func(err error) (Image, error) {
		return Image{}, fmt.Errorf("%w: %s: %w", ErrPull, ref, err)
	}

	s.mu.Lock()
	known, had := s.pulled[ref]
	s.mu.Unlock()
	if had {
		// Another namespace pulled it: prove this one may read it too.
		d, err := remote.Head(r, opts...)
		if err != nil {
			return fail(err)
		}
		if d.Digest.String() == known.digest {
			if err := pc.AddPulledNamespace(ctx, ref, namespace); err != nil {
				return Image{}, fmt.Errorf("image: %w", err)
			}
			s.mu.Lock()
			if p := s.pulled[ref]; p != nil {
				p.namespaces[namespace] = true
			}
			s.mu.Unlock()
			return s.Get(ctx, ref)
		}
		// The tag moved: pull what it names now.
	}

	desc, err := remote.Get(r, opts...)
	if err != nil {
		return fail(err)
	}
	img, err := desc.Image() // an index: its linux/amd64 image (WithPlatform)
	if err != nil {
		return fail(err)
	}
	mf, err := img.Manifest()
	if err != nil {
		return fail(err)
	}
	rawCfg, err := img.RawConfigFile()
	if err != nil {
		return fail(err)
	}
	if got := sha256Hex(rawCfg); got != mf.Config.Digest.String() {
		return fail(fmt.Errorf("config blob %s: digest mismatch (got %s)", mf.Config.Digest, got))
	}
	var cf v1.ConfigFile
	if err := json.Unmarshal(rawCfg, &cf); err != nil {
		return fail(fmt.Errorf("config blob %s: %w", mf.Config.Digest, err))
	}
	if len(cf.RootFS.DiffIDs) != len(mf.Layers) {
		return fail(fmt.Errorf("manifest has %d layers, its config %d diff ids", len(mf.Layers), len(cf.RootFS.DiffIDs)))
	}
	diffIDs := make([]string, len(mf.Layers))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(s.jobs())
	for i, l := range mf.Layers {
		diffIDs[i] = cf.RootFS.DiffIDs[i].String()
		if !validDigest(diffIDs[i]) || !validDigest(l.Digest.String()) {
			return fail(fmt.Errorf("layer %d: digest %s / diff id %s is not sha256", i, l.Digest, diffIDs[i]))
		}
		g.Go(func() error {
			return s.fetchLayer(gctx, r.Context().Digest(l.Digest.String()), l, diffIDs[i], opts)
		})
	}
	if err := g.Wait(); err != nil {
		return fail(err)
	}
	source := r.Context().Digest(desc.Digest.String()).String()
	im, err := s.importPulled(ctx, ref, source, diffIDs)
	if err != nil {
		return Image{}, err
	}
	p := &pulled{digest: desc.Digest.String(), layers: diffIDs, config: imageConfig(cf.Config), namespaces: map[string]bool{namespace: true}}
	// Two namespaces' pulls of one reference may end at once: the record
	// keeps both when the digest is the same (a moved tag starts over).
	s.recordM.Lock()
	defer s.recordM.Unlock()
	s.mu.Lock()
	if old := s.pulled[ref]; old != nil && old.digest == p.digest {
		for n := range old.namespaces {
			p.namespaces[n] = true
		}
	}
	s.mu.Unlock()
	nss := make([]string, 0, len(p.namespaces))
	for n := range p.namespaces {
		nss = append(nss, n)
	}
	cfgJSON, _ := json.Marshal(p.config)
	if err := pc.PutPulledImage(ctx, store.PulledImage{
		Name: ref, ManifestDigest: p.digest, Layers: diffIDs, Config: string(cfgJSON), Namespaces: nss,
	}); err != nil {
		return Image{}, fmt.Errorf("image: %w", err)
	}
	s.mu.Lock()
	s.pulled[ref] = p
	s.mu.Unlock()
	s.log.Info("image pulled", "ref", ref, "digest", p.digest, "layers", len(diffIDs), "namespace", namespace)
	return im, nil
}

func (s *Store) jobs() int {
	if s.o.Registry.Jobs > 0 {
		return s.o.Registry.Jobs
	}
	return 4
}

func (s *Store) insecure(host string) bool {
	for _, h := range s.o.Registry.Insecure {
		if h == host || strings.Split(host, ":")[0] == h {
			return true
		}
	}
	return false
}

// remoteOptions are the go-containerregistry options of a pull by
// namespace from r's registry.
func (s *Store) remoteOptions(ctx context.Context, r name.Reference, namespace string) ([]remote.Option, error) {
	var auth authn.Authenticator = authn.Anonymous
	if s.o.Registry.Auth != nil {
		a, err := s.o.Registry.Auth(ctx, namespace, r.Context().RegistryStr())
		if err != nil {
			return nil, fmt.Errorf("%w: credentials for %s: %w", ErrPull, r.Context().RegistryStr(), err)
		}
		if a != nil {
			auth = a
		}
	}
	return []remote.Option{
		remote.WithContext(ctx), remote.WithTransport(s.transport), remote.WithAuth(auth),
		remote.WithPlatform(v1.Platform{OS: "linux", Architecture: "amd64"}),
		remote.WithUserAgent("berth"),
	}, nil
}

// fetchLayer downloads, verifies and unpacks one layer into the layer
// store unless it is there. Pulls of two images sharing the layer fetch it
// once (layerFlight).
func (s *Store) fetchLayer(ctx context.Context, blob name.Digest, d v1.Descriptor, diffID string, opts []remote.Option) error {
	dir := s.layerDir(diffID)
	if _, err := os.Stat(dir); err == nil {
		return nil // verified when it was put there
	}
	_, err, _ := s.layerFlight.Do(diffID, func() (any, error) {
		if _, err := os.Stat(dir); err == nil {
			return nil, nil
		}
		return nil, s.downloadLayer(ctx, blob, d, diffID, dir, opts)
	})
	return err
}

// maxZstdWindow bounds the window, so the memory, a zstd layer's decoder
// may ask for: 128 MiB, what zstd --long makes at most (the decoder's own
// default allows 512 MiB per layer, to a hostile blob too).
const maxZstdWindow = 1 << 27

func (s *Store) downloadLayer(ctx context.Context, blob name.Digest, d v1.Descriptor, diffID, dir string, opts []remote.Option) error {
	var gz, zst bool
	switch d.MediaType {
	case types.DockerLayer, types.OCILayer, types.DockerForeignLayer, types.OCIRestrictedLayer:
		gz = true
	case types.OCILayerZStd:
		zst = true
	case types.OCIUncompressedLayer, types.OCIUncompressedRestrictedLayer:
	default:
		return fmt.Errorf("layer %s: media type %q is not supported (gzip, zstd or uncompressed tar)", d.Digest, d.MediaType)
	}
	l, err := remote.Layer(blob, opts...)
	if err != nil {
		return fmt.Errorf("layer %s: %w", d.Digest, err)
	}
	rc, err := l.Compressed()
	if err != nil {
		return fmt.Errorf("layer %s: %w", d.Digest, err)
	}
	defer rc.Close()
	tmp, err := os.MkdirTemp(filepath.Join(s.dir, "tmp"), "layer-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	tree := filepath.Join(tmp, "tree")
	if err := os.Mkdir(tree, 0o755); err != nil {
		return err
	}
	// Both digests are checked on the bytes themselves, each hashed
	// once: go-containerregistry's Compressed hashes the blob as it is
	// read and fails its last read when the blob does not match its
	// digest (blobReader keeps that error, whoever read it); berth hashes
	// the uncompressed stream, the diff id, which names the tree in the
	// layer store that other images will share.
	br := &blobReader{r: ctxReader{ctx, rc}}
	tarH := sha256.New()
	var tr io.Reader = br
	switch {
	case gz:
		zr, err := gzip.NewReader(bufio.NewReaderSize(br, 1<<20))
		if err != nil {
			return fmt.Errorf("layer %s: %w", d.Digest, digestFirst(br, err))
		}
		defer zr.Close()
		tr = zr
	case zst:
		// One goroutine: the pull already unpacks layers in parallel.
		zr, err := zstd.NewReader(br, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(maxZstdWindow))
		if err != nil {
			return fmt.Errorf("layer %s: %w", d.Digest, err)
		}
		defer zr.Close()
		tr = zr
	}
	tr = io.TeeReader(tr, tarH)
	if err := unpackLayer(ctx, tr, tree); err != nil {
		return fmt.Errorf("layer %s: %w", d.Digest, digestFirst(br, err))
	}
	// The tar's end-of-archive blocks and the gzip trailer count too.
	if _, err := io.Copy(io.Discard, tr); err != nil {
		return fmt.Errorf("layer %s: %w", d.Digest, digestFirst(br, err))
	}
	// To the blob's end, where its digest is checked.
	if _, err := io.Copy(io.Discard, br); err != nil || br.err != nil {
		return fmt.Errorf("layer %s: %w; refused", d.Digest, cmp.Or(br.err, err))
	}
	if got := DigestPrefix + hex.EncodeToString(tarH.Sum(nil)); got != diffID {
		return fmt.Errorf("layer %s: diff id mismatch: want %s, got %s; refused", d.Digest, diffID, got)
	}
	// Durable before it is in the layer store, where its presence alone
	// says it is whole and verified (a resumed pull keeps it).
	if err := syncTree(tree); err != nil {
		return fmt.Errorf("layer %s: %w", d.Digest, err)
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return err
	}
	if err := os.Rename(tree, dir); err != nil && !errors.Is(err, os.ErrExist) {
		if _, serr := os.Stat(dir); serr != nil {
			return fmt.Errorf("layer %s: %w", d.Digest, err)
		}
	}
	return nil
}

// digestFirst turns a failure to read a blob into a digest mismatch when
// that is what it is: garbage fails gunzip or tar before the blob's end,
// where its digest is checked, and the message must name the blob that
// was corrupt, not the symptom.
func digestFirst(br *blobReader, cause error) error {
	io.Copy(io.Discard, io.LimitReader(br, 1<<30))
	if br.err != nil {
		return fmt.Errorf("%w (refused)", br.err)
	}
	return cause
}

// blobReader keeps the first error other than EOF that reading the blob
// met: a digest mismatch, a failed download, the end of the context.
type blobReader struct {
	r   io.Reader
	err error
}

func (b *blobReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err != nil && err != io.EOF && b.err == nil {
		b.err = err
	}
	return n, err
}

// ctxReader makes a long download stop when its context ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(b []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(b)
}

func sha256Hex(b []byte) string {
	h := sha256.Sum256(b)
	return DigestPrefix + hex.EncodeToString(h[:])
}

// imageConfig keeps what berth uses of an image's config.
func imageConfig(c v1.Config) Config {
	out := Config{Entrypoint: c.Entrypoint, Cmd: c.Cmd, WorkDir: c.WorkingDir, User: c.User}
	for _, kv := range c.Env {
		if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
			if out.Env == nil {
				out.Env = map[string]string{}
			}
			out.Env[k] = v
		}
	}
	first := 0
	for p := range c.ExposedPorts {
		num, proto, _ := strings.Cut(p, "/")
		n, err := strconv.Atoi(num)
		if err != nil || n <= 0 || n > 65535 || (proto != "" && proto != "tcp") {
			continue
		}
		if first == 0 || n < first {
			first = n // map order is random: the lowest is "first" every time
		}
	}
	out.Port = first
	return out
}

// pullState is the Store's pull machinery (embedded in Store).
type pullState struct {
	pulled      map[string]*pulled // name (the reference) → what was pulled
	pulls       singleflight.Group // namespace + reference → a pull
	layerFlight singleflight.Group // diff id → a download
	transport   http.RoundTripper
	layerSizes  map[string]int64 // diff id → bytes, for Sweep (guarded by mu)
	recordM     sync.Mutex       // serialises the pull records' read-merge-write
}

// pulledName reports whether name is a pulled image: Import refuses it,
// so an import cannot change what a reference's digest record says.
func (s *Store) pulledName(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.pulled[name]
	return ok
}
