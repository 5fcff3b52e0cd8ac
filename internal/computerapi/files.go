package computerapi

import (
	"context"
	"encoding/base64"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"path"
	"strconv"
	"strings"

	"github.com/berth-dev/berth/apitype/computertype"

	"github.com/berth-dev/berth/internal/agent"
	"github.com/berth-dev/berth/internal/web"
)

// MaxWriteBytes bounds one files.writeBytes body; MaxPreconditionWrite
// bounds one with a hash precondition or parent creation, which the agent
// takes as JSON in memory.
const (
	MaxWriteBytes        = 1 << 30
	MaxPreconditionWrite = 32 << 20
)

// HeaderSHA256 carries the hex SHA-256 of the whole file on files.readBytes
// answers, for use as expectedSha256 in a later write or edit.
const HeaderSHA256 = "X-File-Sha256"

// workPath confines a client path to the workspace: relative paths are
// taken from the workspace root and absolute ones with the workspace as
// "/". It returns the cleaned absolute form the agent takes, or (rel) the
// form relative to the workspace that exec's cwd takes. A NUL byte is a
// 400; a ".." that climbs above the workspace a 403, whatever follows it.
func workPath(p, field string, optional bool) (string, error) {
	if p == "" {
		if optional {
			return "", nil
		}
		return "", web.Invalid(field, "is required")
	}
	if containsNUL(p) {
		return "", web.Invalid(field, "must not contain a NUL byte")
	}
	if agent.EscapesRoot(p) {
		return "", web.Errorf(http.StatusForbidden, "%s: %q leads outside the Computer's workspace", field, p)
	}
	clean := path.Clean("/" + p)
	if field == "cwd" {
		return strings.TrimPrefix(clean, "/"), nil
	}
	return clean, nil
}

func fileInfo(fi agent.FileInfo) computertype.FileInfo {
	return computertype.FileInfo{Name: fi.Name, Path: fi.Path, Type: fi.Type, Size: fi.Size, Mode: fi.Mode, ModTime: fi.ModTime.UnixMilli(), LinkTarget: fi.LinkTarget}
}

func (a *API) readText(w http.ResponseWriter, r *http.Request, c *call) error {
	var req computertype.ReadRequest
	if err := readJSON(w, r, &req); err != nil {
		return err
	}
	p, err := workPath(req.Path, "path", false)
	if err != nil {
		return err
	}
	if req.Offset < 0 || req.Limit < 0 {
		return web.Invalid("offset", "offset and limit must not be negative")
	}
	res, err := onAgent(a, r, c, func(ctx context.Context, ag *agent.Client) (agent.ReadTextResult, error) {
		return ag.ReadText(ctx, agent.ReadTextRequest{Path: p, OffsetLine: req.Offset, LimitLines: req.Limit})
	})
	if err != nil {
		return err
	}
	web.WriteJSON(w, http.StatusOK, computertype.ReadResult{Path: res.Path, Content: res.Content, StartLine: res.StartLine, TotalLines: res.TotalLines, Truncated: res.Truncated, Size: res.Size, SHA256: res.SHA256})
	return nil
}

// readBytes is files.readBytes: GET ?path=&offset=&limit= answers the raw
// bytes (from byte offset, at most limit), with the whole file's SHA-256
// in X-File-Sha256.
func (a *API) readBytes(w http.ResponseWriter, r *http.Request, c *call) error {
	q := r.URL.Query()
	p, err := workPath(q.Get("path"), "path", false)
	if err != nil {
		return err
	}
	offset, limit, err := offsetLimit(q)
	if err != nil {
		return err
	}
	var sum string
	b, err := onAgent(a, r, c, func(ctx context.Context, ag *agent.Client) (b []byte, err error) {
		b, sum, err = ag.ReadBytes(ctx, p, offset, limit)
		return b, err
	})
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	if sum != "" {
		w.Header().Set(HeaderSHA256, sum)
	}
	w.WriteHeader(http.StatusOK)
	w.Write(b)
	return nil
}

func (a *API) writeText(w http.ResponseWriter, r *http.Request, c *call) error {
	var req computertype.WriteRequest
	if err := readJSON(w, r, &req); err != nil {
		return err
	}
	p, err := workPath(req.Path, "path", false)
	if err != nil {
		return err
	}
	content := req.Content
	switch req.Encoding {
	case "", "text":
	case "base64":
		b, err := base64.StdEncoding.DecodeString(req.Content)
		if err != nil {
			return web.Invalid("content", "is not base64")
		}
		content = string(b)
	default:
		return web.Invalid("encoding", "must be text or base64, got %q", req.Encoding)
	}
	return a.write(w, r, c, agent.WriteRequest{Path: p, Content: content, Mode: req.Mode, ExpectedSHA256: req.ExpectedSHA256, Parents: req.Parents})
}

