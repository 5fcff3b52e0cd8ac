// Package image is berth's local image store: root filesystems that the
// isolating drivers boot replicas from. An image is imported once, from a
// directory or a tarball, under a name (`berth image import NAME
// DIR|TARBALL`, POST /images); its tree is kept content-addressed, so two
// names with the same content share one copy on disk:
//
//	<Dir>/sha256/<hex>/rootfs/          the tree, read-only by convention
//	<Dir>/sha256/<hex>/disk-<N>g.ext4   a bootable ext4 disk of N GiB, made
//	                                    once by Ext4 (mkfs.ext4 -d) and cached
//	<Dir>/layers/sha256/<diffid>/       a pulled image's layer, unpacked
//	                                    (whiteouts kept); shared by every
//	                                    image that has it
//	<Dir>/tmp/                          imports and downloads in progress
//
// An image may also be pulled from an OCI registry under its reference
// (Pull, IsReference): its layers are verified and kept in the layer
// store, and its tree is made of hard links to them (flatten), so the
// drivers see a pulled image exactly as an imported one.
//
// An imported image's digest is SHA-256 over a canonical walk of its tree
// (see Digest). A pulled image's is SHA-256 over its diff ids, bottom
// first (pulledTreeDigest): its tree is made of those verified layers
// alone, so the chain names the content without reading it again, and
// references with the same layers share one tree; a pulled tree and an
// imported one never share a directory. A pulled image's layers and tree
// are durable (syncfs) before the catalog records it. The
// names, digests, sizes and pins are kept in the store (package store); the
// store also keeps a name → digest map in memory, so Rootfs and Exists,
// which replica starts and spec validation call, never touch the disk or
// the database.
//
// An image that a deployment names cannot be deleted or re-imported with
// other content (ErrInUse, HTTP 409), nor can a pinned one be deleted
// (ErrPinned). Who uses an image is asked of Options.InUse, which the
// server answers from its deployments.
package image

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/berth-dev/berth/internal/store"
)

// Errors the store returns (wrapped).
var (
	ErrNotFound  = errors.New("image: no such image")
	ErrInUse     = errors.New("image: in use")
	ErrPinned    = errors.New("image: pinned")
	ErrBadName   = errors.New("image: bad name")
	ErrBadSource = errors.New("image: bad source")
)

// Reference is something that uses an image, e.g. {"deployment", "web"}.
type Reference struct {
	Kind string `json:"kind"`
	ID   string `json:"id"`
}

// InUseError is why an image cannot be deleted or replaced: the things
// that use it. It wraps ErrInUse.
type InUseError struct {
	Name       string
	References []Reference
}

func (e *InUseError) Error() string {
	ids := make([]string, len(e.References))
	for i, r := range e.References {
		ids[i] = r.Kind + " " + r.ID
	}
	return fmt.Sprintf("image %q is in use by %s", e.Name, strings.Join(ids, ", "))
}

// Unwrap makes errors.Is(err, ErrInUse) hold.
func (e *InUseError) Unwrap() error { return ErrInUse }

// Catalog is where image metadata lives; *store.Store is one.
type Catalog interface {
	Images(ctx context.Context) ([]store.Image, error)
	Image(ctx context.Context, name string) (store.Image, error)
	PutImage(ctx context.Context, im store.Image, keepPinned bool) (store.Image, error)
	PinImage(ctx context.Context, name string, pinned bool) error
	DeleteImage(ctx context.Context, name string) (digest string, shared bool, err error)
}

// Options configure a Store.
type Options struct {
	Dir     string  // e.g. <data-dir>/images; created 0700. Required.
	Catalog Catalog // required
	// InUse lists what uses the image name (deployments whose vm.image
	// it is). Nil means nothing does.
	InUse func(name string) []Reference
	Log   *slog.Logger
	// Registry configures pulls (Pull); the zero value pulls anonymously
	// from public registries only.
	Registry RegistryOptions
}

// Image is one named image.
type Image struct {
	Name       string
	Digest     string
	Size       int64 // bytes of regular file contents
	Pinned     bool
	Source     string
	CreatedAt  time.Time
	References []Reference // filled by List and Get
}

// Store is the local image store. It is safe for concurrent use.
type Store struct {
	dir string
	cat Catalog
	o   Options
	log *slog.Logger

	mu      sync.Mutex
	digests map[string]string // name → digest
	sizes   map[string]int64  // name → bytes of content
	importM sync.Mutex        // serialises imports and deletes (tree GC)
	disks   map[string]*sync.Mutex
	built   map[string]Config // name → run defaults of a built image (ImportBuilt)
	pullState
}

