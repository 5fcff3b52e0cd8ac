//go:build unix

package image

import (
	"archive/tar"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"syscall"

	"golang.org/x/sys/unix"
)

// isRoot is whether owners and device nodes can be kept.
var isRoot = os.Geteuid() == 0

func chown(root *os.Root, name string, uid, gid int) error {
	if !isRoot {
		return nil
	}
	return root.Lchown(name, uid, gid)
}

// owner returns the uid and gid of a file.
func owner(fi fs.FileInfo) (int, int) {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int(st.Uid), int(st.Gid)
	}
	return 0, 0
}

// deviceNumber is a device's major:minor for the digest.
func deviceNumber(fi fs.FileInfo) string {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return fmt.Sprintf("%d:%d", unix.Major(uint64(st.Rdev)), unix.Minor(uint64(st.Rdev)))
	}
	return ""
}

// mknodAt creates a device node or fifo name (relative to root) with the
// given type bits, mode and device number, resolving the parent through
// root so that it cannot land outside the image. Device nodes need root;
// unprivileged imports skip them (an image's /dev is the runtime's anyway).
func mknodAt(root *os.Root, name string, typ uint32, mode fs.FileMode, dev uint64) error {
	if typ != unix.S_IFIFO && !isRoot {
		return nil
	}
	parent, err := root.Open(path.Dir(name))
	if err != nil {
		return err
	}
	defer parent.Close()
	if err := unix.Mknodat(int(parent.Fd()), path.Base(name), typ|unixPerm(mode), int(dev)); err != nil {
		return &fs.PathError{Op: "mknod", Path: name, Err: err}
	}
	return nil
}

func mknod(root *os.Root, name string, hdr *tar.Header) error {
	var typ uint32
	switch hdr.Typeflag {
	case tar.TypeChar:
		typ = unix.S_IFCHR
	case tar.TypeBlock:
		typ = unix.S_IFBLK
	default:
		typ = unix.S_IFIFO
	}
	return mknodAt(root, name, typ, goMode(hdr.Mode), unix.Mkdev(uint32(hdr.Devmajor), uint32(hdr.Devminor)))
}

func copySpecial(root *os.Root, rel string, fi fs.FileInfo) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("%s: cannot read its device number", rel)
	}
	m := fi.Mode()
	var typ uint32
	switch {
	case m&fs.ModeCharDevice != 0:
		typ = unix.S_IFCHR
	case m&fs.ModeDevice != 0:
		typ = unix.S_IFBLK
	case m&fs.ModeNamedPipe != 0:
		typ = unix.S_IFIFO
	default:
		return nil // sockets are not part of an image
	}
	return mknodAt(root, rel, typ, m, uint64(st.Rdev))
}

// cloneFile makes dst a copy-on-write clone of src (FICLONE: btrfs, XFS
// with reflink, bcachefs) and reports whether the filesystem could.
func cloneFile(dst, src *os.File) bool {
	return unix.IoctlFileClone(int(dst.Fd()), int(src.Fd())) == nil
}

// dataExtent returns the next range of f at or after off that may hold
// data, up to size; a filesystem without SEEK_DATA answers the rest.
func dataExtent(f *os.File, off, size int64) (int64, int64) {
	start, err := unix.Seek(int(f.Fd()), off, unix.SEEK_DATA)
	if err != nil {
		if errors.Is(err, unix.ENXIO) {
			return size, size // only a hole is left
		}
		return off, size
	}
	end, err := unix.Seek(int(f.Fd()), start, unix.SEEK_HOLE)
	if err != nil || end > size {
		end = size
	}
	return start, end
}
