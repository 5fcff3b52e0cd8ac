package site

import (
	"encoding/binary"
	"hash/fnv"
	"io"
	"mime"
	"net/http"
	"os"
	"path"
	"strconv"
)

// etag returns a strong validator for fi built from its size, modification
// time (nanoseconds) and, where the platform has them, device and inode
// numbers, hashed with FNV-1a so the tag is short and does not expose them.
// This is the nginx-style "metadata" ETag, chosen over a content hash
// because it costs nothing per request and needs no cache: an in-place edit
// changes the mtime and usually the size, and a deploy that renames a new
// tree into place changes the inode even when it preserves mtimes. The one
// case it misses is a same-size rewrite that also restores the old mtime
// exactly, which no normal deploy does.
func etag(fi os.FileInfo) string {
	var buf [32]byte
	dev, ino := fileID(fi)
	binary.LittleEndian.PutUint64(buf[0:], dev)
	binary.LittleEndian.PutUint64(buf[8:], ino)
	binary.LittleEndian.PutUint64(buf[16:], uint64(fi.Size()))
	binary.LittleEndian.PutUint64(buf[24:], uint64(fi.ModTime().UnixNano()))
	h := fnv.New64a()
	h.Write(buf[:])
	return `"` + strconv.FormatUint(h.Sum64(), 16) + `"`
}

// contentType picks a Content-Type the way http.ServeContent does: by
// extension, else by sniffing the first 512 bytes. f is rewound afterwards.
func contentType(f *os.File, name string) (string, error) {
	if ct := mime.TypeByExtension(path.Ext(name)); ct != "" {
		return ct, nil
	}
	var buf [512]byte
	n, err := io.ReadFull(f, buf[:])
	if err != nil && err != io.EOF && err != io.ErrUnexpectedEOF {
		return "", err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return "", err
	}
	return http.DetectContentType(buf[:n]), nil
}
