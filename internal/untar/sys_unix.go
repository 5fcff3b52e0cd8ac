//go:build unix

package untar

import (
	"archive/tar"
	"io/fs"
	"os"
	"path"

	"golang.org/x/sys/unix"
)

// IsRoot is whether owners and device nodes can be kept.
var IsRoot = os.Geteuid() == 0

// Lchown sets the owner of name (relative to root, not following a final
// symlink) when berth runs as root; otherwise it does nothing.
func Lchown(root *os.Root, name string, uid, gid int) error {
	if !IsRoot {
		return nil
	}
	return root.Lchown(name, uid, gid)
}

// Mknodat creates a device node or fifo name (relative to root) with the
// given type bits (unix.S_IFCHR, S_IFBLK, S_IFIFO), mode and device
// number, resolving the parent through root so that it cannot land
// outside the tree. Device nodes need root; without it they are skipped
// (an image's /dev is the runtime's anyway).
func Mknodat(root *os.Root, name string, typ uint32, mode fs.FileMode, dev uint64) error {
	if typ != unix.S_IFIFO && !IsRoot {
		return nil
	}
	parent, err := root.Open(path.Dir(name))
	if err != nil {
		return err
	}
	defer parent.Close()
	if err := unix.Mknodat(int(parent.Fd()), path.Base(name), typ|UnixPerm(mode), int(dev)); err != nil {
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
	return Mknodat(root, name, typ, Mode(hdr.Mode), unix.Mkdev(uint32(hdr.Devmajor), uint32(hdr.Devminor)))
}
