package build

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// maxDockerfile caps a recipe's Dockerfile.
const maxDockerfile = 1 << 20

// fetchRecipe writes a Recipe's Dockerfile next to (not in) a context
// directory holding its unpacked context tarball.
func fetchRecipe(ctx context.Context, dir string, r Recipe) (ctxDir, dockerfile string, err error) {
	df, ctxTar, err := r.Fetch(ctx)
	if ctxTar != nil {
		defer ctxTar.Close()
	}
	if err != nil {
		return "", "", err
	}
	if len(df) == 0 {
		return "", "", errors.New("the recipe has an empty Dockerfile")
	}
	if len(df) > maxDockerfile {
		return "", "", fmt.Errorf("the recipe's Dockerfile is over %d bytes", maxDockerfile)
	}
	recipe := filepath.Join(dir, "recipe")
	ctxDir = filepath.Join(recipe, "context")
	if err := os.MkdirAll(ctxDir, 0o755); err != nil {
		return "", "", err
	}
	dockerfile = filepath.Join(recipe, "Dockerfile")
	if err := os.WriteFile(dockerfile, df, 0o644); err != nil {
		return "", "", err
	}
	if ctxTar != nil {
		if err := untar(ctx, ctxTar, ctxDir); err != nil {
			return "", "", fmt.Errorf("the recipe's context: %w", err)
		}
	}
	return ctxDir, dockerfile, nil
}

// untar unpacks a tar stream (gzipped or not) into dir through an os.Root,
// so no entry — by its name or through a symbolic link an earlier entry
// made — lands outside dir. Directories, regular files and symbolic links
// only: a build context needs nothing else.
func untar(ctx context.Context, r io.Reader, dir string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	br := bufio.NewReader(r)
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return err
		}
		defer zr.Close()
		r = zr
	} else {
		r = br
	}
	tr := tar.NewReader(r)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		name := filepath.Clean(filepath.FromSlash(strings.TrimPrefix(hdr.Name, "/")))
		if name == "." {
			continue
		}
		if !filepath.IsLocal(name) {
			return fmt.Errorf("entry %q leaves the context", hdr.Name)
		}
		if d := filepath.Dir(name); d != "." {
			if err := root.MkdirAll(d, 0o755); err != nil {
				return err
			}
		}
		perm := os.FileMode(hdr.Mode).Perm()
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(name, perm|0o700); err != nil {
				return err
			}
		case tar.TypeReg:
			f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		case tar.TypeSymlink:
			if err := root.Symlink(hdr.Linkname, name); err != nil {
				return err
			}
		default:
			return fmt.Errorf("entry %q: type %q is not a directory, file or symbolic link", hdr.Name, hdr.Typeflag)
		}
	}
}
