package artifact

import (
	"bytes"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/berth-dev/berth/internal/web"
)

// BodyIdleTimeout is how long an upload may go without a byte before it is
// cut off. Each read pushes the connection's deadline out by this much, so
// a large blob is not bound by the server's whole-request ReadTimeout and a
// stalled one does not hold a temporary file forever.
const BodyIdleTimeout = 30 * time.Second

// maxTagBody bounds a tag PUT's body.
const maxTagBody = 4 << 10

// Handler serves the standalone `art` protocol (the package comment) at its
// root, for callers presenting "Authorization: Bearer <key>". An empty key
// refuses every request: a store without a key is not served.
func (s *Store) Handler(key string, log *slog.Logger) http.Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return web.Handle(log, func(w http.ResponseWriter, r *http.Request) error {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if key == "" || !ok || subtle.ConstantTimeCompare([]byte(got), []byte(key)) != 1 {
			return &web.Error{Status: http.StatusUnauthorized, Message: "a valid Bearer key is required",
				Header: http.Header{"Www-Authenticate": {`Bearer realm="art"`}}}
		}
		return s.Serve(w, r, "", strings.TrimPrefix(r.URL.Path, "/"))
	})
}

// Serve answers one request of the protocol for path rest (relative:
// "blobs/<hex>", "tags", "tags/<tag>"), through namespace ns or, when ns is
// "", the whole store. It authorises nothing: the standalone Handler checks
// the key, berth's admin API the caller's walls before calling it.
func (s *Store) Serve(w http.ResponseWriter, r *http.Request, ns, rest string) error {
	kind, name, _ := strings.Cut(rest, "/")
	switch {
	case kind == "blobs" && name != "":
		hex, ok := ParseDigest(name)
		if !ok {
			return web.Invalid("digest", "%q is not a sha256 digest (64 hex digits)", name)
		}
		return s.serveBlob(w, r, ns, hex)
	case kind == "tags" && name == "" && !strings.HasSuffix(rest, "/"):
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			return methodNotAllowed("GET, HEAD")
		}
		return s.listTagsHTTP(w, r, ns)
	case kind == "tags" && name != "":
		return s.serveTag(w, r, ns, name)
	}
	return web.Errorf(http.StatusNotFound, "no artifact route %q (blobs/<sha256>, tags, tags/<tag>)", rest)
}

func methodNotAllowed(allow string) error {
	return &web.Error{Status: http.StatusMethodNotAllowed, Message: "method not allowed (allowed: " + allow + ")",
		Header: http.Header{"Allow": {allow}}}
}

// noBlob is the one answer for a blob a namespace may not read and for one
// nobody stored: they must not differ.
func noBlob(ns, hex string) error {
	if ns == "" {
		return web.Errorf(http.StatusNotFound, "no blob sha256:%s", hex)
	}
	return web.Errorf(http.StatusNotFound, "no blob sha256:%s in namespace %q", hex, ns)
}

