package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"path"
	"strings"

	"github.com/bluekeyes/go-gitdiff/gitdiff"
)

// patchFile is one file as a patch sees it: what it was before and what
// the patch makes of it. Several diffs of one patch may touch the same
// file; each applies to what the ones before left.
type patchFile struct {
	path string // the client's path
	name string // as the file system takes it

	origExists bool
	orig       []byte
	origMode   fs.FileMode

	exists bool
	data   []byte
	mode   fs.FileMode
}

func (pf *patchFile) changed() bool {
	return pf.exists != pf.origExists || pf.mode != pf.origMode || !bytes.Equal(pf.data, pf.orig)
}

// Git's file type bits, as go-gitdiff reports them in File.OldMode and
// NewMode (the raw octal of the diff, not Go's fs.FileMode bits).
const (
	gitTypeMask    = 0o170000
	gitTypeRegular = 0o100000
)

// patch answers POST /v1/files/patch: every diff is applied in memory and
// checked first, then all files are replaced; a failure while replacing
// restores the files already replaced.
func (s *Server) patch(_ context.Context, req PatchRequest) (PatchResult, error) {
	if strings.TrimSpace(req.Patch) == "" {
		return PatchResult{}, errorf(http.StatusBadRequest, "patch is empty")
	}
	if req.Strip != nil && *req.Strip < 0 {
		return PatchResult{}, errorf(http.StatusBadRequest, "strip must not be negative")
	}
	diffs, _, err := gitdiff.Parse(strings.NewReader(req.Patch))
	if err != nil {
		return PatchResult{}, errorf(http.StatusBadRequest, "patch is not a valid unified diff: %v", err)
	}
	if len(diffs) == 0 {
		return PatchResult{}, errorf(http.StatusBadRequest, "patch holds no file diffs; want \"--- old\" / \"+++ new\" headers followed by @@ hunks")
	}
	isGit := strings.HasPrefix(req.Patch, "diff --git ") || strings.Contains(req.Patch, "\ndiff --git ")
	if isGit && req.Strip != nil && *req.Strip == 0 {
		return PatchResult{}, errorf(http.StatusBadRequest, "strip 0 is not supported for git diffs, whose names always carry a prefix; use 1 or more")
	}
	dir := req.Dir
	if dir == "" {
		dir = "/"
	}
	main, err := s.resolve(dir)
	if err != nil {
		return PatchResult{}, err
	}
	defer main.fs.Close()

	s.fileLock().Lock()
	defer s.fileLock().Unlock()
	files := map[string]*patchFile{}
	var order []*patchFile
	load := func(label, diffName string) (*patchFile, error) {
		p, err := patchPath(dir, diffName, isGit, req.Strip)
		if err != nil {
			return nil, errorf(http.StatusBadRequest, "%s: %v", label, err)
		}
		t, err := s.resolve(p)
		if err != nil {
			return nil, err
		}
		t.fs.Close() // only its name is needed; main.fs is the same tree
		if pf, ok := files[t.name]; ok {
			return pf, nil
		}
		pf := &patchFile{path: p, name: t.name}
		switch fi, err := main.fs.Lstat(t.name); {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return nil, fsError(err, p)
		case fi.Mode()&fs.ModeSymlink != 0:
			return nil, errorf(http.StatusConflict, "%s: %s is a symlink; patch the file it points to", label, p)
		case !fi.Mode().IsRegular():
			return nil, errorf(http.StatusConflict, "%s: %s is not a regular file", label, p)
		default:
			data, fi, err := readRegular(main.fs, t.name, p, MaxTextFile)
			if err != nil {
				return nil, err
			}
			pf.origExists, pf.orig, pf.origMode = true, data, fi.Mode().Perm()
		}
		pf.exists, pf.data, pf.mode = pf.origExists, pf.orig, pf.origMode
		files[t.name] = pf
		order = append(order, pf)
		return pf, nil
	}

	for i, d := range diffs {
		name := d.NewName
		if name == "" {
			name = d.OldName
		}
		if p, err := patchPath(dir, name, isGit, req.Strip); err == nil {
			name = p
		}
		label := fmt.Sprintf("file %d of %d (%s)", i+1, len(diffs), name)
		if err := applyDiff(d, label, load); err != nil {
			return PatchResult{}, err
		}
	}

	var changed []*patchFile
	for _, pf := range order {
		if pf.changed() {
			changed = append(changed, pf)
		}
	}
	if err := commitPatch(main.fs, changed); err != nil {
		return PatchResult{}, err
	}
	res := PatchResult{Files: []PatchedFile{}}
	for _, pf := range changed {
		out := PatchedFile{Path: pf.path, Created: pf.exists && !pf.origExists, Deleted: !pf.exists}
		if pf.exists {
			out.Bytes, out.SHA256 = int64(len(pf.data)), sha256Hex(pf.data)
		}
		res.Files = append(res.Files, out)
	}
	return res, nil
}

