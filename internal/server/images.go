package server

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/hostnet"
	"github.com/berth-dev/berth/internal/image"
	"github.com/berth-dev/berth/internal/secrets"
	"github.com/berth-dev/berth/internal/store"
	"github.com/berth-dev/berth/internal/vm"
)

// DefaultImageBudget is the bytes POST /images/sweep trims the image
// store to when Options.ImageBudget is zero: 20 GiB.
const DefaultImageBudget = 20 << 30

// openImages opens the local image store in <data-dir>/images. What uses
// an image is asked of the registry (deployments whose vm.image it is)
// once it exists. Pulls use the namespaces' registry credentials
// (registryAuth) and the operator's CA file and insecure hosts.
func (s *Server) openImages(ctx context.Context, st Store) (*image.Store, error) {
	ro := image.RegistryOptions{Insecure: s.o.RegistryAllowInsecure, Auth: s.registryAuth(st)}
	if f := s.o.RegistryCAFile; f != "" {
		pem, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("registry CA file: %w", err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("registry CA file %s: no PEM certificate in it", f)
		}
		ro.RootCAs = pool
	}
	return image.New(ctx, image.Options{
		Dir: filepath.Join(s.o.DataDir, "images"), Catalog: st, Log: s.log,
		InUse: s.imageUsers, Registry: ro,
	})
}

// registryAuth reads a namespace's credentials for a registry host: the
// secret its registry-credentials mapping names (PUT
// /namespaces/{ns}/registry-credentials/{host}), whose keys are username
// and password, or a docker config.json (.dockerconfigjson or
// config.json). No mapping means anonymous.
func (s *Server) registryAuth(st Store) func(ctx context.Context, ns, host string) (authn.Authenticator, error) {
	return func(ctx context.Context, ns, host string) (authn.Authenticator, error) {
		c, err := st.RegistryCredential(ctx, ns, host)
		if errors.Is(err, store.ErrNotFound) && host == dockerHubHost {
			// Docker Hub's references say docker.io; its API host is
			// index.docker.io. A mapping may name either.
			c, err = st.RegistryCredential(ctx, ns, "docker.io")
		}
		if errors.Is(err, store.ErrNotFound) {
			return authn.Anonymous, nil
		}
		if err != nil {
			return nil, err
		}
		if s.secrets == nil {
			return nil, errors.New("the secret store is not running")
		}
		if u, err := s.secrets.Value(ctx, ns, c.Secret, "username"); err == nil {
			p, err := s.secrets.Value(ctx, ns, c.Secret, "password")
			if err != nil {
				return nil, err
			}
			return &authn.Basic{Username: u, Password: p}, nil
		}
		for _, key := range []string{".dockerconfigjson", "config.json"} {
			if cfg, err := s.secrets.Value(ctx, ns, c.Secret, key); err == nil {
				return dockerConfigAuth(cfg, host)
			}
		}
		return nil, fmt.Errorf("secret %q has neither username/password nor .dockerconfigjson/config.json", c.Secret)
	}
}

// dockerHubHost is the registry host go-containerregistry names for
// docker.io references.
const dockerHubHost = "index.docker.io"

// dockerConfigAuth picks host's entry of a docker config.json.
func dockerConfigAuth(cfg, host string) (authn.Authenticator, error) {
	var dc struct {
		Auths map[string]struct {
			Auth, Username, Password, IdentityToken string
		} `json:"auths"`
	}
	if err := json.Unmarshal([]byte(cfg), &dc); err != nil {
		return nil, fmt.Errorf("docker config.json: %w", err)
	}
	keys := []string{host, "https://" + host, "http://" + host, "https://" + host + "/v1/"}
	if host == dockerHubHost {
		keys = append(keys, "docker.io", "https://index.docker.io/v1/")
	}
	for _, k := range keys {
		a, ok := dc.Auths[k]
		if !ok {
			continue
		}
		if a.Auth != "" {
			b, err := base64.StdEncoding.DecodeString(a.Auth)
			if err != nil {
				return nil, fmt.Errorf("docker config.json: auths[%q].auth: %w", k, err)
			}
			u, p, _ := strings.Cut(string(b), ":")
			return &authn.Basic{Username: u, Password: p}, nil
		}
		if a.IdentityToken != "" {
			return authn.FromConfig(authn.AuthConfig{IdentityToken: a.IdentityToken}), nil
		}
		return &authn.Basic{Username: a.Username, Password: a.Password}, nil
	}
	return authn.Anonymous, nil
}

// imagePreparer readies vm deployments' images for the registry
// (registry.ImagePreparer).
type imagePreparer struct {
	s   *Server
	log *slog.Logger

	mu      sync.Mutex
	started map[string]bool // namespace + reference: prefetches running
}

// Prepare pulls a registry reference the namespace cannot use yet (the
// replica's cold start waits for it: the pull phase) and fills the image's
// run defaults (a pulled or built image's) into what the spec leaves
// empty — spec values win. The image config's user (berth's specs have
// none of their own) becomes sp.User, resolved against the image's own
// /etc/passwd and /etc/group, with HOME from its entry unless the image
// or the spec sets one; a user the image does not define refuses the
// create.
func (p *imagePreparer) Prepare(ctx context.Context, ns string, sp *vm.Spec) error {
	return p.prepare(ctx, ns, sp, true)
}