// New opens the store in o.Dir and loads the name → digest map.
func New(ctx context.Context, o Options) (*Store, error) {
	if o.Dir == "" || o.Catalog == nil {
		return nil, errors.New("image: Options.Dir and Options.Catalog are required")
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	for _, d := range []string{dir, filepath.Join(dir, "sha256"), filepath.Join(dir, "tmp")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("image: %w", err)
		}
	}
	// Imports a crashed berth left half done.
	if ents, err := os.ReadDir(filepath.Join(dir, "tmp")); err == nil {
		for _, e := range ents {
			os.RemoveAll(filepath.Join(dir, "tmp", e.Name()))
		}
	}
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Store{dir: dir, cat: o.Catalog, o: o, log: log, digests: map[string]string{}, sizes: map[string]int64{}, disks: map[string]*sync.Mutex{}}
	s.pulled, s.layerSizes, s.built = map[string]*pulled{}, map[string]int64{}, map[string]Config{}
	if err := s.loadBuilt(ctx); err != nil {
		return nil, err
	}
	s.transport = registryTransport(o.Registry.RootCAs, o.Registry.Insecure)
	if err := s.loadPulled(ctx); err != nil {
		return nil, err
	}
	list, err := o.Catalog.Images(ctx)
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	for _, im := range list {
		if _, err := os.Stat(s.treeDir(im.Digest)); err != nil {
			log.Warn("image: the tree of an image is missing; re-import it", "image", im.Name, "digest", im.Digest, "err", err)
		}
		s.digests[im.Name], s.sizes[im.Name] = im.Digest, im.Size
	}
	return s, nil
}

// Dir is the store's directory.
func (s *Store) Dir() string { return s.dir }

// maxName bounds an image name.
const maxName = 128

// maxRef bounds a registry reference (a repository path, a tag and a
// digest).
const maxRef = 512

// ValidName reports whether name can name an image: 1 to 128 characters of
// letters, digits and . _ - : /, starting with a letter or digit, without
// "..". Names never become paths (trees are stored by digest); the rule
// keeps them readable in URLs and shells.
//
// A registry reference (IsReference) may be up to 512 characters and hold
// one "@" (a digest); its syntax is checked when it is pulled.
func ValidName(name string) bool {
	limit, extra := maxName, ""
	if IsReference(name) {
		limit, extra = maxRef, "@"
	}
	if name == "" || len(name) > limit || strings.Contains(name, "..") || strings.Count(name, "@") > 1 {
		return false
	}
	for i, c := range name {
		alnum := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
		if !alnum && (i == 0 || !strings.ContainsRune("._-:/"+extra, c)) {
			return false
		}
	}
	return true
}

func checkName(name string) error {
	if !ValidName(name) {
		return fmt.Errorf("%w %q: use 1-%d letters, digits and . _ - : /, starting with a letter or digit", ErrBadName, name, maxName)
	}
	return nil
}

// checkImport is checkName for an import, which may not replace a pulled
// image (pull it again, or delete it first).
func (s *Store) checkImport(name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	if s.pulledName(name) {
		return fmt.Errorf("%w %q: it was pulled from its registry; delete it before importing under that name", ErrBadName, name)
	}
	return nil
}

// treeDir is the directory of a digest: <Dir>/sha256/<hex>.
func (s *Store) treeDir(digest string) string {
	return filepath.Join(s.dir, "sha256", strings.TrimPrefix(digest, DigestPrefix))
}

