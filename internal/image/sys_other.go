//go:build !unix

package image

import (
	"io/fs"
	"os"
)

func owner(fs.FileInfo) (int, int)                    { return 0, 0 }
func inode(fs.FileInfo) (uint64, uint64)              { return 0, 1 }
func deviceNumber(fs.FileInfo) string                 { return "" }
func copySpecial(*os.Root, string, fs.FileInfo) error { return nil }
func cloneFile(dst, src *os.File) bool                { return false }

func dataExtent(f *os.File, off, size int64) (int64, int64) { return off, size }