func (s *Store) serveBlob(w http.ResponseWriter, r *http.Request, ns, hex string) error {
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		if ns != "" && !s.Claimed(ns, hex) {
			return noBlob(ns, hex)
		}
		f, _, err := s.OpenBlob(hex)
		if errors.Is(err, ErrNotFound) {
			return noBlob(ns, hex)
		}
		if err != nil {
			return &web.Error{Status: http.StatusInternalServerError, Message: "the blob could not be read", Err: err}
		}
		defer f.Close()
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Docker-Content-Digest", "sha256:"+hex)
		w.Header().Set("ETag", `"sha256:`+hex+`"`)
		// Immutable: the name is the content.
		w.Header().Set("Cache-Control", "private, max-age=31536000, immutable")
		http.ServeContent(idleWriter{w, http.NewResponseController(w)}, r, "", time.Time{}, f)
		return nil
	case http.MethodPut:
		return s.putBlobHTTP(w, r, ns, hex)
	case http.MethodDelete:
		if ns != "" {
			return web.Errorf(http.StatusMethodNotAllowed, "blobs are shared between namespaces and cannot be deleted through one: delete the tags naming it")
		}
		if err := s.DeleteBlob(hex); errors.Is(err, ErrNotFound) {
			return noBlob(ns, hex)
		} else if err != nil {
			return &web.Error{Status: http.StatusInternalServerError, Message: "the blob could not be deleted", Err: err}
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	return methodNotAllowed("GET, HEAD, PUT, DELETE")
}

func (s *Store) putBlobHTTP(w http.ResponseWriter, r *http.Request, ns, hex string) error {
	if r.ContentLength > s.max {
		return web.Errorf(http.StatusRequestEntityTooLarge, "the blob's %d bytes exceed this store's limit of %d", r.ContentLength, s.max)
	}
	body := &idleReader{r: http.MaxBytesReader(w, r.Body, s.max), rc: http.NewResponseController(w)}
	n, created, err := s.PutBlob(hex, body, ns)
	var mm *DigestMismatchError
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mm):
		return web.Invalid("digest", "the body's digest is sha256:%s, not the path's sha256:%s", mm.Got, mm.Want)
	case errors.Is(err, ErrTooLarge), errors.As(err, &mbe):
		return web.Errorf(http.StatusRequestEntityTooLarge, "the blob exceeds this store's limit of %d bytes", s.max)
	case err != nil && body.failed:
		return web.Errorf(http.StatusBadRequest, "the upload was cut short: %v", err)
	case err != nil:
		return &web.Error{Status: http.StatusInternalServerError, Message: "the blob was not stored", Err: err}
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	w.Header().Set("Docker-Content-Digest", "sha256:"+hex)
	web.WriteJSON(w, status, BlobView{Digest: hex, Size: n})
	return nil
}

// BlobView answers a blob upload.
type BlobView struct {
	Digest string `json:"digest"`
	Size   int64  `json:"size"`
}

// idleReader extends the connection's read deadline before each read and
// remembers whether reading the body failed (the client's fault, not the
// disk's).
type idleReader struct {
	r      io.Reader
	rc     *http.ResponseController
	failed bool
}

func (b *idleReader) Read(p []byte) (int, error) {
	b.rc.SetReadDeadline(time.Now().Add(BodyIdleTimeout)) // unsupported writers: the server's ReadTimeout stays
	n, err := b.r.Read(p)
	if err != nil && err != io.EOF {
		b.failed = true
	}
	return n, err
}

// idleWriter extends the connection's write deadline before each write,
// so a reader that stops reading a large blob is cut off rather than hold
// the file open forever, however long a steady download takes.
type idleWriter struct {
	http.ResponseWriter
	rc *http.ResponseController
}

func (w idleWriter) Write(p []byte) (int, error) {
	w.rc.SetWriteDeadline(time.Now().Add(BodyIdleTimeout))
	return w.ResponseWriter.Write(p)
}

// fullTag is the store's name of a tag seen through namespace ns.
func fullTag(ns, tag string) string {
	if ns == "" {
		return tag
	}
	return ns + "/" + tag
}

func noTag(ns, tag string) error {
	if ns == "" {
		return web.Errorf(http.StatusNotFound, "no tag %q", tag)
	}
	return web.Errorf(http.StatusNotFound, "no tag %q in namespace %q", tag, ns)
}

