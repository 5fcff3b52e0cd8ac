// Package untar is berth's one tar extractor: image imports and pulled
// layers (package image), artifact trees (package artifact) and build
// contexts (package build) are all unpacked by Unpack. No entry lands
// outside the directory it unpacks into: absolute names and leading ".."
// components are resolved against it (as tar does), a hard link must name
// an entry inside it, and every path is opened through an os.Root, so no
// symbolic link an earlier entry made is followed out of it.
//
// What an archive may hold beyond directories, regular files, symbolic
// links and hard links is the caller's choice (Options.Tree: owners,
// setuid bits, device nodes and fifos of a root file system;
// Options.Layer: the whiteouts of an OCI layer).
package untar

import (
	"archive/tar"
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"time"

	"github.com/klauspost/compress/gzip"
)

// MaxEntries bounds the entries of one archive, so a hostile tarball
// cannot fill the disk with inodes forever.
const MaxEntries = 1 << 20

// OCI whiteouts (Options.Layer): a file ".wh.NAME" in a layer deletes NAME
// of the layers below; ".wh..wh..opq" in a directory hides everything the
// layers below put in it.
const (
	WhiteoutPrefix = ".wh."
	OpaqueMarker   = ".wh..wh..opq"
)

// Options qualify Unpack. The zero value takes directories, regular files,
// symbolic links and hard links, with their permission bits (and the
// sticky bit, and a directory's set-group-ID bit) but no set-ID file, owned
// by berth's user: what a build context needs.
type Options struct {
	// StripComponents drops that many leading path components from every
	// entry name (and hard-link target), as tar --strip-components does:
	// entries with no more components than that are skipped.
	StripComponents int
	// MaxBytes, when positive, bounds the regular files' total size, so a
	// small compressed tarball cannot fill the disk.
	MaxBytes int64
	// RefuseOutside refuses an entry whose name leaves the tree (a
	// leading ".." once cleaned) instead of resolving it inside, as tar
	// does: for archives that have no reason to hold one.
	RefuseOutside bool
	// Tree says the archive is a root file system (an image, a layer, a
	// mount's tree): owners are kept when berth runs as root, and so are
	// setuid, setgid and sticky bits, fifos and (as root) device nodes.
	// Without it those are dropped, and a device node or fifo is refused.
	Tree bool
	// Layer says the archive is an OCI image layer: its whiteouts
	// (WhiteoutPrefix, OpaqueMarker) are markers that the image store
	// applies when it stacks layers, kept as empty regular files; one that
	// names nothing or is not a regular file (or a hard link) is refused. Without it a
	// ".wh." name is an ordinary file.
	Layer bool
	// Times keeps each entry's modification time (a directory's is set
	// last, once its entries are written): for a snapshot that must come
	// back as it was captured (a workspace). Symbolic links keep theirs
	// from the time they are made.
	Times bool
}

// Stats count what Unpack wrote.
type Stats struct {
	Files int   // entries written (directories, links and nodes included)
	Bytes int64 // bytes of regular files
}

