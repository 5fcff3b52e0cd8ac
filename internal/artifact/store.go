// Package artifact is berth's embedded artifact store and the client its
// jobs fetch artifacts with.
//
// The store is content-addressed blobs plus tags, speaking the `art`
// protocol app-lb's artifact store gateway fronts (app-lb.md §1.3):
//
//	GET|HEAD /blobs/<sha256hex>   the bytes (ranges served)
//	PUT      /blobs/<sha256hex>   upload; the body's SHA-256 must equal the
//	                              path's digest (400 naming both), and a
//	                              second upload of a stored blob is a no-op
//	DELETE   /blobs/<sha256hex>   standalone only (see Serve)
//	GET      /tags[?prefix=P]     TagView[] sorted by tag
//	GET|HEAD /tags/<tag>          TagView
//	PUT      /tags/<tag>          body: a bare digest, or
//	                              {"digest": "...", "media_type": "..."}
//	DELETE   /tags/<tag>          204
//
// A digest is 64 lowercase hex digits, optionally written "sha256:<hex>".
// A tag is 1–200 characters of A-Z a-z 0-9 . _ - /, in non-empty
// slash-separated components none of which is "." or "..". A tag can only
// name a blob the store holds. A manifest is a blob like any other, known
// by its tag's media_type: "heyvm.dockerfile.v1" (DockerfileManifest) is
// checked when tagged.
//
// On disk, under the store's root (<data>/artifacts for berth's own):
//
//	blobs/sha256/<hex>   one file per blob
//	tags/<tag>           a TagRecord (JSON), "/" written as "%2F"
//	claims/<ns>/<hex>    empty: namespace ns may read blob hex (see below)
//	tmp/                 uploads in progress, emptied at open
//
// Durability: a blob is written to tmp/, fsynced, renamed into blobs/ and
// the directory fsynced before the upload is acknowledged, so an
// acknowledged blob survives a crash and a partial one is never visible
// under its digest (only complete, verified files are renamed there). Tag
// and claim files are written the same way, so a tag moves atomically from
// one digest to the next. A directory laid out this way is also what a
// spec's absolute store root names (Open).
//
// Namespaces (Serve with a namespace): tags are stored as "<ns>/<tag>" and
// seen through the namespace without the prefix. Blobs are global on disk
// (one copy of equal bytes), but a namespace reads a blob only if it
// claimed it: by uploading it (which proves it holds the bytes), or by a
// tag "<ns>/…" naming it, however that tag was written. Claims are kept
// after the tag moves on. Without a claim the answer is the same 404 as
// for a digest nobody stored, so tenant B learns nothing — not even
// existence — from a digest of tenant A's private bytes.
package artifact

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// DefaultMaxBlobBytes bounds one upload unless the operator says
// otherwise (berth serve --artifact-max-bytes).
const DefaultMaxBlobBytes int64 = 4 << 30

// MaxTagLen bounds a tag's length.
const MaxTagLen = 200

var (
	// ErrNotFound: no such blob or tag (or, through a namespace, none it
	// may read).
	ErrNotFound = errors.New("not found")
	// ErrTooLarge: an upload over the store's MaxBlobBytes.
	ErrTooLarge = errors.New("blob too large")
)

// DigestMismatchError is an upload or a fetch whose bytes hash to Got
// rather than Want.
type DigestMismatchError struct{ Want, Got string }

func (e *DigestMismatchError) Error() string {
	return fmt.Sprintf("the bytes' digest is sha256:%s, not sha256:%s", e.Got, e.Want)
}

// StoreOptions configure a Store.
type StoreOptions struct {
	// MaxBlobBytes bounds one blob; zero is DefaultMaxBlobBytes.
	MaxBlobBytes int64
	// Now is the clock of tag records; nil is time.Now.
	Now func() time.Time
}

// Store is a content-addressed blob and tag store in a directory. It is
// safe for concurrent use: every visible change is a rename.
type Store struct {
	root string
	max  int64
	now  func() time.Time
}

// TagRecord is what a tag file holds.
type TagRecord struct {
	Digest    string    `json:"digest"`
	MediaType string    `json:"media_type,omitempty"`
	Size      int64     `json:"size"`
	UpdatedAt time.Time `json:"updated_at"`
}

// TagView is a tag on the wire: Tag is relative to the path it was read
// through (without "<ns>/" through a namespace).
type TagView struct {
	Tag string `json:"tag"`
	TagRecord
}

