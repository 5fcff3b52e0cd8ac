package workspace

import (
	"archive/tar"
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/berth-dev/berth/internal/untar"
)

// Stats describe one snapshot.
type Stats struct {
	Digest string // sha256 of the tar, hex
	Size   int64  // the tar's bytes
	Files  int    // regular files in it
	Bytes  int64  // their bytes
}

// WriteTar writes the tree under dir to w as a deterministic tar: entries
// in lexical order of their slash-separated paths, each with its mode
// bits, its modification time to the second, owner 0:0 and no names, so
// that equal trees give equal bytes and so equal digests. Directories,
// regular files and symbolic links are kept; sockets, devices and fifos
// are left out (nothing a replica could hand on through a file). A file
// whose size changes while it is read fails the capture. Set-user-ID and
// set-group-ID bits of files are left out: a replica may set them (a guest
// of the kvm or libvirt driver through its 9p share, as root or as the
// file's owner), and Extract, run as berth's user (root), would make them
// set-ID bits of that user's files on the host.
func WriteTar(w io.Writer, dir string) (Stats, error) {
	h := sha256.New()
	cw := &countWriter{w: io.MultiWriter(w, h)}
	bw := bufio.NewWriterSize(cw, 1<<20)
	tw := tar.NewWriter(bw)
	var st Stats
	buf := make([]byte, 1<<20)
	err := filepath.WalkDir(dir, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == dir {
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		fi, err := de.Info()
		if err != nil {
			return err
		}
		hdr := &tar.Header{
			Name:    filepath.ToSlash(rel),
			Mode:    int64(fi.Mode().Perm()),
			ModTime: fi.ModTime().Truncate(time.Second).UTC(),
		}
		// A directory keeps its set-group-ID bit (its files' group); no
		// file keeps set-user-ID or set-group-ID (see above).
		if fi.IsDir() && fi.Mode()&fs.ModeSetgid != 0 {
			hdr.Mode |= 0o2000
		}
		if fi.Mode()&fs.ModeSticky != 0 {
			hdr.Mode |= 0o1000
		}
		switch {
		case fi.IsDir():
			hdr.Typeflag, hdr.Name = tar.TypeDir, hdr.Name+"/"
			return tw.WriteHeader(hdr)
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
			return tw.WriteHeader(hdr)
		case fi.Mode().IsRegular():
			f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			hdr.Typeflag, hdr.Size = tar.TypeReg, fi.Size()
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
			n, err := io.CopyBuffer(tw, io.LimitReader(f, hdr.Size), buf)
			if err != nil {
				return err
			}
			if n != hdr.Size {
				return fmt.Errorf("%s changed while it was captured (%d bytes, not %d)", rel, n, hdr.Size)
			}
			st.Files++
			st.Bytes += n
		}
		return nil
	})
	if err != nil {
		return Stats{}, err
	}
	if err := tw.Close(); err != nil {
		return Stats{}, err
	}
	if err := bw.Flush(); err != nil {
		return Stats{}, err
	}
	st.Digest, st.Size = hex.EncodeToString(h.Sum(nil)), cw.n
	return st, nil
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// DigestMismatchError is a snapshot whose bytes hash to Got, not Want.
type DigestMismatchError struct{ Want, Got string }

func (e *DigestMismatchError) Error() string {
	return fmt.Sprintf("the snapshot's digest is sha256:%s, not sha256:%s", e.Got, e.Want)
}

// Restore unpacks snapshot r, whose sha256 must be want, into dir (an
// existing, empty directory). The whole stream is hashed; a mismatch is a
// *DigestMismatchError, and the caller must then discard dir (no replica
// may boot from it).
func Restore(r io.Reader, want, dir string) error {
	h := sha256.New()
	tr := io.TeeReader(r, h)
	if err := Extract(tr, dir); err != nil {
		return err
	}
	if _, err := io.Copy(io.Discard, tr); err != nil {
		return err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		return &DigestMismatchError{Want: want, Got: got}
	}
	return nil
}

// ExtractArchive unpacks a tar, gzipped or not, into dir.
func ExtractArchive(r io.Reader, dir string) error { return Extract(r, dir) }

// Extract unpacks tar stream r (gzipped or not) into dir, an existing
// empty directory, with berth's one extractor (package untar): no entry is
// written outside dir, whatever its name or the symbolic links before it
// say, an entry whose name leaves dir is refused, and so is a device node
// or fifo; no set-user-ID or set-group-ID file is made (a directory keeps
// its set-group-ID bit), and modification times are kept.
func Extract(r io.Reader, dir string) error {
	_, err := untar.Unpack(context.Background(), r, dir, untar.Options{RefuseOutside: true, Times: true})
	return err
}

// hashFile is the sha256 of a file, hex.
func hashFile(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
