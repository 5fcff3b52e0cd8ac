package agent

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"strings"
	"sync"
	"unicode/utf8"
)

// The text-oriented files endpoints: read, write (JSON), edit. Glob and
// grep are in files_search.go, patch in files_patch.go.

// fileLocks holds one rootLock per root directory (key Options.Root),
// which serializes the files endpoints' read-check-replace steps: with it
// an expected_sha256 precondition holds until the replace, and a patch's
// files change together, as far as the agent's own writers (and WriteFile
// callers on the host) can tell. Keyed by root rather than by Server so
// that servers sharing a tree share the lock.
var fileLocks sync.Map

func (s *Server) fileLock() *rootLock { return rootLockFor(s.opts.Root) }

func rootLockFor(root string) *rootLock {
	l, _ := fileLocks.LoadOrStore(root, &rootLock{root: root})
	return l.(*rootLock)
}

// rootLock is a mutex for the writers of this process and, where the
// system has flock, an exclusive flock of the root directory for those of
// others: berth writing a workspace on the host (WriteFile) and the agent
// writing it inside the sandbox hold the same directory's lock. The flock
// is taken for a bounded time only (lockWait): anything in the sandbox can
// flock its root too, and must not be able to stall the agent; past that
// the writer goes on with the mutex alone, as it did before there was a
// second writer.
type rootLock struct {
	root string
	mu   sync.Mutex
	dir  *os.File // the root directory, flocked, while locked
}

// Lock takes the lock.
func (l *rootLock) Lock() {
	l.mu.Lock()
	if l.root == "" {
		return
	}
	d, err := os.Open(l.root)
	if err != nil {
		return // the operation itself reports a missing root
	}
	if !flockDir(d) {
		d.Close()
		return
	}
	l.dir = d
}

// Unlock releases the lock.
func (l *rootLock) Unlock() {
	if l.dir != nil {
		l.dir.Close() // closing the last descriptor drops the flock
		l.dir = nil
	}
	l.mu.Unlock()
}

// Stat follows symlinks; os.Root's Stat has the same shape, and follows
// them only inside the root.
func (osFS) Stat(name string) (fs.FileInfo, error) { return os.Stat(name) }

// statFollow describes name, following a final symlink (within the root
// when f is an *os.Root).
func statFollow(f fsys, name string) (fs.FileInfo, error) {
	if st, ok := f.(interface {
		Stat(string) (fs.FileInfo, error)
	}); ok {
		return st.Stat(name)
	}
	fh, err := f.OpenFile(name, os.O_RDONLY|openNonblock, 0)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	return fh.Stat()
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// readRegular reads the whole regular file name (p is the client's path,
// for messages), refusing anything over max bytes. It opens without
// blocking so that a FIFO planted where a file was expected cannot hang
// the request.
func readRegular(f fsys, name, p string, max int64) ([]byte, fs.FileInfo, error) {
	fh, err := f.OpenFile(name, os.O_RDONLY|openNonblock, 0)
	if err != nil {
		return nil, nil, fsError(err, p)
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil {
		return nil, nil, fsError(err, p)
	}
	switch {
	case fi.IsDir():
		return nil, nil, errorf(http.StatusBadRequest, "%s is a directory", p)
	case !fi.Mode().IsRegular():
		return nil, nil, errorf(http.StatusBadRequest, "%s is not a regular file", p)
	case fi.Size() > max:
		return nil, nil, tooBig(p, fi.Size(), max)
	}
	data, err := io.ReadAll(io.LimitReader(fh, max+1))
	if err != nil {
		return nil, nil, fsError(err, p)
	}
	if int64(len(data)) > max { // grew while we read
		return nil, nil, tooBig(p, int64(len(data)), max)
	}
	return data, fi, nil
}

func tooBig(p string, size, max int64) error {
	return errorf(http.StatusRequestEntityTooLarge,
		"%s is %d bytes, over the %d-byte limit of this operation; read it in ranges with GET /v1/files?offset=&limit= and write it with PUT /v1/files",
		p, size, max)
}

// checkSum validates an expected_sha256 and returns it in lower case.
func checkSum(s string) (string, error) {
	s = strings.ToLower(s)
	if s == "" {
		return "", nil
	}
	if len(s) != 64 || strings.Trim(s, "0123456789abcdef") != "" {
		return "", errorf(http.StatusBadRequest, "expected_sha256 %q is not 64 hex digits", s)
	}
	return s, nil
}

func preconditionFailed(p, have, want string) error {
	return errorf(http.StatusPreconditionFailed,
		"%s has sha256 %s, not the expected %s: it changed since it was read; read it again and redo the change", p, have, want)
}

// fileName checks that t names a file (not the root or a dot) and returns
// the directory part of its name.
func fileName(t target) (string, error) {
	dir, base := path.Split(t.name)
	if base == "" || base == "." || base == ".." {
		return "", errorf(http.StatusBadRequest, "path %q does not name a file", t.path)
	}
	if dir == "" {
		return ".", nil
	}
	return path.Clean(dir), nil
}

// stageTemp writes data with mode to a new temp file beside name and
// syncs it; the caller renames it over name or removes it.
func stageTemp(f fsys, name, p string, data []byte, mode fs.FileMode) (string, error) {
	dir, base := path.Split(name)
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	tmp := dir + "." + base + ".tmp-" + hex.EncodeToString(rnd[:])
	fh, err := f.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", fsError(err, p)
	}
	_, err = fh.Write(data)
	if err == nil {
		err = fh.Chmod(mode) // exact mode, whatever the umask
	}
	if err == nil {
		err = fh.Sync()
	}
	if cerr := fh.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = f.Remove(tmp)
		return "", fsError(err, p)
	}
	return tmp, nil
}