// Unpack extracts a tar stream (gzip-compressed or not: the magic bytes
// decide) into dir, which must exist and be empty. Entries may not leave
// dir (see the package documentation). ctx is checked between entries.
func Unpack(ctx context.Context, r io.Reader, dir string, o Options) (Stats, error) {
	var st Stats
	if o.StripComponents < 0 {
		return st, fmt.Errorf("strip_components %d: must not be negative", o.StripComponents)
	}
	br := bufio.NewReader(r)
	if magic, err := br.Peek(2); err == nil && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return st, fmt.Errorf("reading gzip: %w", err)
		}
		defer zr.Close()
		r = zr
	} else {
		r = br
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return st, err
	}
	defer root.Close()
	tr := tar.NewReader(r)
	type dirMode struct {
		name  string
		mode  int64
		mtime time.Time
	}
	var dirs []dirMode
	for n := 0; ; n++ {
		if err := ctx.Err(); err != nil {
			return st, err
		}
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return st, fmt.Errorf("reading tar: %w", err)
		}
		if n >= MaxEntries {
			return st, fmt.Errorf("more than %d entries", MaxEntries)
		}
		if o.RefuseOutside && leaves(hdr.Name) {
			return st, fmt.Errorf("tar entry %q: its name leaves the tree", hdr.Name)
		}
		name, ok := cleanName(hdr.Name)
		if !ok {
			return st, fmt.Errorf("tar entry %q: not a path inside the tree", hdr.Name)
		}
		if name, ok = strip(name, o.StripComponents); !ok {
			continue // wholly stripped, as tar skips it
		}
		if hdr.Typeflag == tar.TypeLink && o.StripComponents > 0 {
			// A hard link names an entry of the same archive, whose
			// name was stripped too.
			target, ok := cleanName(hdr.Linkname)
			if !ok {
				return st, fmt.Errorf("tar entry %q: hard link to %q leaves the tree", hdr.Name, hdr.Linkname)
			}
			if target, ok = strip(target, o.StripComponents); !ok {
				return st, fmt.Errorf("tar entry %q: hard link to %q, which strip_components removes", hdr.Name, hdr.Linkname)
			}
			h := *hdr
			h.Linkname = target
			hdr = &h
		}
		if name == "." {
			if hdr.Typeflag == tar.TypeDir {
				dirs = append(dirs, dirMode{name, hdr.Mode, hdr.ModTime})
			}
			continue
		}
		if o.Layer {
			if err := checkWhiteout(hdr, name); err != nil {
				return st, fmt.Errorf("tar entry %q: %w", hdr.Name, err)
			}
		}
		if o.MaxBytes > 0 && (hdr.Typeflag == tar.TypeReg || hdr.Typeflag == tar.TypeRegA) && hdr.Size > o.MaxBytes-st.Bytes {
			return st, fmt.Errorf("tar entry %q: the files exceed the limit of %d bytes", hdr.Name, o.MaxBytes)
		}
		if err := extract(root, tr, hdr, name, o); err != nil {
			return st, fmt.Errorf("tar entry %q: %w", hdr.Name, err)
		}
		switch hdr.Typeflag {
		case tar.TypeXGlobalHeader:
		case tar.TypeDir:
			st.Files++
			dirs = append(dirs, dirMode{name, hdr.Mode, hdr.ModTime})
		case tar.TypeReg, tar.TypeRegA:
			st.Files++
			st.Bytes += hdr.Size
		default:
			st.Files++
		}
	}
	// Directory modes last: a read-only directory must still take its
	// entries while unpacking.
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := root.Chmod(dirs[i].name, o.mode(dirs[i].mode, true)); err != nil {
			return st, fmt.Errorf("tar entry %q: %w", dirs[i].name, err)
		}
		if o.Times {
			if err := root.Chtimes(dirs[i].name, dirs[i].mtime, dirs[i].mtime); err != nil {
				return st, fmt.Errorf("tar entry %q: %w", dirs[i].name, err)
			}
		}
	}
	return st, nil
}

// mode is the fs.FileMode an entry of mode bits p gets.
//
// Without Tree, no set-user-ID or set-group-ID file is made, whatever the
// archive says; the sticky bit and a directory's set-group-ID bit (which
// only pass a group on to new entries) are kept.
func (o Options) mode(p int64, dir bool) fs.FileMode {
	if o.Tree {
		return Mode(p)
	}
	m := fs.FileMode(p & 0o777)
	if p&0o1000 != 0 {
		m |= fs.ModeSticky
	}
	if dir && p&0o2000 != 0 {
		m |= fs.ModeSetgid
	}
	return m
}

// checkWhiteout refuses a layer's whiteout that is not a regular file or
// names nothing.
func checkWhiteout(hdr *tar.Header, name string) error {
	base := path.Base(name)
	hidden, ok := strings.CutPrefix(base, WhiteoutPrefix)
	if !ok {
		return nil
	}
	if hdr.Typeflag != tar.TypeReg && hdr.Typeflag != tar.TypeRegA && hdr.Typeflag != tar.TypeLink {
		return fmt.Errorf("whiteout %q is not a regular file", base)
	}
	if base != OpaqueMarker && (hidden == "" || hidden == "." || hidden == "..") {
		return fmt.Errorf("whiteout %q names nothing", base)
	}
	return nil
}