// validDigest reports whether d is "sha256:" and 64 lowercase hex digits.
func validDigest(d string) bool {
	hex, ok := strings.CutPrefix(d, DigestPrefix)
	if !ok || len(hex) != 64 {
		return false
	}
	for _, c := range hex {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// Import imports the directory or tarball (.tar, optionally gzipped) at the
// host path src under name. Importing the same content again is a no-op
// that keeps the name's pin; other content replaces the name's tree unless
// something uses the name (ErrInUse).
func (s *Store) Import(ctx context.Context, name, src string) (Image, error) {
	im, err := s.importPlain(ctx, name, src)
	if err == nil {
		s.forgetBuilt(ctx, name)
	}
	return im, err
}

func (s *Store) importPlain(ctx context.Context, name, src string) (Image, error) {
	if err := s.checkImport(name); err != nil {
		return Image{}, err
	}
	fi, err := os.Stat(src)
	if err != nil {
		return Image{}, fmt.Errorf("%w: %w", ErrBadSource, err)
	}
	abs, _ := filepath.Abs(src)
	if fi.IsDir() {
		return s.importWith(ctx, name, abs, func(dst string) error { return copyTree(src, dst) })
	}
	if !fi.Mode().IsRegular() {
		return Image{}, fmt.Errorf("%w: %s is neither a directory nor a tarball", ErrBadSource, src)
	}
	f, err := os.Open(src)
	if err != nil {
		return Image{}, fmt.Errorf("%w: %w", ErrBadSource, err)
	}
	defer f.Close()
	return s.importWith(ctx, name, abs, func(dst string) error { return unpackTar(ctx, f, dst) })
}

// ImportTar imports a tar stream (optionally gzipped) under name; source is
// recorded as where it came from (e.g. "upload").
func (s *Store) ImportTar(ctx context.Context, name string, r io.Reader, source string) (Image, error) {
	if err := s.checkImport(name); err != nil {
		return Image{}, err
	}
	im, err := s.importWith(ctx, name, source, func(dst string) error { return unpackTar(ctx, r, dst) })
	if err == nil {
		s.forgetBuilt(ctx, name)
	}
	return im, err
}

// importWith fills a fresh temporary tree with fill, digests it, and moves
// it into place unless its digest is already stored.
func (s *Store) importWith(ctx context.Context, name, source string, fill func(dst string) error) (Image, error) {
	tmp, err := os.MkdirTemp(filepath.Join(s.dir, "tmp"), "import-")
	if err != nil {
		return Image{}, fmt.Errorf("image: import %q: %w", name, err)
	}
	defer os.RemoveAll(tmp)
	rootfs := filepath.Join(tmp, "rootfs")
	if err := os.Mkdir(rootfs, 0o755); err != nil {
		return Image{}, fmt.Errorf("image: import %q: %w", name, err)
	}
	if err := fill(rootfs); err != nil {
		return Image{}, fmt.Errorf("%w: import %q: %w", ErrBadSource, name, err)
	}
	if err := ctx.Err(); err != nil {
		return Image{}, err
	}
	digest, size, err := Digest(rootfs)
	if err != nil {
		return Image{}, err
	}

	s.importM.Lock()
	defer s.importM.Unlock()
	s.mu.Lock()
	old, had := s.digests[name]
	s.mu.Unlock()
	if had && old != digest {
		if refs := s.users(name); len(refs) > 0 {
			return Image{}, &InUseError{Name: name, References: refs}
		}
	}
	dst := s.treeDir(digest)
	if _, err := os.Stat(dst); errors.Is(err, fs.ErrNotExist) {
		if err := os.Rename(tmp, dst); err != nil {
			return Image{}, fmt.Errorf("image: import %q: %w", name, err)
		}
		// The tree is in place; what is left at tmp (nothing) goes.
	} else if err != nil {
		return Image{}, fmt.Errorf("image: import %q: %w", name, err)
	}
	os.Chmod(dst, 0o755)
	im, err := s.record(ctx, name, digest, size, source, old, had)
	if err != nil {
		return Image{}, fmt.Errorf("image: import %q: %w", name, err)
	}
	s.log.Info("image imported", "image", name, "digest", digest, "bytes", size)
	return im, nil
}

// record names the tree digest (already in place) name in the catalog and
// the in-memory map, and collects the tree name had before (old, when had)
// if it changed. Imports and pulls both end with it; the caller holds
// importM.
func (s *Store) record(ctx context.Context, name, digest string, size int64, source, old string, had bool) (Image, error) {
	im, err := s.cat.PutImage(ctx, store.Image{Name: name, Digest: digest, Size: size, Source: source}, true)
	if err != nil {
		return Image{}, err
	}
	s.mu.Lock()
	s.digests[name], s.sizes[name] = digest, size
	s.mu.Unlock()
	if had && old != digest {
		s.collect(ctx, old)
	}
	return fromStore(im, nil), nil
}

// collect removes the tree of a digest no name refers to any more, and
// returns the bytes that freed; a tree a mount uses (mountedTrees) stays,
// for the next sweep to take once its replicas are gone.
func (s *Store) collect(ctx context.Context, digest string) int64 {
	s.mu.Lock()
	for _, d := range s.digests {
		if d == digest {
			s.mu.Unlock()
			return 0
		}
	}
	s.mu.Unlock()
	if !validDigest(digest) {
		return 0
	}
	if _, ok := mountOf(s.mountedTrees(), digest); ok {
		s.log.Info("image: an unused tree is still mounted by a replica; a later sweep removes it", "digest", digest)
		return 0
	}
	n, err := s.removeTree(s.treeDir(digest), strings.TrimPrefix(digest, DigestPrefix))
	if err != nil {
		s.log.Warn("image: cannot remove an unused tree", "digest", digest, "err", err)
	}
	return n
}

func (s *Store) users(name string) []Reference {
	if s.o.InUse == nil {
		return nil
	}
	return s.o.InUse(name)
}

func fromStore(im store.Image, refs []Reference) Image {
	if refs == nil {
		refs = []Reference{}
	}
	return Image{
		Name: im.Name, Digest: im.Digest, Size: im.Size, Pinned: im.Pinned,
		Source: im.Source, CreatedAt: im.CreatedAt, References: refs,
	}
}

// List returns every image with what uses it, sorted by name.
func (s *Store) List(ctx context.Context) ([]Image, error) {
	list, err := s.cat.Images(ctx)
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	out := make([]Image, len(list))
	for i, im := range list {
		out[i] = fromStore(im, s.users(im.Name))
	}
	return out, nil
}

// Get returns one image with what uses it.
func (s *Store) Get(ctx context.Context, name string) (Image, error) {
	im, err := s.cat.Image(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return Image{}, fmt.Errorf("%w %q", ErrNotFound, name)
	}
	if err != nil {
		return Image{}, fmt.Errorf("image: %w", err)
	}
	return fromStore(im, s.users(name)), nil
}

// Exists reports whether an image of that name is stored. It reads memory
// only, so spec validation may call it under its own locks.
func (s *Store) Exists(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.digests[name]
	return ok
}

// Pin sets or clears an image's pin. A pinned image cannot be deleted.
func (s *Store) Pin(ctx context.Context, name string, pinned bool) (Image, error) {
	err := s.cat.PinImage(ctx, name, pinned)
	if errors.Is(err, store.ErrNotFound) {
		return Image{}, fmt.Errorf("%w %q", ErrNotFound, name)
	}
	if err != nil {
		return Image{}, fmt.Errorf("image: %w", err)
	}
	return s.Get(ctx, name)
}

// Delete removes an image's name, and its tree and disks once no other
// name shares them. It refuses a pinned image (ErrPinned) and one that is
// in use (an *InUseError): by what Options.InUse names, or, when its tree
// would go, by a replica whose root file system is mounted on it.
func (s *Store) Delete(ctx context.Context, name string) error {
	_, err := s.delete(ctx, name)
	return err
}

// delete is Delete, returning the bytes freed (its tree, unless shared,
// and the layers no other image uses).
func (s *Store) delete(ctx context.Context, name string) (int64, error) {
	s.importM.Lock()
	defer s.importM.Unlock()
	im, err := s.Get(ctx, name)
	if err != nil {
		return 0, err
	}
	if im.Pinned {
		return 0, fmt.Errorf("%w: image %q is pinned; unpin it first", ErrPinned, name)
	}
	if len(im.References) > 0 {
		return 0, &InUseError{Name: name, References: im.References}
	}
	if !s.sharedTree(name, im.Digest) {
		if refs := s.mountUsers(im.Digest); len(refs) > 0 {
			return 0, &InUseError{Name: name, References: refs}
		}
	}
	digest, shared, err := s.cat.DeleteImage(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return 0, fmt.Errorf("%w %q", ErrNotFound, name)
	}
	if err != nil {
		return 0, fmt.Errorf("image: %w", err)
	}
	s.mu.Lock()
	delete(s.digests, name)
	delete(s.sizes, name)
	s.mu.Unlock()
	var freed int64
	if !shared {
		freed += s.collect(ctx, digest)
	}
	s.forgetPulled(ctx, name)
	s.forgetBuilt(ctx, name)
	freed += s.collectLayers()
	s.log.Info("image deleted", "image", name, "digest", digest, "freed_bytes", freed)
	return freed, nil
}

// sharedTree reports whether a name other than name has the tree digest.
func (s *Store) sharedTree(name, digest string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for n, d := range s.digests {
		if n != name && d == digest {
			return true
		}
	}
	return false
}

// Rootfs returns the directory of an image's tree. Drivers must not write
// to it: the container driver mounts it as the read-only lower layer of
// an overlay.
func (s *Store) Rootfs(name string) (string, error) {
	s.mu.Lock()
	digest, ok := s.digests[name]
	s.mu.Unlock()
	if !ok {
		return "", fmt.Errorf("%w %q", ErrNotFound, name)
	}
	return filepath.Join(s.treeDir(digest), "rootfs"), nil
}

// DefaultDiskGB is the size of Ext4's disk when the caller asks for none
// and the image fits in it with room to spare.
const DefaultDiskGB = 1

// Ext4 returns a bootable ext4 disk image of the image's tree, sizeGB GiB
// large (0: DefaultDiskGB, or more when the tree needs it), made once with
// `mkfs.ext4 -d` and cached beside the tree. The file is sparse. Callers
// must not write to it: they copy it per replica (CloneFile).
func (s *Store) Ext4(name string, sizeGB int) (string, error) {
	if sizeGB < 0 {
		return "", fmt.Errorf("image: disk size %d GiB is negative", sizeGB)
	}
	s.mu.Lock()
	digest, ok := s.digests[name]
	size := s.sizes[name]
	s.mu.Unlock()
	if !ok {
		return "", fmt.Errorf("%w %q", ErrNotFound, name)
	}
	if need := int(size*2>>30) + 1; sizeGB == 0 {
		sizeGB = max(DefaultDiskGB, need)
	}
	disk := filepath.Join(s.treeDir(digest), "disk-"+strconv.Itoa(sizeGB)+"g.ext4")
	s.mu.Lock()
	lock := s.disks[disk]
	if lock == nil {
		lock = new(sync.Mutex)
		s.disks[disk] = lock
	}
	s.mu.Unlock()
	lock.Lock()
	defer lock.Unlock()
	if _, err := os.Stat(disk); err == nil {
		return disk, nil
	}
	mkfs, err := exec.LookPath("mkfs.ext4")
	if err != nil {
		return "", fmt.Errorf("image: making a disk needs mkfs.ext4 (Debian package e2fsprogs): %w", err)
	}
	tmp := disk + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return "", fmt.Errorf("image: %w", err)
	}
	err = f.Truncate(int64(sizeGB) << 30)
	f.Close()
	if err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("image: %w", err)
	}
	cmd := exec.Command(mkfs, "-q", "-F", "-t", "ext4", "-L", "berth-root", "-E", "root_owner=0:0", "-d", filepath.Join(s.treeDir(digest), "rootfs"), tmp)
	if out, err := cmd.CombinedOutput(); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("image: mkfs.ext4 for %q: %w: %s", name, err, strings.TrimSpace(string(out)))
	}
	if err := os.Rename(tmp, disk); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("image: %w", err)
	}
	return disk, nil
}

