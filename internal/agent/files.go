package agent

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// fsys is what the files endpoints need of a file system: *os.Root when
// the server has a Root, osFS otherwise.
type fsys interface {
	Open(name string) (*os.File, error)
	OpenFile(name string, flag int, perm fs.FileMode) (*os.File, error)
	Lstat(name string) (fs.FileInfo, error)
	Readlink(name string) (string, error)
	Mkdir(name string, perm fs.FileMode) error
	MkdirAll(name string, perm fs.FileMode) error
	Chmod(name string, mode fs.FileMode) error
	Remove(name string) error
	RemoveAll(name string) error
	Rename(oldname, newname string) error
	Close() error
}

// osFS is the unconfined file system: names are the client's paths.
type osFS struct{}

func (osFS) Open(name string) (*os.File, error) { return os.Open(name) }
func (osFS) OpenFile(name string, flag int, perm fs.FileMode) (*os.File, error) {
	return os.OpenFile(name, flag, perm)
}
func (osFS) Lstat(name string) (fs.FileInfo, error)       { return os.Lstat(name) }
func (osFS) Readlink(name string) (string, error)         { return os.Readlink(name) }
func (osFS) Mkdir(name string, perm fs.FileMode) error    { return os.Mkdir(name, perm) }
func (osFS) MkdirAll(name string, perm fs.FileMode) error { return os.MkdirAll(name, perm) }
func (osFS) Chmod(name string, mode fs.FileMode) error    { return os.Chmod(name, mode) }
func (osFS) Remove(name string) error                     { return os.Remove(name) }
func (osFS) RemoveAll(name string) error                  { return os.RemoveAll(name) }
func (osFS) Rename(oldname, newname string) error         { return os.Rename(oldname, newname) }
func (osFS) Close() error                                 { return nil }

// target is a client path resolved for one request.
type target struct {
	fs   fsys
	path string // as the client gave it, for messages and answers
	name string // as fs takes it
}

// resolve checks p and opens the file system it lives in; the caller
// closes t.fs. The Root is opened per request so that a failure to open
// it is an answer, not a crash, and a replaced root directory is seen.
func (s *Server) resolve(p string) (target, error) { return resolveIn(s.opts.Root, p) }

// EscapesRoot reports whether the slash path p climbs above where it
// starts at any point: more ".." elements than names before them, whatever
// follows ("a/../../b" does, "a/../b" does not).
func EscapesRoot(p string) bool {
	depth := 0
	for _, c := range strings.Split(p, "/") {
		switch c {
		case "", ".":
		case "..":
			depth--
		default:
			depth++
		}
		if depth < 0 {
			return true
		}
	}
	return false
}

// resolveIn is resolve for the root directory root ("" for the whole file
// system).
func resolveIn(root, p string) (target, error) {
	switch {
	case p == "":
		return target{}, errorf(http.StatusBadRequest, "path is required")
	case !strings.HasPrefix(p, "/"):
		return target{}, errorf(http.StatusBadRequest, "path %q is not absolute", p)
	case strings.IndexByte(p, 0) >= 0:
		return target{}, errorf(http.StatusBadRequest, "path contains a NUL byte")
	}
	if root == "" {
		return target{osFS{}, p, p}, nil
	}
	// os.Root refuses escapes too; checking ".." here first gives the
	// client a clear 403 for the lexical case.
	if EscapesRoot(p) {
		return target{}, errorf(http.StatusForbidden, "path %q escapes the root", p)
	}
	r, err := os.OpenRoot(root)
	if err != nil {
		return target{}, fmt.Errorf("opening the root: %w", err)
	}
	name := strings.TrimLeft(p, "/")
	if name == "" {
		name = "."
	}
	if uid, gid, ok := foreignOwner(r); ok {
		return target{ownedRoot{r, uid, gid}, p, name}, nil
	}
	return target{r, p, name}, nil
}

