//go:build !linux

package image

import (
	"io/fs"
	"os"
	"path/filepath"
)

// syncTree makes what was written under dir durable: without syncfs(2),
// an fsync of every regular file and directory, directories last.
func syncTree(dir string) error {
	var dirs []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			dirs = append(dirs, p)
			return nil
		case !d.Type().IsRegular():
			return nil
		}
		return syncPath(p)
	})
	if err != nil {
		return err
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := syncPath(dirs[i]); err != nil {
			return err
		}
	}
	return nil
}

func syncPath(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}