// syncDir makes renames in the directory of name durable; a file system
// that cannot sync a directory has still renamed atomically.
func syncDir(f fsys, name string) {
	if d, err := f.Open(path.Dir(name)); err == nil {
		_ = d.Sync()
		d.Close()
	}
}

// replaceFile atomically replaces name with data: readers see the old
// content or the new, never a part.
func replaceFile(f fsys, name, p string, data []byte, mode fs.FileMode) error {
	tmp, err := stageTemp(f, name, p, data, mode)
	if err != nil {
		return err
	}
	if err := f.Rename(tmp, name); err != nil {
		_ = f.Remove(tmp)
		return fsError(err, p)
	}
	syncDir(f, name)
	return nil
}

// serveJSON is the shape of every JSON-in, JSON-out files endpoint.
func serveJSON[Req, Res any](op func(context.Context, Req) (Res, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req Req
		if err := decodeJSON(w, r, &req); err != nil {
			writeErr(w, err)
			return
		}
		res, err := op(r.Context(), req)
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, res)
	}
}

// readText answers POST /v1/files/read.
func (s *Server) readText(_ context.Context, req ReadTextRequest) (ReadTextResult, error) {
	if req.OffsetLine < 0 || req.LimitLines < 0 {
		return ReadTextResult{}, errorf(http.StatusBadRequest, "offset_line and limit_lines must not be negative")
	}
	t, err := s.resolve(req.Path)
	if err != nil {
		return ReadTextResult{}, err
	}
	defer t.fs.Close()
	data, fi, err := readRegular(t.fs, t.name, t.path, MaxTextFile)
	if err != nil {
		return ReadTextResult{}, err
	}
	if bytes.IndexByte(data, 0) >= 0 || !utf8.Valid(data) {
		return ReadTextResult{}, errorf(http.StatusUnsupportedMediaType,
			"%s is not UTF-8 text (it looks binary); read its bytes with GET /v1/files (readBytes)", t.path)
	}
	res := ReadTextResult{Path: t.path, Size: fi.Size(), SHA256: sha256Hex(data)}
	res.TotalLines = bytes.Count(data, []byte("\n"))
	if len(data) > 0 && data[len(data)-1] != '\n' {
		res.TotalLines++
	}
	res.StartLine = max(req.OffsetLine, 1)
	// Skip to the start of line StartLine, then take LimitLines lines.
	start := 0
	for range res.StartLine - 1 {
		i := bytes.IndexByte(data[start:], '\n')
		if i < 0 {
			start = len(data)
			break
		}
		start += i + 1
	}
	end := len(data)
	if req.LimitLines > 0 {
		end = start
		for range req.LimitLines {
			i := bytes.IndexByte(data[end:], '\n')
			if i < 0 {
				end = len(data)
				break
			}
			end += i + 1
		}
	}
	res.Content = string(data[start:end])
	res.Truncated = end < len(data)
	return res, nil
}

// write answers POST /v1/files/write.
func (s *Server) write(_ context.Context, req WriteRequest) (WriteResult, error) {
	var data []byte
	switch req.Encoding {
	case "", EncodingText:
		data = []byte(req.Content)
	case EncodingBase64:
		b, err := base64.StdEncoding.DecodeString(req.Content)
		if err != nil {
			return WriteResult{}, errorf(http.StatusBadRequest, "content is not valid base64: %v", err)
		}
		data = b
	default:
		return WriteResult{}, errorf(http.StatusBadRequest, "encoding %q is not %q or %q", req.Encoding, EncodingText, EncodingBase64)
	}
	mode, err := parseMode(req.Mode, 0o644)
	if err != nil {
		return WriteResult{}, errorf(http.StatusBadRequest, "%v", err)
	}
	want, err := checkSum(req.ExpectedSHA256)
	if err != nil {
		return WriteResult{}, err
	}
	t, err := s.resolve(req.Path)
	if err != nil {
		return WriteResult{}, err
	}
	defer t.fs.Close()
	dir, err := fileName(t)
	if err != nil {
		return WriteResult{}, err
	}
	if req.Parents && dir != "." {
		if err := t.fs.MkdirAll(dir, 0o755); err != nil {
			return WriteResult{}, fsError(err, path.Dir(t.path))
		}
	}

	s.fileLock().Lock()
	defer s.fileLock().Unlock()
	created := false
	switch old, err := t.fs.Lstat(t.name); {
	case err == nil && old.IsDir():
		return WriteResult{}, errorf(http.StatusConflict, "%s is a directory", t.path)
	case err == nil && req.Mode == "":
		mode = old.Mode().Perm()
	case errors.Is(err, fs.ErrNotExist):
		created = true
	case err != nil:
		return WriteResult{}, fsError(err, t.path)
	}
	if want != "" {
		if created {
			return WriteResult{}, errorf(http.StatusPreconditionFailed, "%s does not exist, so it cannot have sha256 %s", t.path, want)
		}
		cur, _, err := readRegular(t.fs, t.name, t.path, MaxTextFile)
		if err != nil {
			return WriteResult{}, err
		}
		if have := sha256Hex(cur); have != want {
			return WriteResult{}, preconditionFailed(t.path, have, want)
		}
	}
	if err := replaceFile(t.fs, t.name, t.path, data, mode); err != nil {
		return WriteResult{}, err
	}
	return WriteResult{Path: t.path, Bytes: int64(len(data)), SHA256: sha256Hex(data), Created: created}, nil
}