// NewStore opens (creating) the store rooted at dir and empties its tmp/,
// where only uploads cut short by a crash can remain.
func NewStore(dir string, o StoreOptions) (*Store, error) {
	if o.MaxBlobBytes <= 0 {
		o.MaxBlobBytes = DefaultMaxBlobBytes
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	s := &Store{root: dir, max: o.MaxBlobBytes, now: o.Now}
	if err := os.RemoveAll(s.path("tmp")); err != nil {
		return nil, fmt.Errorf("artifact store: %w", err)
	}
	for _, d := range []string{"blobs/sha256", "tags", "claims", "tmp"} {
		if err := os.MkdirAll(s.path(d), 0o700); err != nil {
			return nil, fmt.Errorf("artifact store: %w", err)
		}
	}
	return s, nil
}

// Root is the store's directory.
func (s *Store) Root() string { return s.root }

// MaxBlobBytes is the most one upload may hold.
func (s *Store) MaxBlobBytes() int64 { return s.max }

func (s *Store) path(rel ...string) string { return filepath.Join(append([]string{s.root}, rel...)...) }

// ParseDigest accepts "<hex>" or "sha256:<hex>" and returns the hex, or
// reports that d is no digest.
func ParseDigest(d string) (string, bool) {
	d = strings.TrimPrefix(d, "sha256:")
	if len(d) != 64 {
		return "", false
	}
	for i := 0; i < len(d); i++ {
		if c := d[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return "", false
		}
	}
	return d, true
}

// CheckTag says what is wrong with a tag, or "".
func CheckTag(tag string) string {
	switch {
	case tag == "":
		return "empty"
	case len(tag) > MaxTagLen:
		return fmt.Sprintf("longer than %d characters", MaxTagLen)
	}
	for i := 0; i < len(tag); i++ {
		c := tag[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-' || c == '/') {
			return fmt.Sprintf("%q may only contain A-Z a-z 0-9 . _ - /", tag)
		}
	}
	for _, c := range strings.Split(tag, "/") {
		if c == "" || c == "." || c == ".." {
			return fmt.Sprintf("%q has an empty, \".\" or \"..\" component", tag)
		}
	}
	return ""
}

// tagFile is a tag's file name: CheckTag allows no '%', so the escape is
// unambiguous, and the tags stay one flat directory (no tag is both a file
// and a directory).
func tagFile(tag string) string { return strings.ReplaceAll(tag, "/", "%2F") }

// BlobPath is where blob hex lives (whether or not it does).
func (s *Store) BlobPath(hex string) string { return s.path("blobs", "sha256", hex) }

// Stat returns blob hex's size, or ErrNotFound.
func (s *Store) Stat(hex string) (int64, error) {
	fi, err := os.Stat(s.BlobPath(hex))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, ErrNotFound
	}
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

// OpenBlob opens blob hex for reading, or returns ErrNotFound.
func (s *Store) OpenBlob(hex string) (*os.File, int64, error) {
	f, err := os.Open(s.BlobPath(hex))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0, ErrNotFound
	}
	if err != nil {
		return nil, 0, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	return f, fi.Size(), nil
}

// PutBlob stores r under hex once its SHA-256 is checked, claiming it for
// namespace ns (none when ""). It returns the size and whether the blob was
// new. A mismatch is a *DigestMismatchError, an oversized body ErrTooLarge;
// either way nothing becomes visible. An existing blob is still read in
// full and verified before the claim: the claim is for holders of the
// bytes, not of the digest.
func (s *Store) PutBlob(hex string, r io.Reader, ns string) (int64, bool, error) {
	tmp, err := os.CreateTemp(s.path("tmp"), "blob-*")
	if err != nil {
		return 0, false, err
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, h), io.LimitReader(r, s.max+1))
	if err == nil && n > s.max {
		err = ErrTooLarge
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, false, err
	}
	if got := fmt.Sprintf("%x", h.Sum(nil)); got != hex {
		return 0, false, &DigestMismatchError{Want: hex, Got: got}
	}
	created := false
	if _, err := os.Stat(s.BlobPath(hex)); errors.Is(err, fs.ErrNotExist) {
		if err := os.Rename(tmp.Name(), s.BlobPath(hex)); err != nil {
			return 0, false, err
		}
		if err := syncDir(s.path("blobs", "sha256")); err != nil {
			return 0, false, err
		}
		created = true
	} else if err != nil {
		return 0, false, err
	}
	if err := s.claim(ns, hex); err != nil {
		return 0, false, err
	}
	return n, created, nil
}