// strip drops n leading components of a clean relative name; ok is false
// when nothing is left (the entry is skipped).
func strip(name string, n int) (string, bool) {
	if n == 0 {
		return name, true
	}
	if name == "." {
		return "", false
	}
	parts := strings.Split(name, "/")
	if len(parts) <= n {
		return "", false
	}
	return strings.Join(parts[n:], "/"), true
}

// leaves is whether a tar name, relative to the tree (a leading "/"
// dropped), climbs out of it.
func leaves(name string) bool {
	p := path.Clean(strings.TrimLeft(name, "/"))
	return p == ".." || strings.HasPrefix(p, "../")
}

// cleanName turns a tar name into a clean relative path, or reports that
// it leaves the root.
func cleanName(name string) (string, bool) {
	if strings.ContainsRune(name, 0) {
		return "", false
	}
	p := path.Clean("/" + name)
	if p == "/" {
		return ".", true
	}
	p = p[1:]
	// Clean of a rooted path removes every "..", so only a literal
	// component could remain; refuse it anyway.
	for _, c := range strings.Split(p, "/") {
		if c == ".." {
			return "", false
		}
	}
	return p, true
}

// extract writes one entry through root, which refuses any path that
// resolves outside the tree (symlinks included).
func extract(root *os.Root, tr *tar.Reader, hdr *tar.Header, name string, o Options) error {
	if dir := path.Dir(name); dir != "." {
		if err := root.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		if err := root.Mkdir(name, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
	case tar.TypeReg, tar.TypeRegA:
		root.Remove(name)
		f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return err
		}
		if o.Layer && strings.HasPrefix(path.Base(name), WhiteoutPrefix) {
			_, err = io.Copy(io.Discard, tr) // a marker: its content is nothing
		} else {
			_, err = io.Copy(f, tr)
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		// The owner before the mode: chown(2) clears setuid and setgid
		// bits, root's included.
		if o.Tree {
			if err := Lchown(root, name, hdr.Uid, hdr.Gid); err != nil {
				return err
			}
		}
		if err := root.Chmod(name, o.mode(hdr.Mode, false)); err != nil {
			return err
		}
		if o.Times {
			return root.Chtimes(name, hdr.ModTime, hdr.ModTime)
		}
		return nil
	case tar.TypeSymlink:
		root.Remove(name)
		if err := root.Symlink(hdr.Linkname, name); err != nil {
			return err
		}
	case tar.TypeLink:
		target, ok := cleanName(hdr.Linkname)
		if !ok || target == "." {
			return fmt.Errorf("hard link to %q leaves the tree", hdr.Linkname)
		}
		root.Remove(name)
		if err := root.Link(target, name); err != nil {
			return err
		}
		return nil // owner and mode are the target's
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		if !o.Tree {
			return fmt.Errorf("type %q (a device node or fifo) has no place in this tree", hdr.Typeflag)
		}
		root.Remove(name)
		if err := mknod(root, name, hdr); err != nil {
			return err
		}
	case tar.TypeXGlobalHeader:
		return nil
	default:
		return fmt.Errorf("unsupported entry type %q", hdr.Typeflag)
	}
	if !o.Tree {
		return nil
	}
	return Lchown(root, name, hdr.Uid, hdr.Gid)
}

// Mode converts Unix permission bits (with setuid, setgid and sticky) to
// an fs.FileMode.
func Mode(p int64) fs.FileMode {
	m := fs.FileMode(p & 0o777)
	if p&0o4000 != 0 {
		m |= fs.ModeSetuid
	}
	if p&0o2000 != 0 {
		m |= fs.ModeSetgid
	}
	if p&0o1000 != 0 {
		m |= fs.ModeSticky
	}
	return m
}

// UnixPerm returns the permission bits of m (with setuid, setgid and
// sticky) as Unix mode bits: Mode's inverse.
func UnixPerm(m fs.FileMode) uint32 {
	p := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		p |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		p |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		p |= 0o1000
	}
	return p
}