// edit answers POST /v1/files/edit: exact-string replacements, applied in
// memory in order and written with one atomic replace, or not at all.
func (s *Server) edit(_ context.Context, req EditRequest) (EditResult, error) {
	if len(req.Edits) == 0 {
		return EditResult{}, errorf(http.StatusBadRequest, "edits is empty; give at least one {old, new}")
	}
	for i, e := range req.Edits {
		if e.Old == "" {
			return EditResult{}, errorf(http.StatusBadRequest, "edit %d of %d: old is empty; it must be the exact text to replace", i+1, len(req.Edits))
		}
	}
	want, err := checkSum(req.ExpectedSHA256)
	if err != nil {
		return EditResult{}, err
	}
	t, err := s.resolve(req.Path)
	if err != nil {
		return EditResult{}, err
	}
	defer t.fs.Close()
	if _, err := fileName(t); err != nil {
		return EditResult{}, err
	}

	// The lock makes check-then-replace atomic among the agent's writers,
	// which is what gives expected_sha256 its meaning.
	s.fileLock().Lock()
	defer s.fileLock().Unlock()
	if fi, err := t.fs.Lstat(t.name); err != nil {
		return EditResult{}, fsError(err, t.path)
	} else if fi.Mode()&fs.ModeSymlink != 0 {
		// Replacing would turn the link into a file; editing its target
		// is what the caller meant, so have them name it.
		target, _ := t.fs.Readlink(t.name)
		return EditResult{}, errorf(http.StatusConflict, "%s is a symlink (to %s); edit the file it points to", t.path, target)
	}
	data, fi, err := readRegular(t.fs, t.name, t.path, MaxTextFile)
	if err != nil {
		return EditResult{}, err
	}
	if want != "" {
		if have := sha256Hex(data); have != want {
			return EditResult{}, preconditionFailed(t.path, have, want)
		}
	}
	orig := string(data)
	cur := orig
	total := 0
	for i, e := range req.Edits {
		n := strings.Count(cur, e.Old)
		switch {
		case n == 0:
			return EditResult{}, &httpError{http.StatusConflict, notFoundMessage(i, len(req.Edits), t.path, e.Old, orig, cur)}
		case n > 1 && !e.ReplaceAll:
			return EditResult{}, errorf(http.StatusConflict,
				"edit %d of %d: old text occurs %d times in %s; include more surrounding lines to make it unique, or set replace_all (no changes made)",
				i+1, len(req.Edits), n, t.path)
		}
		cur = strings.ReplaceAll(cur, e.Old, e.New)
		total += n
	}
	out := []byte(cur)
	if err := replaceFile(t.fs, t.name, t.path, out, fi.Mode().Perm()); err != nil {
		return EditResult{}, err
	}
	return EditResult{Path: t.path, Bytes: int64(len(out)), SHA256: sha256Hex(out), Replacements: total}, nil
}

// notFoundMessage explains an edit whose old text is not in the file,
// with a hint at the usual causes.
func notFoundMessage(i, n int, p, old, orig, cur string) string {
	msg := fmt.Sprintf("edit %d of %d: old text not found in %s (no changes made)", i+1, n, p)
	switch {
	case i > 0 && strings.Contains(orig, old):
		msg += "; it is in the file, but an earlier edit of this batch changed it (edits apply in order)"
	case strings.Contains(cur, strings.ReplaceAll(old, "\n", "\r\n")) || strings.Contains(cur, strings.ReplaceAll(old, "\r\n", "\n")):
		msg += "; it matches with different line endings (\\n vs \\r\\n)"
	case strings.Contains(collapseSpace(cur), collapseSpace(old)):
		msg += "; it matches if whitespace is ignored, so check indentation (tabs vs spaces) and trailing spaces"
	default:
		msg += "; read the file again and copy the text exactly"
	}
	return msg
}

func collapseSpace(s string) string { return strings.Join(strings.Fields(s), " ") }