// foreignOwner returns the owner of root's directory when files made in it
// must get that owner: the agent is root and the directory is not
// (a sandbox's workspace is its uid's, and the agent, or berth writing it
// from the host, runs as root).
func foreignOwner(r *os.Root) (uid, gid int, ok bool) {
	if os.Geteuid() != 0 {
		return 0, 0, false
	}
	fi, err := r.Lstat(".")
	if err != nil {
		return 0, 0, false
	}
	st, isStat := fi.Sys().(*syscall.Stat_t)
	if !isStat || st.Uid == 0 {
		return 0, 0, false
	}
	return int(st.Uid), int(st.Gid), true
}

// ownedRoot is a Root whose new files and directories get one owner.
type ownedRoot struct {
	*os.Root
	uid, gid int
}

func (r ownedRoot) OpenFile(name string, flag int, perm fs.FileMode) (*os.File, error) {
	f, err := r.Root.OpenFile(name, flag, perm)
	if err == nil && flag&os.O_CREATE != 0 {
		if err := f.Chown(r.uid, r.gid); err != nil {
			f.Close()
			return nil, err
		}
	}
	return f, err
}

func (r ownedRoot) Mkdir(name string, perm fs.FileMode) error {
	if err := r.Root.Mkdir(name, perm); err != nil {
		return err
	}
	return r.Root.Lchown(name, r.uid, r.gid)
}

func (r ownedRoot) MkdirAll(name string, perm fs.FileMode) error {
	var missing []string // the directories MkdirAll makes
	for p := path.Clean(name); p != "." && p != "/"; p = path.Dir(p) {
		if _, err := r.Root.Lstat(p); err == nil {
			break
		}
		missing = append(missing, p)
	}
	if err := r.Root.MkdirAll(name, perm); err != nil {
		return err
	}
	for _, p := range missing {
		if err := r.Root.Lchown(p, r.uid, r.gid); err != nil {
			return err
		}
	}
	return nil
}

// fsError gives err a status and a message naming the client's path.
func fsError(err error, p string) error {
	msg := err.Error()
	var pe *fs.PathError
	var le *os.LinkError
	switch {
	case errors.As(err, &pe):
		msg = fmt.Sprintf("%s %s: %v", pe.Op, p, pe.Err)
	case errors.As(err, &le):
		msg = fmt.Sprintf("%s %s: %v", le.Op, p, le.Err)
	}
	status := http.StatusInternalServerError
	switch {
	case strings.Contains(err.Error(), "path escapes from parent"):
		// os.Root's (unexported) error for a symlink leading outside.
		status, msg = http.StatusForbidden, fmt.Sprintf("path %q escapes the root", p)
	case errors.Is(err, fs.ErrNotExist):
		status = http.StatusNotFound
	case errors.Is(err, fs.ErrExist), errors.Is(err, syscall.ENOTEMPTY), errors.Is(err, syscall.EISDIR):
		status = http.StatusConflict
	case errors.Is(err, fs.ErrPermission):
		status = http.StatusForbidden
	case errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.ELOOP), errors.Is(err, syscall.ENAMETOOLONG):
		status = http.StatusBadRequest
	}
	return &httpError{status, msg}
}

func fileInfo(t target, name, p string, fi fs.FileInfo) FileInfo {
	out := FileInfo{
		Name:    fi.Name(),
		Path:    p,
		Type:    fileType(fi.Mode()),
		Size:    fi.Size(),
		Mode:    formatMode(fi.Mode()),
		ModTime: fi.ModTime().UTC(),
	}
	if name == "." {
		out.Name = path.Base(p)
	}
	if out.Type == "symlink" {
		out.LinkTarget, _ = t.fs.Readlink(name)
	}
	return out
}

// queryInt parses an optional non-negative integer parameter.
func queryInt(r *http.Request, key string) (int64, bool, error) {
	v := r.URL.Query().Get(key)
	if v == "" {
		return 0, false, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, false, errorf(http.StatusBadRequest, "%s=%q is not a non-negative integer", key, v)
	}
	return n, true, nil
}

func queryBool(r *http.Request, key string) (bool, error) {
	v := r.URL.Query().Get(key)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, errorf(http.StatusBadRequest, "%s=%q is not a boolean", key, v)
	}
	return b, nil
}

