package image

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/berth-dev/berth/internal/untar"
)

// The OCI whiteouts of a layer (untar.WhiteoutPrefix, untar.OpaqueMarker),
// kept as files when it was unpacked (untar.Options.Layer).
const (
	whiteoutPrefix = untar.WhiteoutPrefix
	opaqueMarker   = untar.OpaqueMarker
)

// flatten builds the image tree at dst (an empty directory) from the
// layers in the layer store, bottom first, with OCI whiteout semantics.
// Every file is a hard link to the layer store's copy (same filesystem:
// both are under Dir), so an image costs its directories only, and the
// drivers see one ordinary tree — the container driver's overlay takes it
// as its one lowerdir, the VM drivers' mkfs.ext4 -d reads it as it reads
// an imported image. The tree is never written (Rootfs), so the shared
// inodes are never written either.
//
// The directories walked in dst are made real directories before they
// are entered (a symlink or file an earlier layer left is replaced, as
// overlayfs and docker do), so no link is made through a symlink and
// nothing leaves dst.
func (s *Store) flatten(dst string, diffIDs []string) error {
	type dirMeta struct {
		mode     fs.FileMode
		uid, gid int
	}
	dirs := map[string]dirMeta{}
	var walk func(layer, rel string) error
	walk = func(layer, rel string) error {
		ents, err := os.ReadDir(filepath.Join(layer, rel))
		if err != nil {
			return err
		}
		out := filepath.Join(dst, rel)
		for _, e := range ents {
			if e.Name() == opaqueMarker {
				old, err := os.ReadDir(out)
				if err != nil {
					return err
				}
				for _, o := range old {
					if err := os.RemoveAll(filepath.Join(out, o.Name())); err != nil {
						return err
					}
				}
				break
			}
		}
		for _, e := range ents {
			nm := e.Name()
			if nm == opaqueMarker {
				continue
			}
			if hidden, ok := strings.CutPrefix(nm, whiteoutPrefix); ok {
				if hidden == "" || hidden == "." || hidden == ".." {
					return fmt.Errorf("whiteout %q in %s: names nothing", nm, rel)
				}
				if err := os.RemoveAll(filepath.Join(out, hidden)); err != nil {
					return err
				}
				continue
			}
			src, to, sub := filepath.Join(layer, rel, nm), filepath.Join(out, nm), filepath.Join(rel, nm)
			fi, err := os.Lstat(src)
			if err != nil {
				return err
			}
			cur, cerr := os.Lstat(to)
			if fi.IsDir() {
				if cerr == nil && !cur.IsDir() {
					if err := os.RemoveAll(to); err != nil {
						return err
					}
					cerr = fs.ErrNotExist
				}
				if cerr != nil {
					if err := os.Mkdir(to, 0o700); err != nil {
						return err
					}
				}
				uid, gid := owner(fi)
				dirs[sub] = dirMeta{fi.Mode(), uid, gid}
				if err := walk(layer, sub); err != nil {
					return err
				}
				continue
			}
			if cerr == nil {
				if err := os.RemoveAll(to); err != nil {
					return err
				}
			}
			// link(2) does not follow a symlink: the link is to the
			// symlink itself, as for fifos and device nodes.
			if err := os.Link(src, to); err != nil {
				return err
			}
		}
		return nil
	}
	for _, id := range diffIDs {
		layer := s.layerDir(id)
		if _, err := os.Stat(layer); err != nil {
			return fmt.Errorf("layer %s is missing from the layer store: %w", id, err)
		}
		if err := walk(layer, "."); err != nil {
			return fmt.Errorf("applying layer %s: %w", id, err)
		}
	}
	// Directory modes and owners last, deepest first, from the top-most
	// layer that has each: a read-only directory must still take entries.
	names := make([]string, 0, len(dirs))
	for n := range dirs {
		names = append(names, n)
	}
	sort.Sort(sort.Reverse(sort.StringSlice(names)))
	for _, n := range names {
		p := filepath.Join(dst, n)
		if _, err := os.Lstat(p); err != nil {
			continue // a later layer's whiteout took it
		}
		m := dirs[n]
		if untar.IsRoot {
			if err := os.Lchown(p, m.uid, m.gid); err != nil {
				return err
			}
		}
		if err := os.Chmod(p, m.mode&(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)); err != nil {
			return err
		}
	}
	return nil
}

