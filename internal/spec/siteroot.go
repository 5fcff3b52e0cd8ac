package spec

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/berth-dev/berth/apitype"
)

// Site roots are confined (issue 9): a site serves files from the gateway
// host, so its root must lie in a directory the operator set aside for
// sites, never anywhere a spec names.
//
//   - Every namespace has its own subtree of the sites directory,
//     <SitesDir>/<namespace> ("default" for the default namespace). A
//     relative site.root is resolved inside it, an empty one becomes
//     <SitesDir>/<namespace>/<id>, and an absolute one must lie in it.
//   - The operator may allow more directories (SiteRootsAllow, the
//     --site-roots-allow flag). Only writers that cover the whole fleet get
//     them: the registry validates a confined writer's spec with
//     SiteRootsAllow cleared, so a namespace token stays inside its own
//     subtree.
//   - With no sites directory and no allowed root, every site is refused.
//
// This is the check on the spec's text; the site server opens the root
// through an os.Root on the confining directory ([SiteBase]), so a
// symbolic link (the root itself, or any component of it) cannot lead out
// of it either.

// SiteBase returns the directory that confines the site root of s (which
// must be normalized): the namespace's subtree of o.SitesDir, or the entry
// of o.SiteRootsAllow the root lies in. ok is false when the root lies in
// neither.
func SiteBase(s *apitype.DeploymentSpec, o Options) (base string, ok bool) {
	if s.Site == nil || !isAbsPath(s.Site.Root) {
		return "", false
	}
	root := filepath.Clean(s.Site.Root)
	if ns := nsSitesDir(s, o); ns != "" && within(root, ns) {
		return ns, true
	}
	for _, a := range o.SiteRootsAllow {
		if a = filepath.Clean(a); isAbsPath(a) && within(root, a) {
			return a, true
		}
	}
	return "", false
}

// nsSitesDir is the namespace's subtree of the sites directory, or "" when
// there is none (no sites directory, or an invalid namespace).
func nsSitesDir(s *apitype.DeploymentSpec, o Options) string {
	if o.SitesDir == "" || s.Namespace != "" && namespaceProblem(s.Namespace) != "" {
		return ""
	}
	return filepath.Join(filepath.Clean(o.SitesDir), Namespace(s))
}

// within reports whether the clean absolute path p is dir or lies under it.
func within(p, dir string) bool {
	if dir == "/" {
		return true
	}
	return p == dir || strings.HasPrefix(p, dir+"/")
}

// normalizeSiteRoot fills in the managed root and resolves a relative one
// inside the namespace's subtree; an absolute root is cleaned.
func normalizeSiteRoot(s *apitype.DeploymentSpec, o Options) {
	st := s.Site
	switch {
	case strings.Contains(st.Root, "\x00"):
		return // Validate refuses it
	case st.Root == "":
		if ns := nsSitesDir(s, o); ns != "" && validID(s.ID) {
			// Both id and namespace are checked first so neither can
			// climb out of SitesDir.
			st.Root = filepath.Join(ns, s.ID)
		}
	case isAbsPath(st.Root):
		st.Root = filepath.Clean(st.Root)
	default:
		if ns := nsSitesDir(s, o); ns != "" {
			st.Root = filepath.Join(ns, st.Root)
		}
	}
}

// siteRootProblem checks that the site root lies where o allows; st.Root
// is already known to be absolute and free of NUL.
func siteRootProblem(s *apitype.DeploymentSpec, o Options) *FieldError {
	if _, ok := SiteBase(s, o); ok {
		return nil
	}
	ns := nsSitesDir(s, o)
	if ns == "" && len(o.SiteRootsAllow) == 0 {
		return fieldErr("site.root", "site deployments are not enabled on this server (no sites directory is configured)")
	}
	msg := fmt.Sprintf("%q is outside the sites directory of namespace %q", s.Site.Root, Namespace(s))
	if ns != "" {
		msg += fmt.Sprintf(" (%s); give a path relative to it, or leave root empty for %s", ns, filepath.Join(ns, "<id>"))
	}
	if len(o.SiteRootsAllow) > 0 {
		msg += fmt.Sprintf("; the operator also allows %s", strings.Join(o.SiteRootsAllow, ", "))
	}
	return fieldErr("site.root", "%s", msg)
}
