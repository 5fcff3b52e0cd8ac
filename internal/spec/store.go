package spec

import (
	"fmt"
	"net/netip"
	"net/url"
	"path"
	"strings"

	"github.com/berth-dev/berth/internal/netguard"
)

// CheckStore says what is wrong with the form of a `store` string
// (MountSpec.store, ArtifactSpec.store, BuildSpec.store), or "": "local"
// (this berth's own store, in the deployment's namespace), an http(s) URL
// (an `art serve` store or a berth admin API's
// /namespaces/<ns>/artifacts) without credentials, query or fragment and
// not at a literal link-local or metadata address, or a clean absolute
// store root. Package artifact opens what it names, and checks it again
// there: whether an address or a root is allowed is the server's to say
// when it fetches, after name resolution.
func CheckStore(store string) string {
	switch {
	case store == "local":
		return ""
	case strings.HasPrefix(store, "/"):
		if path.Clean(store) != store || strings.Contains(store, "/../") {
			return fmt.Sprintf("%q must be a clean absolute path", store)
		}
		return ""
	case strings.HasPrefix(store, "http://") || strings.HasPrefix(store, "https://"):
		u, err := url.Parse(store)
		switch {
		case err != nil:
			return fmt.Sprintf("%q is not a URL", store)
		case u.Host == "" || u.Hostname() == "":
			return fmt.Sprintf("%q names no host", store)
		case u.User != nil:
			return "a store URL carries no credentials (name a secret in auth)"
		case u.RawQuery != "" || u.Fragment != "":
			return "a store URL has no query or fragment"
		}
		if a, err := netip.ParseAddr(strings.Trim(u.Hostname(), "[]")); err == nil {
			if why := netguard.Forbidden(a); why != "" {
				return fmt.Sprintf("%q is %s", u.Hostname(), why)
			}
		}
		return ""
	}
	return fmt.Sprintf("%q: want local, an http(s):// artifact store URL or an absolute store root", store)
}

// store checks a store field: its form (CheckStore) and, for an absolute
// root, that it lies in one of Options.StoreRootsAllow.
func (v validator) store(field, store string) *FieldError {
	if why := CheckStore(store); why != "" {
		return fieldErr(field, "%s", why)
	}
	if !strings.HasPrefix(store, "/") {
		return nil
	}
	for _, d := range v.o.StoreRootsAllow {
		if store == d || strings.HasPrefix(store, strings.TrimSuffix(d, "/")+"/") {
			return nil
		}
	}
	if len(v.o.StoreRootsAllow) == 0 {
		return fieldErr(field, "%q: absolute store roots are not allowed here (the operator allows them with --artifact-roots, for fleet-wide writers); use local or a store URL", store)
	}
	return fieldErr(field, "%q is not in a directory the operator allows store roots in (%s)", store, strings.Join(v.o.StoreRootsAllow, ", "))
}