// loadPulled reads what was pulled into memory.
func (s *Store) loadPulled(ctx context.Context) error {
	pc, ok := s.cat.(PullCatalog)
	if !ok {
		return nil
	}
	list, err := pc.PulledImages(ctx)
	if err != nil {
		return fmt.Errorf("image: %w", err)
	}
	for _, p := range list {
		var c Config
		if p.Config != "" {
			if err := json.Unmarshal([]byte(p.Config), &c); err != nil {
				s.log.Warn("image: unreadable config of a pulled image; pull it again", "image", p.Name, "err", err)
			}
		}
		ns := map[string]bool{}
		for _, n := range p.Namespaces {
			ns[n] = true
		}
		s.pulled[p.Name] = &pulled{digest: p.ManifestDigest, layers: p.Layers, config: c, namespaces: ns}
	}
	return nil
}

// forgetPulled drops name's pull record once its image is deleted.
func (s *Store) forgetPulled(ctx context.Context, name string) {
	s.mu.Lock()
	_, ok := s.pulled[name]
	delete(s.pulled, name)
	s.mu.Unlock()
	if pc, isPC := s.cat.(PullCatalog); ok && isPC {
		if err := pc.DeletePulledImage(ctx, name); err != nil {
			s.log.Warn("image: cannot forget a pulled image", "image", name, "err", err)
		}
	}
}

// collectLayers removes the layers of the layer store that no pulled image
// uses. Callers hold importM.
func (s *Store) collectLayers() (freed int64) {
	s.mu.Lock()
	used := map[string]bool{}
	for _, p := range s.pulled {
		for _, l := range p.layers {
			used[strings.TrimPrefix(l, DigestPrefix)] = true
		}
	}
	s.mu.Unlock()
	root := filepath.Join(s.dir, "layers", "sha256")
	ents, err := os.ReadDir(root)
	if err != nil {
		return 0
	}
	for _, e := range ents {
		if used[e.Name()] || !validDigest(DigestPrefix+e.Name()) {
			continue
		}
		n, err := s.removeTree(filepath.Join(root, e.Name()), "layer-"+e.Name())
		if err != nil {
			s.log.Warn("image: cannot remove an unused layer", "layer", e.Name(), "err", err)
		}
		freed += n
	}
	return freed
}

// SweepResult is what Sweep did.
type SweepResult struct {
	Pressure bool        // the store was over its budget
	Removed  []string    // image names, oldest first
	Failed   [][2]string // name, why
	// Freed is the bytes of regular files the sweep removed: the trees
	// and layers of the images it removed (a file hard-linked from a
	// layer into a tree counted once, with the last of them to go) and
	// the trees no image named.
	Freed int64
	// Orphans is how many trees no image named were removed.
	Orphans int
}

// Sweep removes the trees that no image names (a crash or a refused pull
// left them) whatever the budget; then unused, unpinned images — pulled,
// imported and built ones alike (an image-build job's earlier results
// are unpinned, and only the one a deployment names is in use) — oldest
// first, while the store's bytes on disk (distinct trees, shared layers
// counted once) exceed budget; then the layers no remaining image uses.
// An image a deployment names (Options.InUse) or whose tree a replica's
// mount uses is never removed.
func (s *Store) Sweep(ctx context.Context, budget int64) (SweepResult, error) {
	res := SweepResult{Removed: []string{}, Failed: [][2]string{}}
	s.importM.Lock()
	res.Freed, res.Orphans = s.collectOrphans(ctx)
	res.Freed += s.collectLayers()
	s.importM.Unlock()
	list, err := s.List(ctx)
	if err != nil {
		return res, err
	}
	total := s.usage(list)
	res.Pressure = total > budget
	slices.SortStableFunc(list, func(a, b Image) int { return a.CreatedAt.Compare(b.CreatedAt) })
	for _, im := range list {
		if total <= budget {
			break
		}
		if im.Pinned || len(im.References) > 0 {
			continue
		}
		freed, err := s.delete(ctx, im.Name)
		if err != nil {
			var inUse *InUseError
			if !errors.As(err, &inUse) && !errors.Is(err, ErrPinned) {
				res.Failed = append(res.Failed, [2]string{im.Name, err.Error()})
			}
			continue
		}
		res.Removed = append(res.Removed, im.Name)
		res.Freed += freed
		rest, err := s.List(ctx)
		if err != nil {
			return res, err
		}
		total = s.usage(rest)
	}
	return res, nil
}

// usage is the bytes the images take: each distinct tree once, and for
// pulled ones their layers once however many images share them (the trees
// are hard links to the layers).
func (s *Store) usage(list []Image) int64 {
	var n int64
	seen := map[string]bool{}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, im := range list {
		p, ok := s.pulled[im.Name]
		if !ok {
			if !seen[im.Digest] {
				seen[im.Digest] = true
				n += im.Size
			}
			continue
		}
		for _, l := range p.layers {
			if !seen[l] {
				seen[l] = true
				n += s.layerSizeLocked(l)
			}
		}
	}
	return n
}

