package artifact

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
)

// MediaTypeDockerfile marks a Dockerfile manifest: the recipe a
// BuildSpec with a store builds from (types.d.ts BuildSpec.store).
const MediaTypeDockerfile = "heyvm.dockerfile.v1"

// maxManifest bounds a manifest blob: it holds a Dockerfile, not a
// context.
const maxManifest = 1 << 20

// DockerfileManifest is a JSON blob, tagged with media type
// MediaTypeDockerfile:
//
//	{"dockerfile": "FROM alpine\n…", "context_digest": "<hex>",
//	 "image_name": "web", "size_mb": 2048}
//
// dockerfile is the recipe's text; context_digest, when set, names a
// tar/tar.gz blob of the build context in the same store (and namespace);
// image_name and size_mb are the defaults of the image built, which the
// BuildSpec's image_name and image_size_mb override.
type DockerfileManifest struct {
	Dockerfile    string `json:"dockerfile"`
	ContextDigest string `json:"context_digest,omitempty"`
	ImageName     string `json:"image_name,omitempty"`
	SizeMB        int    `json:"size_mb,omitempty"`
}

// ParseDockerfileManifest reads and checks a manifest (at most 1 MiB),
// naming the field at fault.
func ParseDockerfileManifest(r io.Reader) (*DockerfileManifest, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxManifest+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxManifest {
		return nil, fmt.Errorf("a Dockerfile manifest is at most %d bytes", maxManifest)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var m DockerfileManifest
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("not a Dockerfile manifest: %w", err)
	}
	switch {
	case m.Dockerfile == "":
		return nil, fmt.Errorf("dockerfile: required")
	case m.SizeMB < 0:
		return nil, fmt.Errorf("size_mb: must not be negative")
	}
	if m.ContextDigest != "" {
		hex, ok := ParseDigest(m.ContextDigest)
		if !ok {
			return nil, fmt.Errorf("context_digest: %q is not a sha256 digest", m.ContextDigest)
		}
		m.ContextDigest = hex
	}
	return &m, nil
}
