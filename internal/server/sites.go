package server

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// siteDirs resolves the sites directory (default <DataDir>/sites, created
// 0755) and the allowed extra site roots to clean absolute paths, and
// refuses any that would expose the data directory: a site root is served
// to the world, and the data directory holds the store and the keys.
func siteDirs(o *Options) error {
	// The data directory first, 0700 as the store makes it, so that the
	// sites directory inside it does not create it 0755.
	if err := os.MkdirAll(o.DataDir, 0o700); err != nil {
		return fmt.Errorf("server: data directory: %w", err)
	}
	data, err := realAbs(o.DataDir)
	if err != nil {
		return fmt.Errorf("server: data directory: %w", err)
	}
	if o.SitesDir == "" {
		o.SitesDir = filepath.Join(o.DataDir, "sites")
	}
	if o.SitesDir, err = filepath.Abs(o.SitesDir); err != nil {
		return fmt.Errorf("server: sites directory: %w", err)
	}
	if err := os.MkdirAll(o.SitesDir, 0o755); err != nil {
		return fmt.Errorf("server: sites directory: %w", err)
	}
	dirs := append([]string{o.SitesDir}, o.SiteRootsAllow...)
	allow := make([]string, 0, len(o.SiteRootsAllow))
	for i, d := range dirs {
		what := "the sites directory"
		if i > 0 {
			what = "allowed site root"
			if !filepath.IsAbs(d) {
				return fmt.Errorf("server: %s %q must be an absolute path", what, d)
			}
			allow = append(allow, filepath.Clean(d))
		}
		real, err := realAbs(d)
		if err != nil {
			return fmt.Errorf("server: %s: %w", what, err)
		}
		if contains(real, data) {
			return fmt.Errorf("server: %s %s contains the data directory %s, whose store and keys a site would then serve; choose a directory beside it", what, d, o.DataDir)
		}
	}
	o.SiteRootsAllow = allow
	// Absolute artifact store roots are read whole (every tag, every
	// blob): one containing the data directory would read berth's own
	// store past its namespace walls.
	roots := make([]string, 0, len(o.ArtifactRoots))
	for _, d := range o.ArtifactRoots {
		if !filepath.IsAbs(d) {
			return fmt.Errorf("server: artifact store root directory %q must be an absolute path", d)
		}
		real, err := realAbs(d)
		if err != nil {
			return fmt.Errorf("server: artifact store root directory: %w", err)
		}
		if contains(real, data) || contains(data, real) {
			return fmt.Errorf("server: artifact store root directory %s overlaps the data directory %s, whose store a deployment would then read past its namespace; choose a directory beside it", d, o.DataDir)
		}
		roots = append(roots, filepath.Clean(d))
	}
	o.ArtifactRoots = roots
	return nil
}

// realAbs is p made absolute, with symbolic links resolved as far as p
// exists.
func realAbs(p string) (string, error) {
	p, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	rest := ""
	for q := p; ; q = filepath.Dir(q) {
		if r, err := filepath.EvalSymlinks(q); err == nil {
			return filepath.Join(r, rest), nil
		}
		if q == filepath.Dir(q) {
			return p, nil
		}
		rest = filepath.Join(filepath.Base(q), rest)
	}
}

// contains reports whether dir is p or one of its parents.
func contains(dir, p string) bool {
	return dir == "/" || p == dir || strings.HasPrefix(p, dir+"/")
}

// SitesDir is the resolved sites directory: site roots live in
// <SitesDir>/<namespace>.
func (s *Server) SitesDir() string { return s.o.SitesDir }
