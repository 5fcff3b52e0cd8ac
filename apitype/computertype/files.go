package computertype

// FileInfo describes a file in list and mkdir answers.
type FileInfo struct {
	Name       string `json:"name"`
	Path       string `json:"path"`
	Type       string `json:"type"` // file, dir, symlink or other
	Size       int64  `json:"size"`
	Mode       string `json:"mode"`    // octal, e.g. "0644"
	ModTime    int64  `json:"modTime"` // Unix milliseconds
	LinkTarget string `json:"linkTarget,omitempty"`
}

// ReadRequest is the body of files.read: a window of lines of a text file.
type ReadRequest struct {
	Path string `json:"path"`
	// Offset is the 1-based number of the first line; 0 means 1.
	Offset int `json:"offset,omitempty"`
	// Limit is how many lines to return; 0 means all.
	Limit int `json:"limit,omitempty"`
}

// ReadResult is the answer of files.read.
type ReadResult struct {
	Path       string `json:"path"`
	Content    string `json:"content"`
	StartLine  int    `json:"startLine"`
	TotalLines int    `json:"totalLines"`
	Truncated  bool   `json:"truncated"` // lines follow the window
	Size       int64  `json:"size"`
	SHA256     string `json:"sha256"` // of the whole file
}

// WriteRequest is the body of files.write: an atomic whole-file replace.
type WriteRequest struct {
	Path    string `json:"path"`
	Content string `json:"content"`
	// Encoding of Content: "text" (default) or "base64".
	Encoding string `json:"encoding,omitempty"`
	// Mode is octal permission bits; empty keeps the replaced file's, or
	// 0644.
	Mode string `json:"mode,omitempty"`
	// ExpectedSHA256 makes the write fail with 412 unless the file now
	// has this hex SHA-256 (the value files.read answered).
	ExpectedSHA256 string `json:"expectedSha256,omitempty"`
	// Parents creates missing parent directories.
	Parents bool `json:"parents,omitempty"`
}

// WriteResult is the answer of files.write and files.writeBytes.
type WriteResult struct {
	Path    string `json:"path"`
	Bytes   int64  `json:"bytes"`
	SHA256  string `json:"sha256,omitempty"`
	Created bool   `json:"created,omitempty"`
}

// PathRequest is the body of files.list.
type PathRequest struct {
	Path string `json:"path"`
}

// ListFilesResult is the answer of files.list, entries sorted by name.
type ListFilesResult struct {
	Path    string     `json:"path"`
	Entries []FileInfo `json:"entries"`
}

// GlobRequest is the body of files.glob.
type GlobRequest struct {
	// Pattern is matched against paths relative to Path: *, **, ?, [a-z],
	// {a,b}.
	Pattern string `json:"pattern"`
	// Path is the directory searched; empty means the workspace.
	Path  string `json:"path,omitempty"`
	Limit int    `json:"limit,omitempty"`
}

// GlobMatch is one file a glob found.
type GlobMatch struct {
	Path    string `json:"path"` // relative to the request's Path
	Size    int64  `json:"size"`
	ModTime int64  `json:"modTime"` // Unix milliseconds
}

// GlobResult is the answer of files.glob, newest first.
type GlobResult struct {
	Matches   []GlobMatch `json:"matches"`
	Truncated bool        `json:"truncated"`
}

// GrepRequest is the body of files.grep.
type GrepRequest struct {
	// Pattern is an RE2 regular expression matched against each line.
	Pattern string `json:"pattern"`
	// Path is the directory searched, or one file; empty means the
	// workspace.
	Path string `json:"path,omitempty"`
	// Glob limits the files searched ("*.go", "src/**/*.go").
	Glob       string `json:"glob,omitempty"`
	IgnoreCase bool   `json:"ignoreCase,omitempty"`
	MaxResults int    `json:"maxResults,omitempty"`
	MaxPerFile int    `json:"maxPerFile,omitempty"`
	Context    int    `json:"context,omitempty"`
}

// GrepMatch is one matching line.
type GrepMatch struct {
	Path   string   `json:"path"`
	Line   int      `json:"line"` // 1-based
	Text   string   `json:"text"`
	Before []string `json:"before,omitempty"`
	After  []string `json:"after,omitempty"`
}

// GrepResult is the answer of files.grep.
type GrepResult struct {
	Matches      []GrepMatch `json:"matches"`
	Truncated    bool        `json:"truncated"`
	FilesScanned int         `json:"filesScanned"`
}

// Edit is one exact-string replacement.
type Edit struct {
	// Old is the text to find, byte for byte; without ReplaceAll it must
	// occur exactly once.
	Old        string `json:"old"`
	New        string `json:"new"`
	ReplaceAll bool   `json:"replaceAll,omitempty"`
}

// EditRequest is the body of files.edit: the edits apply in order, each to
// the result of those before, and the file is replaced only if all apply
// (else 409, naming the edit). ExpectedSHA256 makes it fail with 412
// unless the file has that hash.
type EditRequest struct {
	Path           string `json:"path"`
	Edits          []Edit `json:"edits"`
	ExpectedSHA256 string `json:"expectedSha256,omitempty"`
}

// EditResult is the answer of files.edit.
type EditResult struct {
	Path         string `json:"path"`
	Bytes        int64  `json:"bytes"`
	SHA256       string `json:"sha256"`
	Replacements int    `json:"replacements"`
}

// PatchRequest is the body of files.patch: a unified diff of one or more
// files (git or traditional format), applied all or nothing; a hunk that
// does not apply is a 409 and changes no file.
type PatchRequest struct {
	Patch string `json:"patch"`
	// Strip drops leading path components from the diff's names, as patch
	// -p does; absent, a git diff drops its a/ and b/.
	Strip *int `json:"strip,omitempty"`
	// Dir is the directory names are taken from; empty means the
	// workspace.
	Dir string `json:"dir,omitempty"`
}

// PatchedFile is one file a patch changed.
type PatchedFile struct {
	Path    string `json:"path"`
	Bytes   int64  `json:"bytes"`
	SHA256  string `json:"sha256,omitempty"`
	Created bool   `json:"created,omitempty"`
	Deleted bool   `json:"deleted,omitempty"`
}

// PatchResult is the answer of files.patch.
type PatchResult struct {
	Files []PatchedFile `json:"files"`
}

// MkdirRequest is the body of mkdir.
type MkdirRequest struct {
	Path string `json:"path"`
	// Parents creates missing parents and accepts an existing directory.
	Parents bool `json:"parents,omitempty"`
	// Mode is octal permission bits; empty means 0755.
	Mode string `json:"mode,omitempty"`
}