// DeleteBlob removes blob hex (standalone stores: berth's namespaces
// cannot, since other namespaces may hold the same bytes).
func (s *Store) DeleteBlob(hex string) error {
	err := os.Remove(s.BlobPath(hex))
	if errors.Is(err, fs.ErrNotExist) {
		return ErrNotFound
	}
	if err != nil {
		return err
	}
	return syncDir(s.path("blobs", "sha256"))
}

// claim records that namespace ns may read blob hex ("" claims nothing).
func (s *Store) claim(ns, hex string) error {
	if ns == "" || s.Claimed(ns, hex) {
		return nil
	}
	dir := s.path("claims", ns)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := writeAtomic(s.path("tmp"), filepath.Join(dir, hex), nil); err != nil {
		return err
	}
	return syncDir(s.path("claims"))
}

// Claimed reports whether namespace ns may read blob hex.
func (s *Store) Claimed(ns, hex string) bool {
	_, err := os.Stat(s.path("claims", ns, hex))
	return err == nil
}

// PutTag points tag at the stored blob of rec.Digest (ErrNotFound if it is
// not stored), filling the record's size and time. A tag "<ns>/…" claims
// the blob for namespace ns.
func (s *Store) PutTag(tag string, rec TagRecord) (TagRecord, error) {
	if why := CheckTag(tag); why != "" {
		return TagRecord{}, fmt.Errorf("tag: %s", why)
	}
	hex, ok := ParseDigest(rec.Digest)
	if !ok {
		return TagRecord{}, fmt.Errorf("digest: %q is not a sha256 digest (64 hex digits)", rec.Digest)
	}
	size, err := s.Stat(hex)
	if err != nil {
		return TagRecord{}, err
	}
	rec.Digest, rec.Size, rec.UpdatedAt = hex, size, s.now().UTC()
	if ns, _, ok := strings.Cut(tag, "/"); ok {
		if err := s.claim(ns, hex); err != nil {
			return TagRecord{}, err
		}
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return TagRecord{}, err
	}
	if err := writeAtomic(s.path("tmp"), s.path("tags", tagFile(tag)), b); err != nil {
		return TagRecord{}, err
	}
	return rec, syncDir(s.path("tags"))
}

// Tag reads a tag, or returns ErrNotFound.
func (s *Store) Tag(tag string) (TagRecord, error) {
	if CheckTag(tag) != "" {
		return TagRecord{}, ErrNotFound
	}
	return readTag(s.path("tags", tagFile(tag)))
}

func readTag(file string) (TagRecord, error) {
	b, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return TagRecord{}, ErrNotFound
	}
	if err != nil {
		return TagRecord{}, err
	}
	var rec TagRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return TagRecord{}, fmt.Errorf("tag file %s: %w", filepath.Base(file), err)
	}
	return rec, nil
}

// DeleteTag removes a tag, or returns ErrNotFound.
func (s *Store) DeleteTag(tag string) error {
	if CheckTag(tag) != "" {
		return ErrNotFound
	}
	err := os.Remove(s.path("tags", tagFile(tag)))
	if errors.Is(err, fs.ErrNotExist) {
		return ErrNotFound
	}
	if err != nil {
		return err
	}
	return syncDir(s.path("tags"))
}

// Tags lists the tags starting with prefix, sorted.
func (s *Store) Tags(prefix string) ([]TagView, error) {
	return listTags(s.path("tags"), prefix)
}

func listTags(dir, prefix string) ([]TagView, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	out := []TagView{}
	for _, e := range ents {
		tag := strings.ReplaceAll(e.Name(), "%2F", "/")
		if !e.Type().IsRegular() || CheckTag(tag) != "" || !strings.HasPrefix(tag, prefix) {
			continue
		}
		rec, err := readTag(filepath.Join(dir, e.Name()))
		if errors.Is(err, ErrNotFound) {
			continue // deleted since the listing
		}
		if err != nil {
			return nil, err
		}
		out = append(out, TagView{Tag: tag, TagRecord: rec})
	}
	slices.SortFunc(out, func(a, b TagView) int { return strings.Compare(a.Tag, b.Tag) })
	return out, nil
}

// writeAtomic writes b to file through a fsynced temporary file in tmpDir
// and a rename; the caller fsyncs file's directory.
func writeAtomic(tmpDir, file string, b []byte) error {
	f, err := os.CreateTemp(tmpDir, "meta-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(f.Name(), file)
}

// syncDir fsyncs a directory, making the renames into it durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// hexOf is the lowercase hex of a hash sum.
func hexOf(sum []byte) string { return hex.EncodeToString(sum) }