func (a *API) write(w http.ResponseWriter, r *http.Request, c *call, req agent.WriteRequest) error {
	res, err := onAgent(a, r, c, func(ctx context.Context, ag *agent.Client) (agent.WriteResult, error) {
		return ag.Write(ctx, req)
	})
	if err != nil {
		return err
	}
	a.emit(r.Context(), filesWritten(c, res.Path, res.Bytes))
	web.WriteJSON(w, http.StatusOK, computertype.WriteResult(res))
	return nil
}

// writeBytes is files.writeBytes: PUT ?path=&mode=&expectedSha256=&parents=
// with the raw content as the body.
func (a *API) writeBytes(w http.ResponseWriter, r *http.Request, c *call) error {
	q := r.URL.Query()
	p, err := workPath(q.Get("path"), "path", false)
	if err != nil {
		return err
	}
	parents, err := web.BoolParam(r, "parents")
	if err != nil {
		return err
	}
	mode := q.Get("mode")
	var perm fs.FileMode
	if mode != "" {
		m, err := strconv.ParseUint(mode, 8, 32)
		if err != nil || m > 0o777 {
			return web.Invalid("mode", "must be octal permission bits like 0644, got %q", mode)
		}
		perm = fs.FileMode(m)
	}
	want := q.Get("expectedSha256")
	if want != "" || parents {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxPreconditionWrite))
		if err != nil {
			return bodyError(err)
		}
		return a.write(w, r, c, agent.WriteRequest{Path: p, Content: string(body), Mode: mode, ExpectedSHA256: want, Parents: parents})
	}
	ag, release, err := a.use(r, c)
	if err != nil {
		return err
	}
	defer release()
	noReadDeadline(w)
	body := http.MaxBytesReader(w, r.Body, MaxWriteBytes)
	var fi agent.FileInfo
	if ws := a.hostWorkspace(r.Context(), c.id); ws != "" {
		// The write the agent would do, done here: the content is not
		// copied through the agent's socket.
		rb := &readErr{r: body}
		fi, err = agent.WriteFile(ws, p, rb, perm)
		if err != nil {
			if rb.err != nil && rb.err != io.EOF {
				return bodyError(rb.err)
			}
			return agentError(err, c.id)
		}
		a.emit(r.Context(), filesWritten(c, p, fi.Size))
		web.WriteJSON(w, http.StatusOK, computertype.WriteResult{Path: p, Bytes: fi.Size, SHA256: fi.SHA256})
		return nil
	}
	if r.ContentLength >= 0 && r.ContentLength <= MaxWriteBytes {
		// Passed on with its length rather than chunked: the agent
		// reads it in large pieces.
		fi, err = ag.WriteFileN(r.Context(), p, body, r.ContentLength, perm)
	} else {
		fi, err = ag.WriteFile(r.Context(), p, body, perm)
	}
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return bodyError(err)
		}
		return agentError(err, c.id)
	}
	a.emit(r.Context(), filesWritten(c, p, fi.Size))
	web.WriteJSON(w, http.StatusOK, computertype.WriteResult{Path: p, Bytes: fi.Size, SHA256: fi.SHA256})
	return nil
}

func bodyError(err error) error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return web.Errorf(http.StatusRequestEntityTooLarge, "the content exceeds %d bytes", mbe.Limit)
	}
	return web.Errorf(http.StatusBadRequest, "could not read the request body: %v", err)
}

func (a *API) listFiles(w http.ResponseWriter, r *http.Request, c *call) error {
	var req computertype.PathRequest
	if err := readJSON(w, r, &req); err != nil {
		return err
	}
	if req.Path == "" {
		req.Path = "/"
	}
	p, err := workPath(req.Path, "path", false)
	if err != nil {
		return err
	}
	ents, err := onAgent(a, r, c, func(ctx context.Context, ag *agent.Client) ([]agent.FileInfo, error) {
		return ag.List(ctx, p)
	})
	if err != nil {
		return err
	}
	out := computertype.ListFilesResult{Path: p, Entries: make([]computertype.FileInfo, 0, len(ents))}
	for _, e := range ents {
		out.Entries = append(out.Entries, fileInfo(e))
	}
	web.WriteJSON(w, http.StatusOK, out)
	return nil
}

func (a *API) glob(w http.ResponseWriter, r *http.Request, c *call) error {
	var req computertype.GlobRequest
	if err := readJSON(w, r, &req); err != nil {
		return err
	}
	if req.Pattern == "" {
		return web.Invalid("pattern", "is required")
	}
	if _, err := workPath(req.Pattern, "pattern", false); err != nil {
		return err
	}
	if strings.HasPrefix(req.Pattern, "/") {
		return web.Invalid("pattern", "must be relative (to path)")
	}
	p, err := workPath(req.Path, "path", true)
	if err != nil {
		return err
	}
	res, err := onAgent(a, r, c, func(ctx context.Context, ag *agent.Client) (agent.GlobResult, error) {
		return ag.Glob(ctx, agent.GlobRequest{Pattern: req.Pattern, Path: p, Limit: req.Limit})
	})
	if err != nil {
		return err
	}
	out := computertype.GlobResult{Matches: make([]computertype.GlobMatch, 0, len(res.Matches)), Truncated: res.Truncated}
	for _, m := range res.Matches {
		out.Matches = append(out.Matches, computertype.GlobMatch{Path: m.Path, Size: m.Size, ModTime: m.ModTime.UnixMilli()})
	}
	web.WriteJSON(w, http.StatusOK, out)
	return nil
}