func (p *imagePreparer) prepare(ctx context.Context, ns string, sp *vm.Spec, withUser bool) error {
	im, ns := p.s.images, secrets.Namespace(ns)
	if im == nil {
		return nil
	}
	if image.IsReference(sp.Image) && !im.Usable(sp.Image, ns) {
		if _, err := im.Pull(ctx, sp.Image, ns); err != nil {
			return err
		}
	}
	c, ok := im.Config(sp.Image)
	if !ok {
		return nil
	}
	if sp.Command == "" {
		sp.Command = c.Command()
		if sp.WorkDir == "" {
			sp.WorkDir = c.WorkDir
		}
	}
	if len(c.Env) > 0 {
		env := maps.Clone(c.Env)
		maps.Copy(env, sp.Env)
		sp.Env = env
	}
	if sp.Port == 0 {
		sp.Port = c.Port
	}
	if withUser && c.User != "" && sp.User == nil {
		root, err := im.Rootfs(sp.Image)
		if err != nil {
			return err
		}
		u, err := image.ResolveUser(root, c.User)
		if err != nil {
			return fmt.Errorf("image %q: its config's %w", sp.Image, err)
		}
		if !u.Root() {
			sp.User = &vm.User{UID: u.UID, GID: u.GID, Groups: u.Groups}
			if sp.WorkDir == "" && sp.Workspace == "" {
				// As a container engine runs an image with no WORKDIR:
				// in /, not in the VM drivers' default /root, which the
				// user may not enter.
				sp.WorkDir = "/"
			}
		}
		if _, set := sp.Env["HOME"]; !set && u.Home != "" {
			env := maps.Clone(sp.Env)
			if env == nil {
				env = map[string]string{}
			}
			env["HOME"] = u.Home
			sp.Env = env
		}
	}
	return nil
}

// prepareComputer is Prepare for a Computer's sandbox: the image is pulled
// the same way, but of its run defaults only the environment is taken —
// a Computer runs berth's agent with its workspace as the working
// directory, never the image's command, and as root, not the image's
// user.
func (p *imagePreparer) prepareComputer(ctx context.Context, ns string, sp *vm.Spec) error {
	cp := *sp
	if err := p.prepare(ctx, ns, &cp, false); err != nil {
		return err
	}
	sp.Env = cp.Env
	return nil
}

// prefetchTimeout bounds a background pull (Pull has its own bound too).
const prefetchTimeout = 30 * time.Minute

// Prefetch starts pulling a deployment's registry reference in the
// background when it is written, so its first request does not wait for
// the pull; a failure is logged, and the first create pulls again.
func (p *imagePreparer) Prefetch(ns, ref string) {
	im, ns := p.s.images, secrets.Namespace(ns)
	if im == nil || !image.IsReference(ref) || im.Usable(ref, ns) {
		return
	}
	key := ns + "\x00" + ref
	p.mu.Lock()
	if p.started[key] {
		p.mu.Unlock()
		return
	}
	p.started[key] = true
	p.mu.Unlock()
	go func() {
		defer func() { p.mu.Lock(); delete(p.started, key); p.mu.Unlock() }()
		ctx, cancel := context.WithTimeout(context.Background(), prefetchTimeout)
		defer cancel()
		if _, err := im.Pull(ctx, ref, ns); err != nil {
			p.log.Warn("image prefetch failed; the first replica start pulls again", "image", ref, "namespace", ns, "err", err)
		}
	}()
}

// imageExists is spec validation's test of vm.image: a local image must
// be imported; a registry reference is accepted before it is pulled (its
// pull starts at once, Prefetch).
func (s *Server) imageExists(name string) bool {
	return image.IsReference(name) && image.ValidName(name) || s.images.Exists(name)
}

// imageUsers lists the deployments whose vm.image is name.
func (s *Server) imageUsers(name string) []image.Reference {
	if s.registry == nil {
		return nil
	}
	var refs []image.Reference
	for _, e := range s.registry.List() {
		if e.Spec.VM != nil && e.Spec.VM.Image == name {
			refs = append(refs, image.Reference{Kind: "deployment", ID: e.Spec.ID})
		}
	}
	return refs
}

// guestNetwork returns the host's guest network (hostnet) for the isolating
// drivers, as cfg configures it (Options.GuestNetwork), or nil with the
// reason logged when the host is not prepared: the server does not change
// the host's interfaces or rules; `berth host setup` does, and berth serve
// as root before New (hostcheck.ServeSetup).
func guestNetwork(ctx context.Context, cfg hostnet.Config, log *slog.Logger) *hostnet.Network {
	if err := hostnet.Check(ctx, cfg); err != nil {
		log.Info("guest network unavailable; run berth host setup", "why", err)
		return nil
	}
	n, err := hostnet.New(cfg)
	if err != nil {
		log.Warn("guest network disabled", "err", err)
		return nil
	}
	return n
}

func imageBudget(o Options) int64 {
	if o.ImageBudget > 0 {
		return o.ImageBudget
	}
	return DefaultImageBudget
}

// registryCreds answers the admin API's registry-credentials routes from
// the store (admin.RegistryCredentials).
type registryCreds struct{ st Store }

func (c registryCreds) List(ctx context.Context, ns string) ([]apitype.RegistryCredential, error) {
	list, err := c.st.RegistryCredentials(ctx, ns)
	out := make([]apitype.RegistryCredential, len(list))
	for i, x := range list {
		out[i] = apitype.RegistryCredential{Namespace: x.Namespace, Host: x.Host, Secret: x.Secret}
	}
	return out, err
}

func (c registryCreds) Put(ctx context.Context, x apitype.RegistryCredential) error {
	return c.st.PutRegistryCredential(ctx, store.RegistryCredential{Namespace: x.Namespace, Host: x.Host, Secret: x.Secret})
}

func (c registryCreds) Delete(ctx context.Context, ns, host string) (bool, error) {
	err := c.st.DeleteRegistryCredential(ctx, ns, host)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}