// applyDiff applies one file's diff to the in-memory state.
func applyDiff(d *gitdiff.File, label string, load func(label, name string) (*patchFile, error)) error {
	if d.IsBinary {
		return errorf(http.StatusConflict, "%s: binary patches are not supported; write the file with PUT /v1/files", label)
	}
	for _, m := range []fs.FileMode{d.OldMode, d.NewMode} {
		if m != 0 && m&gitTypeMask != gitTypeRegular {
			return errorf(http.StatusConflict, "%s: only regular files can be patched (mode %o)", label, uint32(m))
		}
	}
	var src, dst *patchFile
	var err error
	switch {
	case d.IsNew:
		if dst, err = load(label, d.NewName); err != nil {
			return err
		}
		if dst.exists {
			return errorf(http.StatusConflict, "%s: cannot create %s, it already exists", label, dst.path)
		}
	case d.IsDelete:
		if src, err = load(label, d.OldName); err != nil {
			return err
		}
		if !src.exists {
			return errorf(http.StatusConflict, "%s: cannot delete %s, it does not exist", label, src.path)
		}
	default:
		if src, err = load(label, d.OldName); err != nil {
			return err
		}
		if !src.exists {
			return errorf(http.StatusConflict, "%s: cannot patch %s, it does not exist", label, src.path)
		}
		dst = src
		if d.IsRename || d.IsCopy {
			if dst, err = load(label, d.NewName); err != nil {
				return err
			}
			if dst != src && dst.exists {
				return errorf(http.StatusConflict, "%s: cannot rename or copy onto %s, it already exists", label, dst.path)
			}
		}
	}
	var in []byte
	if src != nil {
		in = src.data
	}
	out, err := applyHunks(in, d, label)
	if err != nil {
		return err
	}
	if d.IsDelete {
		if len(out) > 0 {
			return errorf(http.StatusConflict, "%s: the deletion does not remove all of %s; it has changed since the diff was made", label, src.path)
		}
		src.exists, src.data = false, nil
		return nil
	}
	mode := fs.FileMode(0o644)
	if src != nil {
		mode = src.mode
	}
	if d.NewMode != 0 {
		mode = d.NewMode & fs.ModePerm
	}
	if d.IsRename && dst != src {
		src.exists, src.data = false, nil
	}
	dst.exists, dst.data, dst.mode = true, out, mode
	return nil
}

// applyHunks applies d's hunks to in strictly: every context and removed
// line must match where the hunk says.
func applyHunks(in []byte, d *gitdiff.File, label string) ([]byte, error) {
	var out bytes.Buffer
	a := gitdiff.NewTextApplier(&out, bytes.NewReader(in))
	for j, frag := range d.TextFragments {
		if err := a.ApplyFragment(frag); err != nil {
			msg := fmt.Sprintf("%s: hunk %d of %d (%s) does not apply", label, j+1, len(d.TextFragments), strings.TrimSpace(frag.Header()))
			var ae *gitdiff.ApplyError
			if errors.As(err, &ae) && ae.Line > 0 {
				msg += fmt.Sprintf(" at line %d", ae.Line)
			}
			msg += fmt.Sprintf(": %v (nothing was changed)", err)
			return nil, &httpError{http.StatusConflict, msg}
		}
	}
	if err := a.Close(); err != nil {
		return nil, errorf(http.StatusConflict, "%s: %v (nothing was changed)", label, err)
	}
	return out.Bytes(), nil
}

