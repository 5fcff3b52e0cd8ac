//go:build !unix

package site

import "os"

// openFlags: without O_NONBLOCK, special files are only kept out by the
// type check after open.
const openFlags = os.O_RDONLY

// fileID has no portable inode to offer; the ETag falls back to size and
// modification time.
func fileID(os.FileInfo) (dev, ino uint64) { return 0, 0 }