func (a *API) grep(w http.ResponseWriter, r *http.Request, c *call) error {
	var req computertype.GrepRequest
	if err := readJSON(w, r, &req); err != nil {
		return err
	}
	if req.Pattern == "" {
		return web.Invalid("pattern", "is required")
	}
	p, err := workPath(req.Path, "path", true)
	if err != nil {
		return err
	}
	greq := agent.GrepRequest(req) // the same fields; the API's names are camelCase
	greq.Path = p
	res, err := onAgent(a, r, c, func(ctx context.Context, ag *agent.Client) (agent.GrepResult, error) {
		return ag.Grep(ctx, greq)
	})
	if err != nil {
		return err
	}
	out := computertype.GrepResult{Matches: make([]computertype.GrepMatch, 0, len(res.Matches)), Truncated: res.Truncated, FilesScanned: res.FilesScanned}
	for _, m := range res.Matches {
		out.Matches = append(out.Matches, computertype.GrepMatch(m))
	}
	web.WriteJSON(w, http.StatusOK, out)
	return nil
}

func (a *API) edit(w http.ResponseWriter, r *http.Request, c *call) error {
	var req computertype.EditRequest
	if err := readJSON(w, r, &req); err != nil {
		return err
	}
	p, err := workPath(req.Path, "path", false)
	if err != nil {
		return err
	}
	if len(req.Edits) == 0 {
		return web.Invalid("edits", "must hold at least one edit")
	}
	edits := make([]agent.Edit, len(req.Edits))
	for i, e := range req.Edits {
		if e.Old == "" {
			return web.Invalid("edits["+strconv.Itoa(i)+"].old", "must not be empty")
		}
		edits[i] = agent.Edit(e)
	}
	res, err := onAgent(a, r, c, func(ctx context.Context, ag *agent.Client) (agent.EditResult, error) {
		return ag.Edit(ctx, agent.EditRequest{Path: p, Edits: edits, ExpectedSHA256: req.ExpectedSHA256})
	})
	if err != nil {
		return err
	}
	a.emit(r.Context(), filesWritten(c, res.Path, res.Bytes))
	web.WriteJSON(w, http.StatusOK, computertype.EditResult(res))
	return nil
}

func (a *API) patch(w http.ResponseWriter, r *http.Request, c *call) error {
	var req computertype.PatchRequest
	if err := readJSON(w, r, &req); err != nil {
		return err
	}
	if strings.TrimSpace(req.Patch) == "" {
		return web.Invalid("patch", "is required")
	}
	if req.Strip != nil && (*req.Strip < 0 || *req.Strip > 64) {
		return web.Invalid("strip", "must be from 0 to 64")
	}
	dir, err := workPath(req.Dir, "dir", true)
	if err != nil {
		return err
	}
	res, err := onAgent(a, r, c, func(ctx context.Context, ag *agent.Client) (agent.PatchResult, error) {
		return ag.Patch(ctx, agent.PatchRequest{Patch: req.Patch, Strip: req.Strip, Dir: dir})
	})
	if err != nil {
		return err
	}
	out := computertype.PatchResult{Files: make([]computertype.PatchedFile, 0, len(res.Files))}
	for _, f := range res.Files {
		a.emit(r.Context(), filesWritten(c, f.Path, f.Bytes))
		out.Files = append(out.Files, computertype.PatchedFile(f))
	}
	web.WriteJSON(w, http.StatusOK, out)
	return nil
}

func (a *API) mkdir(w http.ResponseWriter, r *http.Request, c *call) error {
	var req computertype.MkdirRequest
	if err := readJSON(w, r, &req); err != nil {
		return err
	}
	p, err := workPath(req.Path, "path", false)
	if err != nil {
		return err
	}
	if p == "/" {
		return web.Invalid("path", "names the workspace itself")
	}
	var perm fs.FileMode
	if req.Mode != "" {
		m, err := strconv.ParseUint(req.Mode, 8, 32)
		if err != nil || m > 0o777 || m == 0 {
			return web.Invalid("mode", "must be octal permission bits like 0755, got %q", req.Mode)
		}
		perm = fs.FileMode(m)
	}
	ag, release, err := a.use(r, c)
	if err != nil {
		return err
	}
	defer release()
	existed := false
	if fi, err := ag.Stat(r.Context(), p); err == nil && fi.Type == "dir" {
		existed = true
	}
	fi, err := ag.Mkdir(r.Context(), p, perm, req.Parents)
	if err != nil {
		return agentError(err, c.id)
	}
	code := http.StatusCreated
	if existed {
		code = http.StatusOK
	}
	web.WriteJSON(w, code, fileInfo(fi))
	return nil
}
