package image

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/berth-dev/berth/internal/mountinfo"
)

// mountedTrees returns the digests of the trees that a mount of this
// host's mount namespace uses as a lower layer (the container driver's
// overlays over Rootfs), each with the mount point: a replica runs on
// them, so they must not be removed whatever the catalog says (a rollout's
// old replicas use the image the deployment no longer names). A host
// without /proc/self/mountinfo reports none.
func (s *Store) mountedTrees() map[string]string {
	ms, err := mountinfo.Read()
	if err != nil {
		s.log.Warn("image: cannot read the mounts; trees are kept as if mounted", "err", err)
		return map[string]string{unknownMounts: ""}
	}
	prefix := filepath.Join(s.dir, "sha256") + "/"
	out := map[string]string{}
	for _, m := range ms {
		low, ok := m.Option("lowerdir")
		if !ok || isSpare(m.Point) {
			continue
		}
		for _, p := range strings.Split(low, ":") {
			rest, ok := strings.CutPrefix(p, prefix)
			if !ok {
				continue
			}
			hex, _, _ := strings.Cut(rest, "/")
			if validDigest(DigestPrefix + hex) {
				out[DigestPrefix+hex] = m.Point
			}
		}
	}
	return out
}

// isSpare reports whether the mount point is a spare container's root (the
// container driver's <dir>/.spare-<hex>/rootfs): a sandbox made ahead for
// a replica that has not asked for it. It does not keep its image, or an
// unused image could never be deleted while the driver keeps spares of
// it; the driver hands a spare only to a replica of the same tree path,
// so one over a removed tree waits for the driver to drop it (unless the
// same content is imported again before that).
func isSpare(point string) bool {
	return strings.HasPrefix(filepath.Base(filepath.Dir(point)), ".")
}

// unknownMounts is mountedTrees' key when the mounts could not be read:
// every tree counts as mounted.
const unknownMounts = "*"

// mountOf reports whether the tree digest is mounted according to m (from
// mountedTrees), and where.
func mountOf(m map[string]string, digest string) (string, bool) {
	if _, unknown := m[unknownMounts]; unknown {
		return "", true
	}
	p, ok := m[digest]
	return p, ok
}

// mountUsers are the replicas whose mounts use the tree of digest, as
// References (kind "replica", the id the replica's directory is named).
func (s *Store) mountUsers(digest string) []Reference {
	point, ok := mountOf(s.mountedTrees(), digest)
	switch {
	case !ok:
		return nil
	case point == "":
		return []Reference{{Kind: "replica", ID: "unknown (the host's mounts could not be read)"}}
	}
	return []Reference{{Kind: "replica", ID: filepath.Base(filepath.Dir(point))}}
}

// exclusiveBytes is the bytes of the regular files under dir that removing
// dir frees: a file whose every hard link is inside dir. A pulled image's
// tree is hard links to its layers, so its files count with the layer
// that holds them, once the last tree linking them is gone.
func exclusiveBytes(dir string) int64 {
	type file struct {
		links, seen uint64
		size        int64
	}
	files := map[uint64]*file{}
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		ino, links := inode(fi)
		if links <= 1 {
			n += fi.Size()
			return nil
		}
		f := files[ino]
		if f == nil {
			f = &file{links: links, size: fi.Size()}
			files[ino] = f
		}
		f.seen++
		return nil
	})
	for _, f := range files {
		if f.seen >= f.links {
			n += f.size
		}
	}
	return n
}

// removeTree moves dir out of the way (into tmp, as gc-<name>) and removes
// it, returning the bytes freed; a dir already gone frees nothing.
func (s *Store) removeTree(dir, name string) (int64, error) {
	freed := exclusiveBytes(dir)
	gone := filepath.Join(s.dir, "tmp", "gc-"+name)
	if err := os.Rename(dir, gone); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return 0, nil
		}
		return 0, err
	}
	return freed, os.RemoveAll(gone)
}

// collectOrphans removes the trees in <Dir>/sha256 that no image record
// names (what a crash between a tree's move into place and its record
// left, or a pull whose record was refused) and no mount uses. Callers
// hold importM, under which every tree is moved into place and recorded.
func (s *Store) collectOrphans(ctx context.Context) (freed int64, removed int) {
	list, err := s.cat.Images(ctx)
	if err != nil {
		s.log.Warn("image: cannot list images to find unused trees", "err", err)
		return 0, 0
	}
	named := map[string]bool{}
	for _, im := range list {
		named[im.Digest] = true
	}
	s.mu.Lock()
	for _, d := range s.digests {
		named[d] = true
	}
	s.mu.Unlock()
	ents, err := os.ReadDir(filepath.Join(s.dir, "sha256"))
	if err != nil {
		return 0, 0
	}
	var mounted map[string]string
	for _, e := range ents {
		d := DigestPrefix + e.Name()
		if !validDigest(d) || named[d] {
			continue
		}
		if mounted == nil {
			mounted = s.mountedTrees()
		}
		if _, ok := mountOf(mounted, d); ok {
			continue
		}
		n, err := s.removeTree(s.treeDir(d), "orphan-"+e.Name())
		if err != nil {
			s.log.Warn("image: cannot remove a tree no image names", "digest", d, "err", err)
			continue
		}
		s.log.Info("image: removed a tree no image names", "digest", d, "bytes", n)
		freed += n
		removed++
	}
	return freed, removed
}