func (s *Store) serveTag(w http.ResponseWriter, r *http.Request, ns, tag string) error {
	if why := CheckTag(tag); why != "" {
		return web.Invalid("tag", "%s", why)
	}
	full := fullTag(ns, tag)
	if len(full) > MaxTagLen {
		return web.Invalid("tag", "longer than %d characters with the namespace's prefix %q", MaxTagLen, ns+"/")
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		rec, err := s.Tag(full)
		if errors.Is(err, ErrNotFound) {
			return noTag(ns, tag)
		}
		if err != nil {
			return &web.Error{Status: http.StatusInternalServerError, Message: "the tag could not be read", Err: err}
		}
		web.WriteJSON(w, http.StatusOK, TagView{Tag: tag, TagRecord: rec})
		return nil
	case http.MethodPut:
		raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxTagBody))
		if err != nil {
			return web.Errorf(http.StatusRequestEntityTooLarge, "a tag's body is at most %d bytes", maxTagBody)
		}
		rec, ferr := parseTagBody(raw)
		if ferr != nil {
			return ferr
		}
		hex, _ := ParseDigest(rec.Digest)
		if ns != "" && !s.Claimed(ns, hex) {
			// Tagging would claim the blob: only its holders may.
			return noBlob(ns, hex)
		}
		if rec.MediaType == MediaTypeDockerfile {
			if err := s.checkManifest(ns, hex); err != nil {
				return err
			}
		}
		rec, err = s.PutTag(full, rec)
		if errors.Is(err, ErrNotFound) {
			return noBlob(ns, hex)
		}
		if err != nil {
			return &web.Error{Status: http.StatusInternalServerError, Message: "the tag was not saved", Err: err}
		}
		web.WriteJSON(w, http.StatusOK, TagView{Tag: tag, TagRecord: rec})
		return nil
	case http.MethodDelete:
		if err := s.DeleteTag(full); errors.Is(err, ErrNotFound) {
			return noTag(ns, tag)
		} else if err != nil {
			return &web.Error{Status: http.StatusInternalServerError, Message: "the tag was not deleted", Err: err}
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	return methodNotAllowed("GET, HEAD, PUT, DELETE")
}

// parseTagBody reads a tag PUT's body: a bare digest (what `art` clients
// send) or {"digest", "media_type"}.
func parseTagBody(raw []byte) (TagRecord, error) {
	raw = bytes.TrimSpace(raw)
	var rec TagRecord
	if len(raw) > 0 && raw[0] == '{' {
		var req struct {
			Digest    string `json:"digest"`
			MediaType string `json:"media_type"`
		}
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			return rec, web.Errorf(http.StatusBadRequest, "the tag's body: %v", err)
		}
		rec.Digest, rec.MediaType = req.Digest, req.MediaType
	} else {
		rec.Digest = string(raw)
	}
	if rec.Digest == "" {
		return rec, web.Invalid("digest", "required (the body is a digest or {\"digest\": …})")
	}
	hex, ok := ParseDigest(rec.Digest)
	if !ok {
		return rec, web.Invalid("digest", "%q is not a sha256 digest (64 hex digits)", rec.Digest)
	}
	if len(rec.MediaType) > 128 || strings.ContainsAny(rec.MediaType, "\r\n\x00") {
		return rec, web.Invalid("media_type", "at most 128 characters on one line")
	}
	rec.Digest = hex
	return rec, nil
}

func (s *Store) listTagsHTTP(w http.ResponseWriter, r *http.Request, ns string) error {
	prefix := r.URL.Query().Get("prefix")
	if len(prefix) > MaxTagLen {
		return web.Invalid("prefix", "longer than %d characters", MaxTagLen)
	}
	strip := ""
	if ns != "" {
		strip = ns + "/"
	}
	tags, err := s.Tags(strip + prefix)
	if err != nil {
		return &web.Error{Status: http.StatusInternalServerError, Message: "the tags could not be listed", Err: err}
	}
	for i := range tags {
		tags[i].Tag = strings.TrimPrefix(tags[i].Tag, strip)
	}
	w.Header().Set("X-Total-Count", strconv.Itoa(len(tags)))
	web.WriteJSON(w, http.StatusOK, tags)
	return nil
}

// checkManifest refuses a tag of media type MediaTypeDockerfile on a blob
// that is no Dockerfile manifest, or whose context the namespace could not
// read: a build would fail on it later, with the author long gone.
func (s *Store) checkManifest(ns, hex string) error {
	f, _, err := s.OpenBlob(hex)
	if errors.Is(err, ErrNotFound) {
		return noBlob(ns, hex)
	}
	if err != nil {
		return &web.Error{Status: http.StatusInternalServerError, Message: "the manifest could not be read", Err: err}
	}
	defer f.Close()
	m, err := ParseDockerfileManifest(f)
	if err != nil {
		return web.Invalid("media_type", "%s, but the blob is %v", MediaTypeDockerfile, err)
	}
	if c := m.ContextDigest; c != "" {
		if _, err := s.Stat(c); err != nil || ns != "" && !s.Claimed(ns, c) {
			return web.Invalid("media_type", "%s, but its context_digest sha256:%s is not in the store", MediaTypeDockerfile, c)
		}
	}
	return nil
}
