//go:build unix

package site

import (
	"os"
	"syscall"
)

// openFlags opens files non-blocking so that a FIFO placed in a site root
// cannot park a request goroutine in open(2) waiting for a writer. It has no
// effect on regular files, and other file types are never read.
const openFlags = os.O_RDONLY | syscall.O_NONBLOCK

// fileID returns the device and inode numbers of fi for the ETag.
func fileID(fi os.FileInfo) (dev, ino uint64) {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Dev), uint64(st.Ino)
	}
	return 0, 0
}
