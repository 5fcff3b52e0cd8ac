package image

import "strings"

// IsReference reports whether an image name is a registry reference that
// Pull fetches, rather than the name of a locally imported image. The rule
// is Docker's test for a registry host, made strict so every name berth
// accepted before keeps meaning a local image:
//
//   - it holds "@sha256:" (a digest reference, "repo@sha256:…"), or
//   - its first "/"-separated part is a registry host: it contains a "." or
//     a ":" (a port), or is "localhost"; e.g. "docker.io/library/x:1",
//     "ghcr.io/o/app:v2", "localhost:5000/app".
//
// So "alpine", "alpine:3.20" and "team/base" stay local names (import
// them with berth image import), while "docker.io/library/alpine:3.20" is
// pulled. Write Docker Hub images with their docker.io/ prefix.
func IsReference(name string) bool {
	if strings.Contains(name, "@"+DigestPrefix) {
		return true
	}
	host, _, ok := strings.Cut(name, "/")
	if !ok {
		return false
	}
	return strings.ContainsAny(host, ".:") || host == "localhost"
}
