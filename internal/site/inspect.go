package site

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// Root statuses reported by Inspect, and by the X-Applb-Site header as
// "root-<status>". They are the values of the admin API's
// SiteRootStatus.status.
const (
	StatusOK            = "ok"
	StatusMissing       = "missing"
	StatusNotADirectory = "not_a_directory"
	StatusUnreadable    = "unreadable"
	StatusEmpty         = "empty"
)

// Status describes whether a site root can serve, for the admin API's
// DeploymentStatus.site (SiteRootStatus on the wire; the JSON tags match).
type Status struct {
	// Root is the directory that was inspected, as given.
	Root string `json:"root"`
	// Status is one of StatusOK, StatusMissing, StatusNotADirectory,
	// StatusUnreadable or StatusEmpty.
	Status string `json:"status"`
	// IndexPresent reports, for an ok root and a non-empty index name,
	// whether the index file exists at the root as a regular file. It is
	// nil otherwise.
	IndexPresent *bool `json:"index_present,omitempty"`
	// Hint says, for an operator, why the root cannot serve and how to
	// fill it; it is empty when there is nothing to fix.
	Hint string `json:"hint,omitempty"`
}

// Inspect reports whether root can serve a site whose index file is index
// ("" when directories have no index). It only reads metadata and at most
// one directory entry, so it is cheap enough for every status request.
func Inspect(root, index string) Status {
	return Config{Root: root, Index: index}.Inspect()
}

// Inspect is [Inspect] of the config's root and index, opening the root
// as the handler does (through Within when set).
func (c Config) Inspect() Status {
	root, index := c.Root, c.Index
	st := Status{Root: root}
	fi, err := c.stat()
	switch {
	case err != nil && (errors.Is(err, fs.ErrPermission) || c.Within != "" && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR)):
		// Under Within, anything but a missing root is a refusal: a
		// symbolic link out of it, or a root outside it.
		return unreadable(st, err)
	case err != nil:
		// ENOENT, or ENOTDIR for a root under a file: nothing there
		// yet either way.
		st.Status = StatusMissing
		st.Hint = fmt.Sprintf("%s does not exist; create the directory and copy the site's files into it, or pull a site artifact", root)
		return st
	case !fi.IsDir():
		st.Status = StatusNotADirectory
		st.Hint = fmt.Sprintf("%s is a %s, not a directory; site.root must name the directory that holds the site's files", root, describe(fi.Mode()))
		return st
	}

	r, err := c.open()
	if err != nil {
		return unreadable(st, err)
	}
	defer r.Close()
	d, err := r.Open(".")
	if err != nil {
		return unreadable(st, err)
	}
	_, err = d.ReadDir(1)
	d.Close()
	switch {
	case err == io.EOF:
		st.Status = StatusEmpty
		st.Hint = fmt.Sprintf("%s is empty; copy the site's files into it, or pull a site artifact", root)
		return st
	case err != nil:
		return unreadable(st, err)
	}

	st.Status = StatusOK
	if index != "" {
		ifi, err := r.Stat(index)
		present := err == nil && ifi.Mode().IsRegular()
		st.IndexPresent = &present
		if !present {
			st.Hint = fmt.Sprintf("%s has no %s; requests for / will answer 404", root, index)
		}
	}
	return st
}

// unreadable marks st as unreadable, naming the underlying errno (the path
// is already in the hint).
func unreadable(st Status, err error) Status {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	st.Status = StatusUnreadable
	st.Hint = fmt.Sprintf("the gateway cannot read %s (%v); give the user berth runs read and search permission on it", st.Root, err)
	return st
}

// describe names a non-directory file type for hints.
func describe(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "regular file"
	case m&fs.ModeSymlink != 0:
		return "symbolic link"
	case m&fs.ModeNamedPipe != 0:
		return "named pipe"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeDevice != 0:
		return "device"
	}
	return "special file"
}

// errEscapes is the error of a root that lies outside Within.
var errEscapes = errors.New("the site root lies outside the directory it is confined to")

// rel returns Root relative to Within.
func (c Config) rel() (string, error) {
	rel, err := filepath.Rel(c.Within, c.Root)
	if err != nil || !filepath.IsAbs(c.Within) || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", errEscapes
	}
	return rel, nil
}

// open opens the root: through an os.Root on Within when set, so that no
// symbolic link (the root itself included) leads out of Within.
func (c Config) open() (*os.Root, error) {
	if c.Within == "" {
		return os.OpenRoot(c.Root)
	}
	rel, err := c.rel()
	if err != nil {
		return nil, err
	}
	base, err := os.OpenRoot(c.Within)
	if err != nil {
		return nil, err
	}
	if rel == "." {
		return base, nil
	}
	defer base.Close()
	return base.OpenRoot(rel)
}

// stat stats the root as open resolves it.
func (c Config) stat() (fs.FileInfo, error) {
	if c.Within == "" {
		return os.Stat(c.Root)
	}
	rel, err := c.rel()
	if err != nil {
		return nil, err
	}
	base, err := os.OpenRoot(c.Within)
	if err != nil {
		return nil, err
	}
	defer base.Close()
	return base.Stat(rel)
}
