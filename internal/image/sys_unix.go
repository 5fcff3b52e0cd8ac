//go:build unix

package image

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/berth-dev/berth/internal/untar"
)

// owner returns the uid and gid of a file.
func owner(fi fs.FileInfo) (int, int) {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int(st.Uid), int(st.Gid)
	}
	return 0, 0
}

// inode returns a file's inode number and link count.
func inode(fi fs.FileInfo) (ino, links uint64) {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Ino), uint64(st.Nlink)
	}
	return 0, 1
}

// deviceNumber is a device's major:minor for the digest.
func deviceNumber(fi fs.FileInfo) string {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return fmt.Sprintf("%d:%d", unix.Major(uint64(st.Rdev)), unix.Minor(uint64(st.Rdev)))
	}
	return ""
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
	return untar.Mknodat(root, rel, typ, m, uint64(st.Rdev))
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
