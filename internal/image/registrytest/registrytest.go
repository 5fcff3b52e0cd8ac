// Package registrytest runs Debian's docker-registry (the CNCF distribution
// registry) on a loopback port for tests, and builds and pushes images to
// it with go-containerregistry.
package registrytest

import (
	"archive/tar"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"io/fs"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/compression"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/crypto/bcrypt"
)

// Options configure a registry.
type Options struct {
	User, Password string // basic auth (htpasswd) when User is set
	TLS            bool   // serve HTTPS with a self-signed certificate for 127.0.0.1
}

// Registry is a running docker-registry.
type Registry struct {
	Host    string         // 127.0.0.1:port
	Dir     string         // its storage root
	CAs     *x509.CertPool // trusts its certificate (TLS)
	CAFile  string         // the certificate's PEM file (TLS)
	opts    Options
	cmd     *exec.Cmd
	logFile string
}

// Start runs a registry for the test, or skips the test when the
// docker-registry binary is not installed.
func Start(t testing.TB, o Options) *Registry {
	t.Helper()
	bin, err := exec.LookPath("docker-registry")
	if err != nil {
		t.Skip("docker-registry is not installed (Debian package docker-registry; scripts/test installs it)")
	}
	dir := t.TempDir()
	r := &Registry{Dir: filepath.Join(dir, "storage"), opts: o, logFile: filepath.Join(dir, "registry.log")}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.Host = l.Addr().String()
	l.Close()
	cfg := fmt.Sprintf("version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: %s\n  delete:\n    enabled: true\nhttp:\n  addr: %s\n  secret: berth-test\n", r.Dir, r.Host)
	if o.TLS {
		cert, key := selfSigned(t, dir)
		r.CAFile = cert
		pem, _ := os.ReadFile(cert)
		r.CAs = x509.NewCertPool()
		r.CAs.AppendCertsFromPEM(pem)
		cfg += fmt.Sprintf("  tls:\n    certificate: %s\n    key: %s\n", cert, key)
	}
	if o.User != "" {
		h, err := bcrypt.GenerateFromPassword([]byte(o.Password), bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		pw := filepath.Join(dir, "htpasswd")
		if err := os.WriteFile(pw, []byte(o.User+":"+string(h)+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg += fmt.Sprintf("auth:\n  htpasswd:\n    realm: berth-test\n    path: %s\n", pw)
	}
	cfgFile := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(r.logFile)
	if err != nil {
		t.Fatal(err)
	}
	r.cmd = exec.Command(bin, "serve", cfgFile)
	r.cmd.Stdout, r.cmd.Stderr = logf, logf
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Stop(); logf.Close() })
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", r.Host, time.Second)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(r.logFile)
			t.Fatalf("docker-registry did not listen on %s: %s", r.Host, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return r
}

// Stop ends the registry (idempotent): afterwards any request to it fails.
func (r *Registry) Stop() {
	if r.cmd != nil && r.cmd.Process != nil {
		r.cmd.Process.Kill()
		r.cmd.Wait()
		r.cmd = nil
	}
}

// Ref is the reference of repo:tag on this registry.
func (r *Registry) Ref(repoTag string) string { return r.Host + "/" + repoTag }

// Options are the go-containerregistry options to push to it.
func (r *Registry) Options() []remote.Option {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if r.CAs != nil {
		tr.TLSClientConfig = &tls.Config{RootCAs: r.CAs}
	}
	opts := []remote.Option{remote.WithTransport(tr)}
	if r.opts.User != "" {
		opts = append(opts, remote.WithAuth(&authn.Basic{Username: r.opts.User, Password: r.opts.Password}))
	}
	return opts
}

// Push writes img (an image or an index) under repo:tag and returns the
// reference.
func (r *Registry) Push(t testing.TB, repoTag string, img any) string {
	t.Helper()
	ref, err := name.ParseReference(r.Ref(repoTag))
	if err != nil {
		t.Fatal(err)
	}
	switch v := img.(type) {
	case v1.Image:
		err = remote.Write(ref, v, r.Options()...)
	case v1.ImageIndex:
		err = remote.WriteIndex(ref, v, r.Options()...)
	default:
		t.Fatalf("Push: %T is neither an image nor an index", img)
	}
	if err != nil {
		t.Fatalf("pushing %s: %v", ref, err)
	}
	return ref.String()
}

// BlobPath is the file of a blob in the registry's storage, for tests
// that corrupt it.
func (r *Registry) BlobPath(digest string) string {
	hex := strings.TrimPrefix(digest, "sha256:")
	return filepath.Join(r.Dir, "docker", "registry", "v2", "blobs", "sha256", hex[:2], hex, "data")
}

// Proxy forwards to a registry and counts the requests it forwards, so a
// test can assert that something sent none.
type Proxy struct {
	Host string // 127.0.0.1:port; reference images as Host + "/repo:tag"
	n    atomic.Int64
}

// Requests is how many requests the proxy has forwarded.
func (p *Proxy) Requests() int64 { return p.n.Load() }

// CountingProxy starts a Proxy to r (plain HTTP) for the test.
func (r *Registry) CountingProxy(t testing.TB) *Proxy {
	t.Helper()
	if r.opts.TLS {
		t.Fatal("CountingProxy: the registry serves TLS")
	}
	p := &Proxy{}
	rp := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: r.Host})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		p.n.Add(1)
		rp.ServeHTTP(w, req)
	}))
	t.Cleanup(srv.Close)
	p.Host = strings.TrimPrefix(srv.URL, "http://")
	return p
}

