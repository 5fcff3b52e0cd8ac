package image

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/berth-dev/berth/internal/untar"
)

// unpackTar unpacks an imported tarball, a root file system: owners,
// setuid bits and device nodes kept (untar.Options.Tree).
func unpackTar(ctx context.Context, r io.Reader, dir string) error {
	_, err := untar.Unpack(ctx, r, dir, untar.Options{Tree: true})
	return err
}

// unpackLayer unpacks a pulled OCI layer into the layer store: a root
// file system whose whiteouts are kept as the markers flatten applies.
func unpackLayer(ctx context.Context, r io.Reader, dir string) error {
	_, err := untar.Unpack(ctx, r, dir, untar.Options{Tree: true, Layer: true})
	return err
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
		if n++; n > untar.MaxEntries {
			return fmt.Errorf("more than %d entries", untar.MaxEntries)
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
			return copyFile(root, p, rel, fi)
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
		return untar.Lchown(root, rel, uid, gid)
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

// copyFile copies the regular file src to rel, its owner (as root) before
// its mode: chown(2) clears setuid and setgid bits, root's included.
func copyFile(root *os.Root, src, rel string, fi fs.FileInfo) error {
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
	uid, gid := owner(fi)
	if err := untar.Lchown(root, rel, uid, gid); err != nil {
		return err
	}
	return root.Chmod(rel, fi.Mode()&(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky))
}
