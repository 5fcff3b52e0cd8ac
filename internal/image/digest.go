package image

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"github.com/berth-dev/berth/internal/untar"
)

// DigestPrefix starts every digest: the hash is SHA-256.
const DigestPrefix = "sha256:"

// Digest returns the content digest of the tree at dir and the bytes of
// its regular files. The digest covers, for every entry in lexical walk
// order, its path relative to dir, its type, its permission bits (with
// setuid, setgid and sticky), the contents of regular files and the targets
// of symlinks; ownership and times are left out on purpose, so the same
// tree unpacked by different users or at different times has one digest.
// Every field is length-prefixed, so no two trees can write the same
// stream.
func Digest(dir string) (string, int64, error) {
	h := sha256.New()
	var size int64
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		writeField(h, filepath.ToSlash(rel))
		mode := fi.Mode()
		writeField(h, typeChar(mode)+strconv.FormatUint(uint64(untar.UnixPerm(mode)), 8))
		switch {
		case mode.IsRegular():
			f, err := os.Open(path)
			if err != nil {
				return err
			}
			fh := sha256.New()
			n, err := io.Copy(fh, f)
			f.Close()
			if err != nil {
				return err
			}
			size += n
			writeField(h, strconv.FormatInt(n, 10)+":"+hex.EncodeToString(fh.Sum(nil)))
		case mode&fs.ModeSymlink != 0:
			target, err := os.Readlink(path)
			if err != nil {
				return err
			}
			writeField(h, target)
		case mode&fs.ModeDevice != 0:
			writeField(h, deviceNumber(fi))
		}
		return nil
	})
	if err != nil {
		return "", 0, fmt.Errorf("image: digest of %s: %w", dir, err)
	}
	return DigestPrefix + hex.EncodeToString(h.Sum(nil)), size, nil
}

// writeField writes s with its length, so fields never run together.
func writeField(h hash.Hash, s string) {
	fmt.Fprintf(h, "%d:%s\n", len(s), s)
}

// typeChar names an entry's type in the digest stream.
func typeChar(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "d"
	case m&fs.ModeSymlink != 0:
		return "l"
	case m&fs.ModeCharDevice != 0:
		return "c"
	case m&fs.ModeDevice != 0:
		return "b"
	case m&fs.ModeNamedPipe != 0:
		return "p"
	case m&fs.ModeSocket != 0:
		return "s"
	default:
		return "f"
	}
}
