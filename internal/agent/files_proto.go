package agent

import "time"

// Limits of the text-oriented files endpoints. They exist because each of
// these operations holds whole files in memory and answers in one JSON
// body; bytes beyond them go through GET and PUT /v1/files, which stream.
const (
	// MaxTextFile is the largest file that read, edit and patch accept,
	// and the largest file grep searches (larger ones are skipped).
	MaxTextFile = 10 << 20
	// MaxWalkEntries bounds the directory entries one glob or grep
	// visits; a walk that reaches it answers what it found, truncated.
	MaxWalkEntries = 200_000
	// MaxGrepBytes bounds the bytes one grep reads.
	MaxGrepBytes = 256 << 20
	// DefaultGlobLimit and DefaultGrepLimit are the result counts used
	// when a request gives none; MaxResults caps what a request may ask.
	DefaultGlobLimit = 1000
	DefaultGrepLimit = 500
	MaxResults       = 10_000
	// MaxGrepContext caps the context lines around a grep match.
	MaxGrepContext = 10
	// MaxGrepLine caps the bytes of a line reported by grep, so that one
	// minified file cannot fill the answer.
	MaxGrepLine = 2000
)

// HeaderSHA256 is the header of GET /v1/files answers that carries the
// hex SHA-256 of the whole file (whatever range was asked for), for use
// as EditRequest.ExpectedSHA256 or WriteRequest.ExpectedSHA256.
const HeaderSHA256 = "X-File-Sha256"

// ReadTextRequest is the body of POST /v1/files/read.
type ReadTextRequest struct {
	Path string `json:"path"`
	// OffsetLine is the 1-based number of the first line to return; 0
	// means 1.
	OffsetLine int `json:"offset_line,omitempty"`
	// LimitLines is how many lines to return; 0 means all of them.
	LimitLines int `json:"limit_lines,omitempty"`
}