func (s *Server) handleReadFile(w http.ResponseWriter, r *http.Request) {
	if err := s.readFile(w, r); err != nil {
		writeErr(w, err)
	}
}

func (s *Server) readFile(w http.ResponseWriter, r *http.Request) error {
	offset, _, err := queryInt(r, "offset")
	if err != nil {
		return err
	}
	limit, hasLimit, err := queryInt(r, "limit")
	if err != nil {
		return err
	}
	t, err := s.resolve(r.URL.Query().Get("path"))
	if err != nil {
		return err
	}
	defer t.fs.Close()
	f, err := t.fs.Open(t.name)
	if err != nil {
		return fsError(err, t.path)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fsError(err, t.path)
	}
	if fi.IsDir() {
		return errorf(http.StatusBadRequest, "%s is a directory; use /v1/files/list", t.path)
	}
	if fi.Mode().IsRegular() {
		// The hash covers the whole file whatever the range, so that it
		// can be an edit's precondition. Both passes read the same open
		// file, and the agent's writers replace files by rename, so they
		// see one content.
		h := sha256.New()
		if _, err := io.Copy(h, f); err != nil {
			return fsError(err, t.path)
		}
		w.Header().Set(HeaderSHA256, hex.EncodeToString(h.Sum(nil)))
		if _, err := f.Seek(offset, io.SeekStart); err != nil {
			return fsError(err, t.path)
		}
	} else if offset > 0 {
		if _, err := f.Seek(offset, io.SeekStart); err != nil {
			return fsError(err, t.path)
		}
	}
	var src io.Reader = f
	if hasLimit {
		src = io.LimitReader(f, limit)
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	// No Content-Length: files in /proc and the like claim size 0, and
	// a growing file may yield more than its size said.
	w.Header().Set("X-File-Size", strconv.FormatInt(fi.Size(), 10))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = io.Copy(w, src)
	}
	return nil
}

func (s *Server) handleWriteFile(w http.ResponseWriter, r *http.Request) {
	fi, err := s.writeFile(r)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, fi)
}

// writeFile answers PUT /v1/files: the body replaces the file, with
// ?mode= (octal; absent keeps the replaced file's mode, or 0644).
func (s *Server) writeFile(r *http.Request) (FileInfo, error) {
	q := r.URL.Query()
	mode, err := parseMode(q.Get("mode"), 0)
	if err != nil {
		return FileInfo{}, errorf(http.StatusBadRequest, "%v", err)
	}
	return writeFileIn(s.opts.Root, q.Get("path"), r.Body, mode, q.Get("mode") == "")
}

// WriteFile is the agent's PUT /v1/files done in this process: it
// atomically replaces the file at p (absolute, with the directory root as
// "/"; root "" is the whole file system) with the content of body, and
// describes the new file, with its SHA256. A zero mode keeps the mode of
// the file replaced, or 0644 for a new one. Symlinks and ".." cannot lead
// out of root. The parent directory must exist.
//
// It is for a host that sees a sandbox's root directory as the agent in
// it does (a workspace bind-mounted into a container, say): writing there
// directly saves copying the content through the agent's socket, with the
// same result. Errors are *Error with the status the agent would answer;
// a failure to read body is a 400 whose cause the caller knows better.
func WriteFile(root, p string, body io.Reader, mode fs.FileMode) (FileInfo, error) {
	fi, err := writeFileIn(root, p, body, mode, mode == 0)
	if err != nil {
		var he *httpError
		if errors.As(err, &he) {
			return FileInfo{}, &Error{Status: he.status, Message: he.msg}
		}
		return FileInfo{}, &Error{Status: http.StatusInternalServerError, Message: err.Error()}
	}
	return fi, nil
}