// layerSizeLocked is a layer's bytes of regular files, cached.
func (s *Store) layerSizeLocked(diffID string) int64 {
	if n, ok := s.layerSizes[diffID]; ok {
		return n
	}
	n, err := treeSize(s.layerDir(diffID))
	if err == nil {
		s.layerSizes[diffID] = n
	}
	return n
}

// pulledTreeDigest names a pulled image's tree in <Dir>/sha256/: SHA-256
// over a tag of its own and the image's diff ids, bottom first. flatten
// makes the tree from those layers alone, in that order, and every layer
// was verified against its diff id when it entered the layer store, so
// the chain names the tree's content as Digest would, without reading
// every byte again after each pull; two references with the same layers
// (a tag and its digest, a rebuilt config) share one tree. The tag keeps
// the names apart from imported trees' (Digest's stream never starts
// with it), so a pulled tree and an imported one with the same files are
// two trees.
func pulledTreeDigest(diffIDs []string) string {
	h := sha256.New()
	writeField(h, "berth pulled tree v1: diff ids, bottom first")
	for _, id := range diffIDs {
		writeField(h, id)
	}
	return DigestPrefix + hex.EncodeToString(h.Sum(nil))
}

// importPulled records the image of the layers diffIDs (in the layer
// store) under name: its tree is flattened unless a reference with the
// same layers made it already (pulledTreeDigest). The tree is durable
// (syncTree) before it is moved into place and again before the catalog
// says it exists, so an image recorded as pulled survives a crash whole.
func (s *Store) importPulled(ctx context.Context, name, source string, diffIDs []string) (Image, error) {
	digest := pulledTreeDigest(diffIDs)
	dst := s.treeDir(digest)
	fail := func(err error) (Image, error) { return Image{}, fmt.Errorf("image: pull %q: %w", name, err) }
	s.importM.Lock()
	defer s.importM.Unlock()
	if _, err := os.Stat(dst); errors.Is(err, fs.ErrNotExist) {
		// Flatten outside the lock: imports and deletes go on meanwhile.
		s.importM.Unlock()
		tmp, err := s.flattenTemp(diffIDs)
		s.importM.Lock()
		if tmp != "" {
			defer os.RemoveAll(tmp)
		}
		if err != nil {
			return Image{}, fmt.Errorf("%w: pull %q: %w", ErrBadSource, name, err)
		}
		if err := ctx.Err(); err != nil {
			return Image{}, err
		}
		if _, err := os.Stat(dst); errors.Is(err, fs.ErrNotExist) {
			if err := os.Rename(tmp, dst); err != nil {
				return fail(err)
			}
			os.Chmod(dst, 0o755)
		} else if err != nil {
			return fail(err)
		}
	} else if err != nil {
		return fail(err)
	}
	size, err := treeSize(filepath.Join(dst, "rootfs"))
	if err != nil {
		return fail(err)
	}
	s.mu.Lock()
	old, had := s.digests[name]
	s.mu.Unlock()
	if had && old != digest {
		if refs := s.users(name); len(refs) > 0 {
			return Image{}, &InUseError{Name: name, References: refs}
		}
	}
	// The layers' renames and the tree's: durable before the record.
	if err := syncTree(s.dir); err != nil {
		return fail(err)
	}
	im, err := s.record(ctx, name, digest, size, source, old, had)
	if err != nil {
		return fail(err)
	}
	s.log.Info("image tree made", "image", name, "digest", digest, "bytes", size)
	return im, nil
}

// flattenTemp flattens the layers into <tmp>/rootfs of a fresh temporary
// directory and makes it durable; the caller removes tmp.
func (s *Store) flattenTemp(diffIDs []string) (tmp string, err error) {
	tmp, err = os.MkdirTemp(filepath.Join(s.dir, "tmp"), "pull-")
	if err != nil {
		return "", err
	}
	rootfs := filepath.Join(tmp, "rootfs")
	if err := os.Mkdir(rootfs, 0o755); err != nil {
		return tmp, err
	}
	if err := s.flatten(rootfs, diffIDs); err != nil {
		return tmp, err
	}
	return tmp, syncTree(tmp)
}

// treeSize is the bytes of the regular files under dir, as Digest counts
// them (each path), from their metadata alone.
func treeSize(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			fi, err := d.Info()
			if err != nil {
				return err
			}
			n += fi.Size()
		}
		return nil
	})
	return n, err
}