// patchPath turns a name from a diff into a client path under dir.
func patchPath(dir, name string, isGit bool, strip *int) (string, error) {
	if name == "" {
		return "", errors.New("the diff names no file")
	}
	drop := 0
	switch {
	case strip != nil && isGit:
		drop = *strip - 1 // go-gitdiff has already dropped git's a/ and b/
	case strip != nil:
		drop = *strip
	case strings.HasPrefix(name, "/"):
		return name, nil
	case strings.HasPrefix(name, "a/"), strings.HasPrefix(name, "b/"):
		if !isGit {
			drop = 1
		}
	}
	orig := name
	for range drop {
		i := strings.IndexByte(name, '/')
		if i < 0 {
			return "", fmt.Errorf("cannot strip %d leading components from %q", drop, orig)
		}
		name = name[i+1:]
	}
	name = strings.TrimLeft(name, "/")
	if name == "" {
		return "", fmt.Errorf("stripping %q leaves no name", orig)
	}
	// No path.Join: it would clean "../" away; resolve must see it.
	return strings.TrimSuffix(dir, "/") + "/" + name, nil
}

// commitPatch writes the files' new states: first every new content to a
// temp file beside its target (nothing visible changes yet), then the
// renames and removals. When one of those fails, the files already
// changed get their original content back.
func commitPatch(f fsys, files []*patchFile) error {
	tmps := make([]string, len(files))
	var madeDirs []string
	cleanup := func() {
		for _, tmp := range tmps {
			if tmp != "" {
				_ = f.Remove(tmp)
			}
		}
		for _, d := range madeDirs {
			_ = f.Remove(d) // only succeeds while empty
		}
	}
	for i, pf := range files {
		if !pf.exists {
			continue
		}
		made, err := mkdirs(f, path.Dir(pf.name))
		madeDirs = append(made, madeDirs...) // deepest first
		if err != nil {
			cleanup()
			return fsError(err, path.Dir(pf.path))
		}
		if tmps[i], err = stageTemp(f, pf.name, pf.path, pf.data, pf.mode); err != nil {
			cleanup()
			return err
		}
	}
	for i, pf := range files {
		var err error
		if pf.exists {
			err = f.Rename(tmps[i], pf.name)
			if err == nil {
				tmps[i] = ""
			}
		} else {
			err = f.Remove(pf.name)
		}
		if err != nil {
			failed := fsError(err, pf.path).(*httpError)
			msg := failed.msg + "; the patch was not applied"
			if bad := restore(f, files[:i]); len(bad) > 0 {
				msg += fmt.Sprintf(", but restoring %s failed, so those files may hold the patched content", strings.Join(bad, ", "))
			} else if i > 0 {
				msg += " and the files it had already changed were restored"
			}
			cleanup()
			return &httpError{failed.status, msg}
		}
	}
	for _, pf := range files {
		syncDir(f, pf.name)
	}
	return nil
}

// restore puts back the original state of files and returns the paths it
// could not restore.
func restore(f fsys, files []*patchFile) []string {
	var bad []string
	for _, pf := range files {
		var err error
		if pf.origExists {
			err = replaceFile(f, pf.name, pf.path, pf.orig, pf.origMode)
		} else {
			err = f.Remove(pf.name)
		}
		if err != nil {
			bad = append(bad, pf.path)
		}
	}
	return bad
}

// mkdirs creates the missing directories of dir, top down, and returns
// the ones it made, deepest first, so that a rollback can remove them.
func mkdirs(f fsys, dir string) ([]string, error) {
	var missing []string
	for d := dir; d != "." && d != "/" && d != ""; d = path.Dir(d) {
		_, err := f.Lstat(d)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		missing = append(missing, d)
	}
	var made []string
	for i := len(missing) - 1; i >= 0; i-- {
		if err := f.Mkdir(missing[i], 0o755); err != nil {
			return made, err
		}
		made = append([]string{missing[i]}, made...)
	}
	return made, nil
}