// writeFileIn replaces the file atomically: readers see the old content or
// the new, never a part, and a crash leaves at most a stray temp file.
// With keepMode the file keeps the mode of the one replaced (0644 for a
// new one); else it gets mode exactly.
func writeFileIn(root, p string, body io.Reader, mode fs.FileMode, keepMode bool) (FileInfo, error) {
	t, err := resolveIn(root, p)
	if err != nil {
		return FileInfo{}, err
	}
	defer t.fs.Close()
	dir, base := path.Split(t.name)
	if base == "" || base == "." || base == ".." {
		return FileInfo{}, errorf(http.StatusBadRequest, "path %q does not name a file", t.path)
	}
	if dir == "" {
		dir = "."
	}
	switch old, err := t.fs.Lstat(t.name); {
	case err == nil && old.IsDir():
		return FileInfo{}, errorf(http.StatusConflict, "%s is a directory", t.path)
	case err == nil && keepMode:
		mode = old.Mode().Perm() // keep the mode of the file replaced
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return FileInfo{}, fsError(err, t.path)
	case keepMode:
		mode = 0o644
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	tmp := path.Join(dir, "."+base+".tmp-"+hex.EncodeToString(rnd[:]))
	f, err := t.fs.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return FileInfo{}, fsError(err, t.path)
	}
	h := sha256.New()
	err = func() error {
		if ferr, berr := copyToFile(f, body, h); ferr != nil {
			return fsError(ferr, t.path)
		} else if berr != nil {
			return errorf(http.StatusBadRequest, "reading the request body: %v", berr)
		}
		if err := f.Chmod(mode); err != nil { // exact mode, whatever the umask
			return fsError(err, t.path)
		}
		if err := f.Sync(); err != nil {
			return fsError(err, t.path)
		}
		return nil
	}()
	if cerr := f.Close(); err == nil && cerr != nil {
		err = fsError(cerr, t.path)
	}
	if err == nil {
		lk := rootLockFor(root) // not between another writer's check and replace
		lk.Lock()
		if rerr := t.fs.Rename(tmp, t.name); rerr != nil {
			err = fsError(rerr, t.path)
		}
		lk.Unlock()
	}
	if err != nil {
		_ = t.fs.Remove(tmp)
		return FileInfo{}, err
	}
	// Make the rename durable; a file system that cannot sync a directory
	// has still renamed atomically.
	if d, err := t.fs.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	fi, err := t.fs.Lstat(t.name)
	if err != nil {
		return FileInfo{}, fsError(err, t.path)
	}
	out := fileInfo(t, t.name, t.path, fi)
	out.SHA256 = hex.EncodeToString(h.Sum(nil))
	return out, nil
}

// copyBuffer is the size of the reads of a written file's body (large
// reads, few system calls), and copyBuffers how many are in flight between
// the body, the file and the hash.
const (
	copyBuffer  = 1 << 20
	copyBuffers = 3
)

// writebackEvery is how much of a file being written accumulates before
// its writeback to the disk starts.
const writebackEvery = 8 << 20

// copyToFile writes body to f and to the hash h, returning the file's
// error or else the body's. Two things overlap with receiving the body:
// hashing, on a goroutine of its own, and the disk's writeback, which
// starts for every writebackEvery bytes as soon as they are written, so
// that the fsync at the end waits for the last stretch only, not for the
// whole file. h is complete when copyToFile returns.
func copyToFile(f *os.File, body io.Reader, h hash.Hash) (fileErr, bodyErr error) {
	free := make(chan []byte, copyBuffers)
	for range copyBuffers {
		free <- make([]byte, copyBuffer)
	}
	work := make(chan []byte, copyBuffers)
	hashed := make(chan struct{})
	go func() {
		defer close(hashed)
		for b := range work {
			h.Write(b)
			free <- b[:cap(b)]
		}
	}()
	defer func() {
		close(work)
		<-hashed
	}()
	var off, flushed int64
	for {
		buf := <-free
		n, err := fill(body, buf)
		if n > 0 {
			if _, werr := f.Write(buf[:n]); werr != nil {
				return werr, nil
			}
			work <- buf[:n]
			off += int64(n)
			if off-flushed >= writebackEvery {
				startWriteback(f, flushed, off-flushed)
				flushed = off
			}
		} else {
			free <- buf
		}
		switch {
		case err == io.EOF:
			return nil, nil
		case err != nil:
			return nil, err
		}
	}
}

