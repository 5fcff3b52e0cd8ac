package workspace

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
)

// ArchiveOptions configure an Archive.
type ArchiveOptions struct {
	ID  string // the deployment
	Dir string // its workspace directory (archive/ under it)
	// Key is the archive's object key (vm.workspace_archive.s3_key) and
	// Size its size in bytes when the spec says (size_bytes; 0 unknown).
	Key  string
	Size int64
	// Fetch opens object key and returns its size.
	Fetch func(ctx context.Context, key string) (io.ReadCloser, int64, error)
	// Alive is as for Options.
	Alive func(ctx context.Context, id string) bool
}

// Archive seeds every replica of a deployment with vm.workspace_archive: a
// tarball (gzipped or not) unpacked into a fresh directory per replica at
// boot. Nothing is captured back; a retired replica's directory is
// removed. Its directories are archive/replicas/<id> (apart from a
// durable workspace's replicas/, so a deployment switching between the
// two never mistakes one kind for the other), and the tarball, downloaded
// once per key, archive/<sha256 of the key> (written to a temporary file,
// fsynced, renamed).
type Archive struct {
	o  ArchiveOptions
	mu sync.Mutex // one download at a time
}

// NewArchive returns the archive seeder of o.ID.
func NewArchive(o ArchiveOptions) (*Archive, error) {
	for _, d := range []string{filepath.Join(o.Dir, "archive", "replicas")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("workspace archive: %w", err)
		}
	}
	a := &Archive{o: o}
	// Directories of replicas that are gone (a crash before their
	// retire): removed now, before the pool creates any (with several
	// replicas creating at once, a seed cannot tell a gone replica from
	// one that has not started yet).
	if es, err := os.ReadDir(filepath.Join(o.Dir, "archive", "replicas")); err == nil {
		for _, e := range es {
			if o.Alive == nil || !o.Alive(context.Background(), e.Name()) {
				os.RemoveAll(a.Dir(e.Name()))
			}
		}
	}
	return a, nil
}

// Dir is replica id's directory.
func (a *Archive) Dir(id string) string { return filepath.Join(a.o.Dir, "archive", "replicas", id) }

func (a *Archive) file() string {
	sum := sha256.Sum256([]byte(a.o.Key))
	return filepath.Join(a.o.Dir, "archive", hex.EncodeToString(sum[:]))
}

// Seed unpacks the archive into replica id's new directory and returns it.
func (a *Archive) Seed(ctx context.Context, id string) (string, error) {
	if err := a.download(ctx); err != nil {
		return "", fmt.Errorf("vm.workspace_archive %q could not be fetched: %w", a.o.Key, err)
	}
	dir := a.Dir(id)
	os.RemoveAll(dir)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", err
	}
	f, err := os.Open(a.file())
	if err != nil {
		return "", err
	}
	defer f.Close()
	if err := ExtractArchive(f, dir); err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("vm.workspace_archive %q could not be unpacked: %w", a.o.Key, err)
	}
	return dir, nil
}

func (a *Archive) download(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if fi, err := os.Stat(a.file()); err == nil && (a.o.Size <= 0 || fi.Size() == a.o.Size) {
		return nil
	}
	rc, size, err := a.o.Fetch(ctx, a.o.Key)
	if err != nil {
		return err
	}
	defer rc.Close()
	if a.o.Size > 0 && size >= 0 && size != a.o.Size {
		return fmt.Errorf("the object has %d bytes, not the %d size_bytes says", size, a.o.Size)
	}
	tmp, err := os.CreateTemp(filepath.Dir(a.file()), "tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	n, err := io.Copy(tmp, rc)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if a.o.Size > 0 && n != a.o.Size {
		return fmt.Errorf("read %d bytes, not the %d size_bytes says", n, a.o.Size)
	}
	if err := os.Rename(tmp.Name(), a.file()); err != nil {
		return err
	}
	return syncDir(filepath.Dir(a.file()))
}

// Retired removes replica id's directory: nothing is captured back.
func (a *Archive) Retired(_ context.Context, id string) error { return os.RemoveAll(a.Dir(id)) }
