// Package site serves the files of a site deployment (app-lb.md §3.7): a
// directory on the gateway host exposed read-only over HTTP, with no
// listings, rewrites or compression.
//
// Every file is resolved through an [os.Root] opened on the site root, so a
// request can never reach outside that directory: ".." components, absolute
// paths and symbolic links that escape the root are refused by the same
// openat-based resolution the os package uses for untrusted names, not by
// string checks alone. Symbolic links that stay inside the root are
// followed; absolute symbolic links are refused even when they point back
// inside (an os.Root rule).
//
// The root is opened once per request rather than once per [Handler]. That
// costs one open and one close, and buys two things: a handler needs no
// Close (it is rebuilt on every config change and simply dropped), and a
// root that is replaced on disk (an artifact pull renaming a fresh tree into
// place, or a root created after the deployment) is picked up by the next
// request instead of serving a stale directory handle forever.
package site

import (
	"errors"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
)

// Config is a site deployment's serving configuration: apitype.SiteSpec
// after the caller has applied its defaults. The handler uses it as given.
type Config struct {
	// Root is the directory on the host whose files are served.
	Root string

	// Within, when set, is a directory Root must lie in (the namespace's
	// subtree of the sites directory, or a directory the operator
	// allowed). Root is then opened through an os.Root on Within, so
	// neither Root itself nor any component of it can be a symbolic link
	// that leads out of Within; such a root answers as unreadable.
	Within string

	// Index is the file served for a directory request that ends in a
	// slash, resolved inside that directory. The caller applies the
	// "index.html" default; "" means directory requests answer 404.
	Index string

	// NotFound is an optional path, relative to Root, of a page served with
	// status 404 when a requested file does not exist. A leading "/" is
	// ignored. If the page itself is missing the plain "not found" text is
	// used instead.
	NotFound string

	// SPA makes a request for a file that does not exist serve Root's Index
	// with 200, so client-side routers see every deep link. It takes
	// precedence over NotFound. Existing directories keep directory rules.
	SPA bool

	// CacheControl is the Cache-Control value of every served file (not of
	// error responses, so a page that is deployed later is not hidden behind
	// a cached 404). The caller applies the "public, max-age=300" default;
	// "" sends no Cache-Control.
	CacheControl string
}

// HeaderSite is the response header that explains a 404 caused by a root
// that cannot serve at all: its value is "root-" followed by the Status
// (for example "root-empty"), as in app-lb.
const HeaderSite = "X-Applb-Site"

// Handler serves one site. It is immutable after New and safe for
// concurrent use.
type Handler struct {
	cfg Config
}

// New returns a handler for cfg. It does not touch the file system, so it is
// cheap enough to call on every configuration change, and a root that does
// not exist yet is not an error (requests answer 404 until it is filled).
func New(cfg Config) *Handler {
	cfg.NotFound = strings.TrimLeft(cfg.NotFound, "/")
	return &Handler{cfg: cfg}
}

