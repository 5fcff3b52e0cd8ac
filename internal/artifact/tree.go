package artifact

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/berth-dev/berth/internal/untar"
)

// UnpackTree extracts a tar or tar.gz stream into dir, which must exist
// and be empty, dropping stripComponents leading components of every
// name. It is untar.Unpack (berth's one extractor: entries that would
// leave dir, through "..", absolute names, symlinked parents or hard
// links, are refused), as for a root file system (owners, setuid bits and
// device nodes kept: a mount's tree is part of one), with ctx ending the
// read. It counts entries written
// and regular files' bytes.
func UnpackTree(ctx context.Context, r io.Reader, dir string, stripComponents int) (files int, unpacked int64, err error) {
	st, err := untar.Unpack(ctx, ContextReader(ctx, r), dir, untar.Options{StripComponents: stripComponents, Tree: true})
	return st.Files, st.Bytes, err
}

// ContextReader reads r until ctx ends: a copy through it stops at the
// next read after a job is cancelled.
func ContextReader(ctx context.Context, r io.Reader) io.Reader { return ctxReader{ctx, r} }

type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// Trees is the content-addressed directory of unpacked artifacts every
// replica shares, <data>/trees:
//
//	sha256/<digest>/            the tarball's tree (strip_components 0)
//	sha256/<digest>-strip<N>/   the same with N components stripped
//	sha256/<name>.json          what the unpack counted (TreeInfo)
//	tmp/                        unpacks in progress, emptied at open
//
// A tree is unpacked once into tmp/ and renamed into place, so a tree
// under its digest is always whole; a second Unpack of the same digest
// reuses it.
type Trees struct {
	dir string
	// MaxBytes, when positive, bounds the regular files of one tree, so a
	// small compressed tarball cannot fill the disk.
	MaxBytes int64
}

// Tree is one unpacked artifact.
type Tree struct {
	Dir    string `json:"dir"`
	Digest string `json:"digest"`
	Files  int    `json:"files"`
	Bytes  int64  `json:"bytes"`
	Reused bool   `json:"reused"`
}

// OpenTrees opens (creating) the trees directory dir.
func OpenTrees(dir string) (*Trees, error) {
	if err := os.RemoveAll(filepath.Join(dir, "tmp")); err != nil {
		return nil, err
	}
	for _, d := range []string{"sha256", "tmp"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	return &Trees{dir: dir}, nil
}

// Unpack returns the tree of blob digest from src with strip components
// stripped, unpacking it unless it already is. The blob is verified while
// it streams; a mismatch leaves no tree.
func (t *Trees) Unpack(ctx context.Context, src Source, digest string, strip int) (Tree, error) {
	hex, ok := ParseDigest(digest)
	if !ok {
		return Tree{}, fmt.Errorf("%q is not a sha256 digest", digest)
	}
	if strip < 0 {
		return Tree{}, fmt.Errorf("strip_components %d: must not be negative", strip)
	}
	name := hex
	if strip > 0 {
		name += "-strip" + strconv.Itoa(strip)
	}
	final := filepath.Join(t.dir, "sha256", name)
	meta := final + ".json"
	if tr, err := readTreeInfo(meta); err == nil {
		if _, err := os.Stat(final); err == nil {
			tr.Dir, tr.Reused = final, true
			return tr, nil
		}
	}
	rc, _, err := src.Fetch(ctx, hex)
	if err != nil {
		return Tree{}, err
	}
	defer rc.Close()
	tmp, err := os.MkdirTemp(filepath.Join(t.dir, "tmp"), name+"-*")
	if err != nil {
		return Tree{}, err
	}
	defer os.RemoveAll(tmp) // gone once renamed
	st, err := untar.Unpack(ctx, ctxReader{ctx, rc}, tmp, untar.Options{StripComponents: strip, MaxBytes: t.MaxBytes, Tree: true})
	files, n := st.Files, st.Bytes
	if err == nil {
		// The tar reader stops at its end marker: drain the rest so the
		// verifier sees every byte of the blob.
		_, err = io.Copy(io.Discard, rc)
	}
	if err != nil {
		return Tree{}, fmt.Errorf("unpacking sha256:%s: %w", hex, err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return Tree{}, err
	}
	tr := Tree{Digest: hex, Files: files, Bytes: n}
	if err := os.Rename(tmp, final); err != nil {
		if !isNotEmpty(err) {
			return Tree{}, err
		}
		// Another unpack of the same digest won: its tree is the same.
		tr.Reused = true
	}
	b, _ := json.Marshal(tr)
	if err := writeAtomic(filepath.Join(t.dir, "tmp"), meta, b); err != nil {
		return Tree{}, err
	}
	if err := syncDir(filepath.Join(t.dir, "sha256")); err != nil {
		return Tree{}, err
	}
	tr.Dir = final
	return tr, nil
}

func readTreeInfo(file string) (Tree, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return Tree{}, err
	}
	var tr Tree
	return tr, json.Unmarshal(b, &tr)
}

// isNotEmpty is rename's answer when the target directory exists.
func isNotEmpty(err error) bool {
	return errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, syscall.EEXIST)
}
