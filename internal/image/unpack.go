package image

import (
	"archive/tar"
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/klauspost/compress/gzip"
)

// maxEntries bounds the entries of one image, so a hostile tarball cannot
// fill the disk with inodes forever.
const maxEntries = 1 << 20

// UnpackOptions qualify UnpackTar.
type UnpackOptions struct {
	// StripComponents drops that many leading path components from every
	// entry name (and hard-link target), as tar --strip-components does:
	// entries with no more components than that are skipped. Package
	// artifact unpacks mount and site-bundle tarballs with it.
	StripComponents int
	// MaxBytes, when positive, bounds the regular files' total size, so a
	// small compressed tarball cannot fill the disk.
	MaxBytes int64
}

// UnpackStats count what UnpackTar wrote.
type UnpackStats struct {
	Files int   // entries written (directories, links and nodes included)
	Bytes int64 // bytes of regular files
}

// unpackTar is UnpackTar for an image import: no components stripped.
func unpackTar(r io.Reader, dir string) error {
	_, err := UnpackTar(r, dir, UnpackOptions{})
	return err
}

// UnpackTar extracts a tar stream (gzip-compressed or not: the magic bytes
// decide) into dir, which must exist and be empty. Entries may not leave
// dir: absolute names and leading ".." components are resolved against it
// (as tar does), and a hard link or an entry whose parent would resolve
// outside it through a symlink is refused. Owners are kept when berth runs
// as root. It is berth's one tar extractor: image imports and artifact
// trees (package artifact) both use it.
func UnpackTar(r io.Reader, dir string, o UnpackOptions) (UnpackStats, error) {
	var st UnpackStats
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
		name string
		mode int64
	}
	var dirs []dirMode
	for n := 0; ; n++ {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return st, fmt.Errorf("reading tar: %w", err)
		}
		if n >= maxEntries {
			return st, fmt.Errorf("more than %d entries", maxEntries)
		}
		name, ok := cleanName(hdr.Name)
		if !ok {
			return st, fmt.Errorf("tar entry %q: not a path inside the image", hdr.Name)
		}
		if name, ok = strip(name, o.StripComponents); !ok {
			continue // wholly stripped, as tar skips it
		}
		if hdr.Typeflag == tar.TypeLink && o.StripComponents > 0 {
			// A hard link names an entry of the same archive, whose
			// name was stripped too.
			target, ok := cleanName(hdr.Linkname)
			if !ok {
				return st, fmt.Errorf("tar entry %q: hard link to %q leaves the image", hdr.Name, hdr.Linkname)
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
				dirs = append(dirs, dirMode{name, hdr.Mode})
			}
			continue
		}
		if o.MaxBytes > 0 && (hdr.Typeflag == tar.TypeReg || hdr.Typeflag == tar.TypeRegA) && hdr.Size > o.MaxBytes-st.Bytes {
			return st, fmt.Errorf("tar entry %q: the files exceed the limit of %d bytes", hdr.Name, o.MaxBytes)
		}
		if err := extract(root, tr, hdr, name); err != nil {
			return st, fmt.Errorf("tar entry %q: %w", hdr.Name, err)
		}
		switch hdr.Typeflag {
		case tar.TypeXGlobalHeader:
		case tar.TypeDir:
			st.Files++
			dirs = append(dirs, dirMode{name, hdr.Mode})
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
		if err := root.Chmod(dirs[i].name, goMode(dirs[i].mode)); err != nil {
			return st, fmt.Errorf("tar entry %q: %w", dirs[i].name, err)
		}
	}
	return st, nil
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
// resolves outside the image (symlinks included).
func extract(root *os.Root, tr *tar.Reader, hdr *tar.Header, name string) error {
	if dir := path.Dir(name); dir != "." {
		if err := root.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	mode := goMode(hdr.Mode)
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
		_, err = io.Copy(f, tr)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		if err := root.Chmod(name, mode); err != nil {
			return err
		}
	case tar.TypeSymlink:
		root.Remove(name)
		if err := root.Symlink(hdr.Linkname, name); err != nil {
			return err
		}
	case tar.TypeLink:
		target, ok := cleanName(hdr.Linkname)
		if !ok || target == "." {
			return fmt.Errorf("hard link to %q leaves the image", hdr.Linkname)
		}
		root.Remove(name)
		if err := root.Link(target, name); err != nil {
			return err
		}
		return nil // owner and mode are the target's
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		root.Remove(name)
		if err := mknod(root, name, hdr); err != nil {
			return err
		}
	case tar.TypeXGlobalHeader:
		return nil
	default:
		return fmt.Errorf("unsupported entry type %q", hdr.Typeflag)
	}
	return chown(root, name, hdr.Uid, hdr.Gid)
}

// copyTree copies the tree at src into dst (which must exist and be
// empty), keeping types, modes, symlink targets and, as root, owners. Hard
// links become copies. Nothing outside src is followed.
func copyTree(src, dst string) error {
	root, err := os.OpenRoot(dst)
	if err != nil {
		return err
	}
	defer root.Close()
	type dirMode struct {
		name string
		mode fs.FileMode
	}
	var dirs []dirMode
	n := 0
	err = filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if n++; n > maxEntries {
			return fmt.Errorf("more than %d entries", maxEntries)
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		mode := fi.Mode()
		switch {
		case mode.IsDir():
			if rel != "." {
				if err := root.Mkdir(rel, 0o700); err != nil {
					return err
				}
			}
			dirs = append(dirs, dirMode{rel, mode})
		case mode.IsRegular():
			if err := copyFile(root, p, rel, mode); err != nil {
				return err
			}
		case mode&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			if err := root.Symlink(target, rel); err != nil {
				return err
			}
		default:
			if err := copySpecial(root, rel, fi); err != nil {
				return err
			}
		}
		uid, gid := owner(fi)
		return chown(root, rel, uid, gid)
	})
	if err != nil {
		return err
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := root.Chmod(dirs[i].name, dirs[i].mode&(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)); err != nil {
			return err
		}
	}
	return nil
}

func copyFile(root *os.Root, src, rel string, mode fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := root.OpenFile(rel, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return root.Chmod(rel, mode&(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky))
}