// CloneFile copies src to dst (created, or truncated), as a copy-on-write
// clone where the filesystem can (btrfs, XFS with reflink), else as a
// sparse copy that skips zero blocks, so a mostly empty disk image stays
// small.
func CloneFile(dst, src string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_RDWR|os.O_CREATE|os.O_TRUNC, fi.Mode().Perm())
	if err != nil {
		return err
	}
	if cloneFile(out, in) {
		return out.Close()
	}
	err = sparseCopy(out, in, fi.Size())
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(dst)
	}
	return err
}

// sparseCopy copies size bytes: only the data extents where the
// filesystem reports them (SEEK_DATA, SEEK_HOLE), and within them only
// blocks that are not all zeros.
func sparseCopy(out, in *os.File, size int64) error {
	buf := make([]byte, 1<<20)
	for off := int64(0); off < size; {
		start, end := dataExtent(in, off, size)
		if start >= size {
			break
		}
		for pos := start; pos < end; {
			n, err := in.ReadAt(buf[:min(int64(len(buf)), end-pos)], pos)
			if n > 0 && !allZero(buf[:n]) {
				if _, werr := out.WriteAt(buf[:n], pos); werr != nil {
					return werr
				}
			}
			pos += int64(n)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return err
			}
		}
		off = end
	}
	return out.Truncate(size)
}

var zeros = make([]byte, 1<<20)

func allZero(b []byte) bool { return bytes.Equal(b, zeros[:len(b)]) }
