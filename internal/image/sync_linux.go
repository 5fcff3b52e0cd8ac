package image

import (
	"os"

	"golang.org/x/sys/unix"
)

// syncTree makes what was written under dir durable: one syncfs(2) of its
// filesystem, which flushes every file, directory and rename there at
// once — far cheaper than an fsync per file of a tree of thousands, and
// it covers the renames into the store too.
func syncTree(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Syncfs(int(f.Fd()))
}