// File is one entry of a Layer: a regular file (Body), a directory (Dir),
// a symlink (Link) or a hard link (HardLink, its target's name).
type File struct {
	Name     string
	Body     []byte
	Mode     int64
	Dir      bool
	Link     string
	HardLink string
}

// Layer builds a gzipped layer of files.
func Layer(t testing.TB, files ...File) v1.Layer {
	t.Helper()
	return layer(t, files)
}

// ZstdLayer builds a zstd-compressed layer of files
// (application/vnd.oci.image.layer.v1.tar+zstd).
func ZstdLayer(t testing.TB, files ...File) v1.Layer {
	t.Helper()
	return layer(t, files, tarball.WithCompression(compression.ZStd), tarball.WithMediaType(types.OCILayerZStd))
}

func layer(t testing.TB, files []File, opts ...tarball.LayerOption) v1.Layer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{Name: f.Name, Mode: f.Mode, ModTime: time.Unix(1700000000, 0)}
		switch {
		case f.Dir:
			h.Typeflag = tar.TypeDir
			if h.Mode == 0 {
				h.Mode = 0o755
			}
		case f.Link != "":
			h.Typeflag, h.Linkname, h.Mode = tar.TypeSymlink, f.Link, 0o777
		case f.HardLink != "":
			h.Typeflag, h.Linkname = tar.TypeLink, f.HardLink
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.Body))
			if h.Mode == 0 {
				h.Mode = 0o644
			}
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(f.Body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// DirLayer is a layer of the tree at dir: its directories, regular files
// and symbolic links, with their modes (a root file system a test made,
// such as vmtest.BusyboxRoot's).
func DirLayer(t testing.TB, dir string) v1.Layer {
	t.Helper()
	var files []File
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		mode := int64(fi.Mode().Perm())
		if fi.Mode()&fs.ModeSticky != 0 {
			mode |= 0o1000
		}
		switch {
		case d.IsDir():
			files = append(files, File{Name: rel + "/", Dir: true, Mode: mode})
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			files = append(files, File{Name: rel, Link: target})
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			files = append(files, File{Name: rel, Body: b, Mode: mode})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return Layer(t, files...)
}

// BusyboxLayer is a layer with /bin/busybox (Debian's busybox-static),
// /bin/sh linked to it, /etc/passwd and the usual mount points; the test
// skips when busybox is missing.
func BusyboxLayer(t testing.TB) v1.Layer {
	t.Helper()
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Skip("needs /bin/busybox (Debian package busybox-static)")
	}
	// The mount points a container runtime and berth's agent expect.
	files := []File{}
	for _, d := range []string{"bin", "etc", "proc", "sys", "dev", "run", "root"} {
		files = append(files, File{Name: d + "/", Dir: true})
	}
	return Layer(t, append(files,
		File{Name: "tmp/", Dir: true, Mode: 0o1777},
		File{Name: "bin/busybox", Body: bb, Mode: 0o755},
		File{Name: "bin/sh", Link: "busybox"},
		File{Name: "etc/passwd", Body: []byte("root:x:0:0:root:/root:/bin/sh\n")},
	)...)
}

// Image is an image of layers (bottom first) with cfg as its config.
func Image(t testing.TB, cfg v1.Config, layers ...v1.Layer) v1.Image {
	t.Helper()
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.Config, cf.OS, cf.Architecture = cfg, "linux", "amd64"
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// ForPlatform is one image of an Index.
type ForPlatform struct {
	OS, Arch string
	Image    v1.Image
}

// Index is a multi-arch index of images, each for its platform.
func Index(imgs ...ForPlatform) v1.ImageIndex {
	var idx v1.ImageIndex = empty.Index
	for _, fp := range imgs {
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: fp.Image, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: fp.OS, Architecture: fp.Arch}}})
	}
	return idx
}

func selfSigned(t testing.TB, dir string) (certFile, keyFile string) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "berth test registry"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	return certFile, keyFile
}
