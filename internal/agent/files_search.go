package agent

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"net/http"
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/bmatcuk/doublestar/v4"
)

// maxGlobPattern bounds glob patterns, whose matching cost grows with
// their length and number of ** wildcards.
const maxGlobPattern = 4096

// errStopWalk ends a walk early without being an error.
var errStopWalk = errors.New("stop walk")

// walkFiles calls fn for every file beneath the directory dir of f, in
// lexical order of paths, with the path relative to dir, the name f takes
// and the file's (followed) description. A file is a regular file or a
// symlink that resolves to one; with an *os.Root the resolution cannot
// leave the root, and a link that tries is skipped. Directories are
// entered only when they are real directories: a symlinked directory is
// never followed, so a walk cannot loop or wander. Unreadable directories
// are skipped. The walk stops after MaxWalkEntries entries, returning
// true, or when fn returns errStopWalk.
func walkFiles(ctx context.Context, f fsys, dir string, fn func(rel, name string, fi fs.FileInfo) error) (bool, error) {
	type frame struct{ rel, name string }
	stack := []frame{{".", dir}}
	seen := 0
	for len(stack) > 0 {
		d := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if err := ctx.Err(); err != nil {
			return false, err
		}
		fh, err := f.Open(d.name)
		if err != nil {
			continue
		}
		ents, err := fh.ReadDir(-1)
		fh.Close()
		if err != nil && len(ents) == 0 {
			continue
		}
		slices.SortFunc(ents, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
		var subdirs []frame
		for _, e := range ents {
			if seen++; seen > MaxWalkEntries {
				return true, nil
			}
			rel, name := path.Join(d.rel, e.Name()), path.Join(d.name, e.Name())
			var fi fs.FileInfo
			switch t := e.Type(); {
			case t.IsDir():
				subdirs = append(subdirs, frame{rel, name})
				continue
			case t.IsRegular():
				fi, err = e.Info()
			case t&fs.ModeSymlink != 0:
				fi, err = statFollow(f, name)
			default:
				continue
			}
			if err != nil || !fi.Mode().IsRegular() {
				continue
			}
			if err := fn(rel, name, fi); err != nil {
				if errors.Is(err, errStopWalk) {
					return false, nil
				}
				return false, err
			}
		}
		// Pushed in reverse so the stack pops them in lexical order; a
		// directory's files come before its subdirectories' files.
		for _, sd := range slices.Backward(subdirs) {
			stack = append(stack, sd)
		}
	}
	return false, nil
}

// searchDir resolves the directory a glob or grep searches; empty means /.
func (s *Server) searchDir(p string) (target, error) {
	if p == "" {
		p = "/"
	}
	return s.resolve(p)
}

// glob answers POST /v1/files/glob.
func (s *Server) glob(ctx context.Context, req GlobRequest) (GlobResult, error) {
	pattern := req.Pattern
	if strings.HasPrefix(pattern, "/") {
		if req.Path != "" {
			return GlobResult{}, errorf(http.StatusBadRequest, "pattern %q is absolute; with path set it must be relative to path", pattern)
		}
		pattern = strings.TrimLeft(pattern, "/")
	}
	if pattern == "" {
		return GlobResult{}, errorf(http.StatusBadRequest, "pattern is required")
	}
	if len(pattern) > maxGlobPattern {
		return GlobResult{}, errorf(http.StatusBadRequest, "pattern is over %d bytes", maxGlobPattern)
	}
	if !doublestar.ValidatePattern(pattern) {
		return GlobResult{}, errorf(http.StatusBadRequest, "pattern %q is not a valid glob (unbalanced [ ] or { }, or a trailing \\)", req.Pattern)
	}
	limit, err := resultLimit(req.Limit, DefaultGlobLimit, "limit")
	if err != nil {
		return GlobResult{}, err
	}
	t, err := s.searchDir(req.Path)
	if err != nil {
		return GlobResult{}, err
	}
	defer t.fs.Close()
	if err := mustBeDir(t); err != nil {
		return GlobResult{}, err
	}
	// Start the walk at the pattern's literal leading directories, when
	// it has any that are plain names, rather than at the top.
	start, startRel := t.name, "."
	if base, _ := doublestar.SplitPattern(pattern); base != "." && !strings.ContainsAny(base, `\`) && !slices.Contains(strings.Split(base, "/"), "..") {
		start, startRel = path.Join(t.name, base), base
	}
	res := GlobResult{Matches: []GlobMatch{}}
	truncated, err := walkFiles(ctx, t.fs, start, func(rel, _ string, fi fs.FileInfo) error {
		rel = path.Join(startRel, rel)
		if doublestar.MatchUnvalidated(pattern, rel) {
			res.Matches = append(res.Matches, GlobMatch{Path: rel, Size: fi.Size(), ModTime: fi.ModTime().UTC()})
		}
		return nil
	})
	if err != nil {
		return GlobResult{}, err
	}
	slices.SortFunc(res.Matches, func(a, b GlobMatch) int {
		if c := b.ModTime.Compare(a.ModTime); c != 0 {
			return c
		}
		return strings.Compare(a.Path, b.Path)
	})
	if len(res.Matches) > limit {
		res.Matches, truncated = res.Matches[:limit], true
	}
	res.Truncated = truncated
	return res, nil
}

func resultLimit(n, def int, field string) (int, error) {
	switch {
	case n < 0:
		return 0, errorf(http.StatusBadRequest, "%s must not be negative", field)
	case n == 0:
		return def, nil
	}
	return min(n, MaxResults), nil
}

func mustBeDir(t target) error {
	fi, err := statFollow(t.fs, t.name)
	if err != nil {
		return fsError(err, t.path)
	}
	if !fi.IsDir() {
		return errorf(http.StatusBadRequest, "%s is not a directory", t.path)
	}
	return nil
}

// grep answers POST /v1/files/grep.
func (s *Server) grep(ctx context.Context, req GrepRequest) (GrepResult, error) {
	if req.Pattern == "" {
		return GrepResult{}, errorf(http.StatusBadRequest, "pattern is required")
	}
	expr := req.Pattern
	if req.IgnoreCase {
		expr = "(?i)" + expr
	}
	re, err := regexp.Compile(expr)
	if err != nil {
		return GrepResult{}, errorf(http.StatusBadRequest, "pattern is not a valid RE2 regular expression: %v", err)
	}
	if len(req.Glob) > maxGlobPattern {
		return GrepResult{}, errorf(http.StatusBadRequest, "glob is over %d bytes", maxGlobPattern)
	}
	if req.Glob != "" && !doublestar.ValidatePattern(req.Glob) {
		return GrepResult{}, errorf(http.StatusBadRequest, "glob %q is not a valid glob pattern", req.Glob)
	}
	limit, err := resultLimit(req.MaxResults, DefaultGrepLimit, "max_results")
	if err != nil {
		return GrepResult{}, err
	}
	if req.MaxPerFile < 0 || req.Context < 0 {
		return GrepResult{}, errorf(http.StatusBadRequest, "max_per_file and context must not be negative")
	}
	around := min(req.Context, MaxGrepContext)
	t, err := s.searchDir(req.Path)
	if err != nil {
		return GrepResult{}, err
	}
	defer t.fs.Close()
	fi, err := statFollow(t.fs, t.name)
	if err != nil {
		return GrepResult{}, fsError(err, t.path)
	}

	res := GrepResult{Matches: []GrepMatch{}}
	var scanned int64
	search := func(rel, name string, fi fs.FileInfo) error {
		if req.Glob != "" {
			subject := rel
			if !strings.Contains(req.Glob, "/") {
				subject = path.Base(rel)
			}
			if !doublestar.MatchUnvalidated(req.Glob, subject) {
				return nil
			}
		}
		if fi.Size() > MaxTextFile {
			return nil
		}
		if scanned+fi.Size() > MaxGrepBytes {
			res.Truncated = true
			return errStopWalk
		}
		data, _, err := readRegular(t.fs, name, rel, MaxTextFile)
		if err != nil {
			return nil // gone, grown or unreadable since the walk saw it
		}
		scanned += int64(len(data))
		if bytes.IndexByte(data[:min(len(data), 8000)], 0) >= 0 {
			return nil // binary
		}
		res.FilesScanned++
		if grepFile(&res, re, rel, data, limit, req.MaxPerFile, around) {
			res.Truncated = true
			return errStopWalk
		}
		return nil
	}
	if !fi.IsDir() {
		if !fi.Mode().IsRegular() {
			return GrepResult{}, errorf(http.StatusBadRequest, "%s is not a regular file or a directory", t.path)
		}
		if err := search(path.Base(t.path), t.name, fi); err != nil && !errors.Is(err, errStopWalk) {
			return GrepResult{}, err
		}
		return res, nil
	}
	truncated, err := walkFiles(ctx, t.fs, t.name, search)
	if err != nil {
		return GrepResult{}, err
	}
	res.Truncated = res.Truncated || truncated
	return res, nil
}

// grepFile appends the matches in data to res and reports whether the
// overall limit was reached with matches left over.
func grepFile(res *GrepResult, re *regexp.Regexp, rel string, data []byte, limit, perFile, around int) bool {
	lines := bytes.SplitAfter(data, []byte("\n"))
	if len(lines) > 0 && len(lines[len(lines)-1]) == 0 {
		lines = lines[:len(lines)-1]
	}
	text := func(i int) string {
		l := bytes.TrimRight(lines[i], "\r\n")
		if len(l) > MaxGrepLine {
			l = l[:MaxGrepLine]
		}
		return strings.ToValidUTF8(string(l), "\uFFFD")
	}
	n := 0
	for i, l := range lines {
		if !re.Match(bytes.TrimSuffix(bytes.TrimSuffix(l, []byte("\n")), []byte("\r"))) {
			continue
		}
		if len(res.Matches) >= limit {
			return true
		}
		if perFile > 0 && n >= perFile {
			return false
		}
		n++
		m := GrepMatch{Path: rel, Line: i + 1, Text: text(i)}
		for j := max(0, i-around); j < i; j++ {
			m.Before = append(m.Before, text(j))
		}
		for j := i + 1; j < len(lines) && j <= i+around; j++ {
			m.After = append(m.After, text(j))
		}
		res.Matches = append(res.Matches, m)
	}
	return false
}