// ReadTextResult is the body answered by POST /v1/files/read.
type ReadTextResult struct {
	Path string `json:"path"`
	// Content is the requested lines, exactly as in the file (newlines
	// included).
	Content string `json:"content"`
	// TotalLines counts the file's lines; a last line without a newline
	// counts, an empty file has none.
	TotalLines int `json:"total_lines"`
	// StartLine is the 1-based number of Content's first line.
	StartLine int `json:"start_line"`
	// Truncated reports lines after the window.
	Truncated bool `json:"truncated"`
	// Size and SHA256 describe the whole file; SHA256 is hex.
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// WriteRequest is the body of POST /v1/files/write, the JSON form of an
// atomic whole-file write (PUT /v1/files takes raw bytes instead).
type WriteRequest struct {
	Path string `json:"path"`
	// Content is the new content, carried as Encoding says.
	Content string `json:"content"`
	// Encoding is EncodingText (default) or EncodingBase64.
	Encoding string `json:"encoding,omitempty"`
	// Mode is octal permission bits; empty keeps the replaced file's mode,
	// or 0644 for a new file.
	Mode string `json:"mode,omitempty"`
	// ExpectedSHA256, when set, makes the write fail with 412 unless the
	// file currently has this hex SHA-256, so a writer that read the file
	// cannot clobber a change made since.
	ExpectedSHA256 string `json:"expected_sha256,omitempty"`
	// Parents creates missing parent directories (0755).
	Parents bool `json:"parents,omitempty"`
}

// WriteResult reports a file that a write, edit or patch left behind:
// what berth turns into a files.written fact.
type WriteResult struct {
	Path string `json:"path"`
	// Bytes is the file's new size.
	Bytes int64 `json:"bytes"`
	// SHA256 is the hex SHA-256 of the new content.
	SHA256 string `json:"sha256"`
	// Created reports that the file did not exist before.
	Created bool `json:"created,omitempty"`
}

// GlobRequest is the body of POST /v1/files/glob.
type GlobRequest struct {
	// Pattern is a doublestar pattern (*, **, ?, [a-z], {a,b}) matched
	// against paths relative to Path. An absolute pattern is allowed when
	// Path is empty and means the same pattern relative to /.
	Pattern string `json:"pattern"`
	// Path is the directory searched; empty means /.
	Path string `json:"path,omitempty"`
	// Limit caps the matches; 0 means DefaultGlobLimit, at most
	// MaxResults.
	Limit int `json:"limit,omitempty"`
}

// GlobMatch is a file found by a glob.
type GlobMatch struct {
	// Path is relative to the request's Path: what the pattern matched.
	Path    string    `json:"path"`
	Size    int64     `json:"size"`
	ModTime time.Time `json:"mtime"`
}

// GlobResult is the body answered by POST /v1/files/glob.
type GlobResult struct {
	// Matches are the matching files, newest first (then by path).
	Matches []GlobMatch `json:"matches"`
	// Truncated reports that the limit, or MaxWalkEntries, left some out.
	Truncated bool `json:"truncated"`
}

// GrepRequest is the body of POST /v1/files/grep.
type GrepRequest struct {
	// Pattern is an RE2 regular expression (Go's regexp syntax), matched
	// against each line without its newline.
	Pattern string `json:"pattern"`
	// Path is the directory searched, or one file; empty means /.
	Path string `json:"path,omitempty"`
	// Glob, when set, limits the files searched: a pattern without a
	// slash matches base names ("*.go"), one with a slash matches paths
	// relative to Path ("src/**/*.go").
	Glob string `json:"glob,omitempty"`
	// IgnoreCase matches case-insensitively.
	IgnoreCase bool `json:"ignore_case,omitempty"`
	// MaxResults caps the matches; 0 means DefaultGrepLimit, at most
	// MaxResults.
	MaxResults int `json:"max_results,omitempty"`
	// MaxPerFile, when positive, caps the matches taken from one file.
	MaxPerFile int `json:"max_per_file,omitempty"`
	// Context is the number of lines reported before and after each
	// match, at most MaxGrepContext.
	Context int `json:"context,omitempty"`
}

// GrepMatch is one matching line.
type GrepMatch struct {
	// Path is relative to the request's Path; when Path names a file, it
	// is that file's base name.
	Path string `json:"path"`
	// Line is the 1-based line number.
	Line int `json:"line"`
	// Text is the line without its newline, cut at MaxGrepLine bytes and
	// with invalid UTF-8 replaced.
	Text string `json:"text"`
	// Before and After are the context lines, when asked for.
	Before []string `json:"before,omitempty"`
	After  []string `json:"after,omitempty"`
}

// GrepResult is the body answered by POST /v1/files/grep.
type GrepResult struct {
	Matches []GrepMatch `json:"matches"`
	// Truncated reports that a limit stopped the search early.
	Truncated bool `json:"truncated"`
	// FilesScanned counts the files searched (binary files, which are
	// skipped, and files over MaxTextFile are not counted).
	FilesScanned int `json:"files_scanned"`
}

// Edit is one exact-string replacement of an EditRequest.
type Edit struct {
	// Old is the text to find, byte for byte; it must not be empty.
	Old string `json:"old"`
	// New replaces it.
	New string `json:"new"`
	// ReplaceAll replaces every occurrence; without it Old must occur
	// exactly once.
	ReplaceAll bool `json:"replace_all,omitempty"`
}

// EditRequest is the body of POST /v1/files/edit.
type EditRequest struct {
	Path string `json:"path"`
	// Edits apply in order, each to the result of the ones before; the
	// file is replaced only if all of them apply.
	Edits []Edit `json:"edits"`
	// ExpectedSHA256, when set, makes the edit fail with 412 unless the
	// file currently has this hex SHA-256.
	ExpectedSHA256 string `json:"expected_sha256,omitempty"`
}

// EditResult is the body answered by POST /v1/files/edit.
type EditResult struct {
	Path   string `json:"path"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
	// Replacements counts the occurrences replaced by all edits.
	Replacements int `json:"replacements"`
}

// PatchRequest is the body of POST /v1/files/patch.
type PatchRequest struct {
	// Patch is a unified diff of one or more files, in git's format
	// ("diff --git a/x b/x") or the traditional one ("--- x" / "+++ x").
	Patch string `json:"patch"`
	// Strip is how many leading path components to drop from the names
	// in the diff, as with patch -p / git apply -p. When absent, a git
	// diff drops one (its a/ and b/), and a traditional diff drops a
	// leading a/ or b/ if there is one.
	Strip *int `json:"strip,omitempty"`
	// Dir is the directory relative names are taken from; empty means /.
	// Absolute names in a traditional diff are used as they are.
	Dir string `json:"dir,omitempty"`
}

// PatchedFile reports one file a patch changed.
type PatchedFile struct {
	Path string `json:"path"`
	// Bytes and SHA256 describe the new content; both are zero for a
	// deleted file.
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256,omitempty"`
	// Created and Deleted report a file the patch added or removed.
	Created bool `json:"created,omitempty"`
	Deleted bool `json:"deleted,omitempty"`
}

// PatchResult is the body answered by POST /v1/files/patch.
type PatchResult struct {
	// Files are the files changed, in the order the patch names them.
	Files []PatchedFile `json:"files"`
}