// fill reads from r until buf is full or r fails; io.EOF means r ended.
func fill(r io.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := r.Read(buf[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

func (s *Server) handleStat(w http.ResponseWriter, r *http.Request) {
	t, err := s.resolve(r.URL.Query().Get("path"))
	if err != nil {
		writeErr(w, err)
		return
	}
	defer t.fs.Close()
	fi, err := t.fs.Lstat(t.name)
	if err != nil {
		writeErr(w, fsError(err, t.path))
		return
	}
	writeJSON(w, http.StatusOK, fileInfo(t, t.name, t.path, fi))
}

func (s *Server) handleList(w http.ResponseWriter, r *http.Request) {
	t, err := s.resolve(r.URL.Query().Get("path"))
	if err != nil {
		writeErr(w, err)
		return
	}
	defer t.fs.Close()
	f, err := t.fs.Open(t.name)
	if err != nil {
		writeErr(w, fsError(err, t.path))
		return
	}
	defer f.Close()
	ents, err := f.ReadDir(-1)
	if err != nil {
		writeErr(w, fsError(err, t.path))
		return
	}
	res := ListResult{Path: t.path, Entries: make([]FileInfo, 0, len(ents))}
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil {
			continue // removed while listing
		}
		res.Entries = append(res.Entries, fileInfo(t, path.Join(t.name, e.Name()), path.Join(t.path, e.Name()), fi))
	}
	slices.SortFunc(res.Entries, func(a, b FileInfo) int { return strings.Compare(a.Name, b.Name) })
	writeJSON(w, http.StatusOK, res)
}

func (s *Server) handleMkdir(w http.ResponseWriter, r *http.Request) {
	var req MkdirRequest
	if err := decodeJSON(w, r, &req); err != nil {
		writeErr(w, err)
		return
	}
	status, fi, err := s.mkdir(req)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, status, fi)
}

func (s *Server) mkdir(req MkdirRequest) (int, FileInfo, error) {
	mode, err := parseMode(req.Mode, 0o755)
	if err != nil {
		return 0, FileInfo{}, errorf(http.StatusBadRequest, "%v", err)
	}
	t, err := s.resolve(req.Path)
	if err != nil {
		return 0, FileInfo{}, err
	}
	defer t.fs.Close()
	status := http.StatusCreated
	if old, err := t.fs.Lstat(t.name); err == nil {
		if !req.Parents || !old.IsDir() {
			return 0, FileInfo{}, errorf(http.StatusConflict, "%s already exists", t.path)
		}
		status = http.StatusOK
	} else {
		mk := t.fs.Mkdir
		if req.Parents {
			mk = t.fs.MkdirAll
		}
		if err := mk(t.name, mode); err != nil {
			return 0, FileInfo{}, fsError(err, t.path)
		}
		if err := t.fs.Chmod(t.name, mode); err != nil { // exact mode, whatever the umask
			return 0, FileInfo{}, fsError(err, t.path)
		}
	}
	fi, err := t.fs.Lstat(t.name)
	if err != nil {
		return 0, FileInfo{}, fsError(err, t.path)
	}
	return status, fileInfo(t, t.name, t.path, fi), nil
}

func (s *Server) handleRemove(w http.ResponseWriter, r *http.Request) {
	if err := s.remove(r); err != nil {
		writeErr(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) remove(r *http.Request) error {
	recursive, err := queryBool(r, "recursive")
	if err != nil {
		return err
	}
	t, err := s.resolve(r.URL.Query().Get("path"))
	if err != nil {
		return err
	}
	defer t.fs.Close()
	if t.name == "." || path.Clean(t.path) == "/" {
		return errorf(http.StatusBadRequest, "refusing to remove %s", t.path)
	}
	if _, err := t.fs.Lstat(t.name); err != nil {
		return fsError(err, t.path)
	}
	rm := t.fs.Remove
	if recursive {
		rm = t.fs.RemoveAll
	}
	if err := rm(t.name); err != nil {
		return fsError(err, t.path)
	}
	return nil
}
