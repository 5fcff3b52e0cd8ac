//go:build !unix

package untar

import (
	"archive/tar"
	"errors"
	"io/fs"
	"os"
)

// IsRoot is whether owners and device nodes can be kept: never here.
var IsRoot = false

// Lchown does nothing off Unix.
func Lchown(*os.Root, string, int, int) error { return nil }

// Mknodat refuses: device nodes and fifos need a Unix host.
func Mknodat(*os.Root, string, uint32, fs.FileMode, uint64) error {
	return errors.New("device nodes need a Unix host")
}

func mknod(*os.Root, string, *tar.Header) error { return errors.New("device nodes need a Unix host") }