// ServeHTTP serves r.URL.Path, which the caller has already made relative to
// the site root (strip_prefix applied). Only GET and HEAD are allowed.
//
// Responses:
//   - a regular file: 200 through [http.ServeContent], which implements
//     If-None-Match/If-Modified-Since (304), If-Match/If-Unmodified-Since
//     (412), If-Range, and Range: one range gives 206 with Content-Range,
//     several give 206 multipart/byteranges (or 200 with the whole file when
//     the ranges add up to more than the file), an unsatisfiable range gives
//     416 with "Content-Range: bytes */<size>", a syntactically invalid
//     bytes range gives 416 without Content-Range, and a Range in another
//     unit is ignored. The body is streamed from the open file (sendfile
//     where the connection allows it), never read whole into memory.
//   - a directory without a trailing slash: 301 to the relative
//     "<last segment>/" plus the query, which stays right behind a stripped
//     path prefix. The site root itself ("" or "/") is never redirected:
//     after strip_prefix the handler cannot tell "/docs" from "/docs/".
//   - a directory with a trailing slash: its Index, else the NotFound page
//     or "not found\n" (404; the SPA fallback does not apply).
//   - a regular file with a trailing slash: treated as missing.
//   - a missing path: the SPA index (200), else the NotFound page (404),
//     else "not found\n" (404).
//   - a root that is missing, not a directory, unreadable or empty: 404
//     "not found: this site has no files deployed yet\n" with
//     [HeaderSite] set to "root-<status>".
//   - a path with a NUL byte: 400. A path with "." or ".." segments (also
//     percent-encoded, once or twice) or backslashes: 404 without touching
//     the file system.
//
// Only regular files are ever served: directories are never listed, and
// FIFOs, sockets and devices inside the root are answered as missing (they
// are opened non-blocking, so a FIFO cannot hang the request).
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeText(w, r, http.StatusMethodNotAllowed, "method not allowed\n")
		return
	}
	name, slash, err := cleanPath(r.URL)
	if err != nil {
		if errors.Is(err, errBadPath) {
			writeText(w, r, http.StatusBadRequest, "bad request: invalid path\n")
		} else {
			writeText(w, r, http.StatusNotFound, "not found\n")
		}
		return
	}

	root, err := h.cfg.open()
	if err != nil {
		st := Config{Root: h.cfg.Root, Within: h.cfg.Within}.Inspect().Status
		if st == StatusOK || st == StatusEmpty {
			// Inspect raced with a change on disk, or could list a
			// directory that openat refused; either way the root
			// cannot be read right now.
			st = StatusUnreadable
		}
		writeNoFiles(w, r, st)
		return
	}
	defer root.Close()

	f, fi, err := openFile(root, name)
	if err != nil {
		h.notFound(w, r, root, true)
		return
	}
	if fi.Mode().IsRegular() && !slash {
		defer f.Close()
		h.serveContent(w, r, f, fi)
		return
	}
	f.Close()
	if !fi.IsDir() {
		// A special file, or a regular file asked for as a directory
		// ("/style.css/"), which POSIX would answer with ENOTDIR.
		h.notFound(w, r, root, true)
		return
	}

	if !slash && name != "." {
		redirectToDir(w, r)
		return
	}
	if h.cfg.Index == "" {
		h.notFound(w, r, root, false)
		return
	}
	index := h.cfg.Index
	if name != "." {
		index = name + "/" + index
	}
	f, fi, err = openFile(root, index)
	if err != nil {
		h.notFound(w, r, root, false)
		return
	}
	defer f.Close()
	if !fi.Mode().IsRegular() {
		h.notFound(w, r, root, false)
		return
	}
	h.serveContent(w, r, f, fi)
}

// serveContent sends a regular file with the site's caching headers and
// leaves the conditional and range logic to http.ServeContent.
func (h *Handler) serveContent(w http.ResponseWriter, r *http.Request, f *os.File, fi os.FileInfo) {
	hdr := w.Header()
	if h.cfg.CacheControl != "" {
		hdr.Set("Cache-Control", h.cfg.CacheControl)
	}
	hdr.Set("Etag", etag(fi))
	if rng := r.Header.Get("Range"); rng != "" && !strings.HasPrefix(rng, "bytes=") {
		// RFC 9110 §14.2: a Range in a unit we do not know is ignored.
		// ServeContent would answer 416 instead.
		r = r.Clone(r.Context())
		r.Header.Del("Range")
	}
	// ServeContent sets Content-Type (extension, then sniffing the first
	// 512 bytes), Last-Modified and Accept-Ranges itself.
	http.ServeContent(w, r, fi.Name(), fi.ModTime(), f)
}

// notFound answers a path that names nothing servable. spa reports whether
// the SPA fallback applies (it does not for an existing directory that has
// no index).
func (h *Handler) notFound(w http.ResponseWriter, r *http.Request, root *os.Root, spa bool) {
	if spa && h.cfg.SPA && h.cfg.Index != "" {
		if f, fi, err := openFile(root, h.cfg.Index); err == nil {
			defer f.Close()
			if fi.Mode().IsRegular() {
				h.serveContent(w, r, f, fi)
				return
			}
		}
	}
	if h.cfg.NotFound != "" {
		if f, fi, err := openFile(root, h.cfg.NotFound); err == nil {
			defer f.Close()
			if fi.Mode().IsRegular() {
				servePage(w, r, f, fi, http.StatusNotFound)
				return
			}
		}
	}
	if isEmpty(root) {
		writeNoFiles(w, r, StatusEmpty)
		return
	}
	writeText(w, r, http.StatusNotFound, "not found\n")
}

// servePage sends a whole file with a fixed status and no validators: the
// not_found page is an error body, so conditional and range requests do not
// apply to it.
func servePage(w http.ResponseWriter, r *http.Request, f *os.File, fi os.FileInfo, code int) {
	ctype, err := contentType(f, fi.Name())
	if err != nil {
		writeText(w, r, http.StatusInternalServerError, "internal server error\n")
		return
	}
	hdr := w.Header()
	hdr.Set("Content-Type", ctype)
	hdr.Set("Content-Length", strconv.FormatInt(fi.Size(), 10))
	w.WriteHeader(code)
	if r.Method != http.MethodHead {
		io.CopyN(w, f, fi.Size()) // a failed copy leaves a short body; nothing else to tell the client
	}
}

// writeNoFiles answers every request to a root that cannot serve.
func writeNoFiles(w http.ResponseWriter, r *http.Request, status string) {
	w.Header().Set(HeaderSite, "root-"+status)
	writeText(w, r, http.StatusNotFound, "not found: this site has no files deployed yet\n")
}

// writeText writes a short text/plain response. The body is skipped for
// HEAD so that handlers wrapped by recorders behave like a real server.
func writeText(w http.ResponseWriter, r *http.Request, code int, body string) {
	hdr := w.Header()
	hdr.Set("Content-Type", "text/plain; charset=utf-8")
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(code)
	if r.Method != http.MethodHead {
		io.WriteString(w, body)
	}
}

// redirectToDir answers a directory requested without its trailing slash.
// The Location is relative ("<last segment>/"), not built from r.URL.Path,
// because the path the client used may carry a prefix the gateway stripped;
// http.Redirect would turn it into an absolute path on the stripped URL.
func redirectToDir(w http.ResponseWriter, r *http.Request) {
	p := r.URL.EscapedPath()
	seg := p[strings.LastIndexByte(p, '/')+1:]
	if strings.Contains(seg, ":") {
		// "a:b/" would parse as a URL with scheme "a".
		seg = "./" + seg
	}
	loc := seg + "/"
	if r.URL.RawQuery != "" {
		loc += "?" + r.URL.RawQuery
	}
	w.Header().Set("Location", loc)
	w.WriteHeader(http.StatusMovedPermanently)
}

// errBadPath marks a request path that is malformed rather than merely
// refused; it is answered with 400.
var errBadPath = errors.New("site: malformed request path")

// errRefusedPath marks a path that tries to leave the root or is not in
// canonical form; it is answered with 404.
var errRefusedPath = errors.New("site: refused request path")

// cleanPath turns a request URL into a name for os.Root ("." for the root)
// and reports whether the path ended in a slash. Empty segments are dropped.
// It refuses NUL bytes, backslashes, and "." or ".." segments in the decoded
// path, in the raw path, and after one more round of percent-decoding (so a
// double-encoded "%252e%252e" is refused too, in case something in front of
// us decodes twice). os.Root would refuse an escape on its own; failing
// early keeps such requests off the file system and out of the SPA/404-page
// fallbacks.
func cleanPath(u *url.URL) (name string, slash bool, err error) {
	p := u.Path
	if strings.IndexByte(p, 0) >= 0 {
		return "", false, errBadPath
	}
	if u.RawPath != "" {
		for _, seg := range strings.Split(u.RawPath, "/") {
			dec, err := url.PathUnescape(seg)
			if err != nil {
				return "", false, errBadPath
			}
			// An encoded slash makes one raw segment hold several.
			for _, part := range strings.Split(dec, "/") {
				if err := checkSegment(part); err != nil {
					return "", false, err
				}
			}
		}
	}
	var segs []string
	for _, seg := range strings.Split(p, "/") {
		if seg == "" {
			continue
		}
		if err := checkSegment(seg); err != nil {
			return "", false, err
		}
		segs = append(segs, seg)
	}
	if len(segs) == 0 {
		return ".", true, nil
	}
	return strings.Join(segs, "/"), strings.HasSuffix(p, "/"), nil
}

// checkSegment vets one decoded path segment, and the segment decoded once
// more if it still contains escapes.
func checkSegment(seg string) error {
	if err := checkDecoded(seg); err != nil {
		return err
	}
	if strings.IndexByte(seg, '%') >= 0 {
		if dec, err := url.PathUnescape(seg); err == nil && dec != seg {
			if strings.IndexByte(dec, '/') >= 0 {
				return errRefusedPath
			}
			return checkDecoded(dec)
		}
	}
	return nil
}

func checkDecoded(seg string) error {
	switch {
	case strings.IndexByte(seg, 0) >= 0:
		return errBadPath
	case seg == "." || seg == "..", strings.IndexByte(seg, '\\') >= 0:
		return errRefusedPath
	}
	return nil
}

// openFile opens name inside root without blocking on special files and
// returns its FileInfo from the open descriptor, so the type that is checked
// is the type of what would be read.
func openFile(root *os.Root, name string) (*os.File, os.FileInfo, error) {
	f, err := root.OpenFile(name, openFlags, 0)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, fi, nil
}

// isEmpty reports whether the root directory has no entries. It runs only
// on the 404 path, so serving existing files never lists the directory.
func isEmpty(root *os.Root) bool {
	d, err := root.Open(".")
	if err != nil {
		return false
	}
	defer d.Close()
	_, err = d.ReadDir(1)
	return err == io.EOF
}
