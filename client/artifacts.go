package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// ArtifactsInfo answers `GET /namespaces/:ns/artifacts`.
type ArtifactsInfo struct {
	Namespace string `json:"namespace"`
	Available bool   `json:"available"`
	Writable  bool   `json:"writable"`
	Prefix    string `json:"prefix"`
}

// ArtifactBlob answers a blob upload.
type ArtifactBlob struct {
	Digest string `json:"digest"` // 64 hex digits
	Size   int64  `json:"size"`
}

// ArtifactTag is one tag of a namespace's artifacts; Tag is without the
// namespace's prefix.
type ArtifactTag struct {
	Tag       string    `json:"tag"`
	Digest    string    `json:"digest"`
	MediaType string    `json:"media_type,omitempty"`
	Size      int64     `json:"size"`
	UpdatedAt time.Time `json:"updated_at"`
}

var errNoNamespace = errors.New("client: empty namespace")

func artifactsPath(ns, rest string) string {
	p := "/namespaces/" + url.PathEscape(ns) + "/artifacts"
	if rest != "" {
		p += "/" + rest
	}
	return p
}

// isDigest reports whether ref is a sha256 digest ("<hex>" or
// "sha256:<hex>") and returns the hex.
func isDigest(ref string) (string, bool) {
	ref = strings.TrimPrefix(ref, "sha256:")
	if len(ref) != 64 {
		return "", false
	}
	if _, err := hex.DecodeString(ref); err != nil || strings.ToLower(ref) != ref {
		return "", false
	}
	return ref, true
}

// ArtifactsInfo reports whether namespace ns has an artifact store and
// whether this client may publish to it.
func (c *Client) ArtifactsInfo(ctx context.Context, ns string) (*ArtifactsInfo, error) {
	if ns == "" {
		return nil, errNoNamespace
	}
	var out ArtifactsInfo
	if _, err := c.send(ctx, http.MethodGet, artifactsPath(ns, ""), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// PushArtifact uploads size bytes read from r as blob digest of namespace
// ns (`PUT …/artifacts/blobs/<digest>`); the server checks the digest.
// size -1 sends the body chunked.
func (c *Client) PushArtifact(ctx context.Context, ns, digest string, r io.Reader, size int64) (*ArtifactBlob, error) {
	if ns == "" {
		return nil, errNoNamespace
	}
	d, ok := isDigest(digest)
	if !ok {
		return nil, fmt.Errorf("client: %q is not a sha256 digest", digest)
	}
	p := artifactsPath(ns, "blobs/"+d)
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, c.base+p, r)
	if err != nil {
		return nil, fmt.Errorf("client: PUT %s: %w", p, err)
	}
	req.ContentLength = size
	if size == 0 {
		req.Body = http.NoBody
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("Accept", "application/json")
	c.setHeaders(req.Header)
	resp, err := c.untimed().Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBytes))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, newError(resp.StatusCode, b)
	}
	var out ArtifactBlob
	if err := decodeBody(b, &out); err != nil {
		return nil, fmt.Errorf("client: PUT %s: %w", p, err)
	}
	return &out, nil
}

// PushArtifactFile uploads the file at path to namespace ns: it is read
// once for its digest and once to send it.
func (c *Client) PushArtifactFile(ctx context.Context, ns, path string) (*ArtifactBlob, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return nil, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	return c.PushArtifact(ctx, ns, hex.EncodeToString(h.Sum(nil)), f, n)
}

// TagArtifact points tag of namespace ns at a blob it holds
// (`PUT …/artifacts/tags/<tag>`).
func (c *Client) TagArtifact(ctx context.Context, ns, tag, digest string) (*ArtifactTag, error) {
	if ns == "" {
		return nil, errNoNamespace
	}
	var out ArtifactTag
	if _, err := c.send(ctx, http.MethodPut, artifactsPath(ns, "tags/"+tag), nil, map[string]string{"digest": digest}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ArtifactTag reads one tag of namespace ns.
func (c *Client) ArtifactTag(ctx context.Context, ns, tag string) (*ArtifactTag, error) {
	if ns == "" {
		return nil, errNoNamespace
	}
	var out ArtifactTag
	if _, err := c.send(ctx, http.MethodGet, artifactsPath(ns, "tags/"+tag), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ArtifactTags lists namespace ns's tags starting with prefix.
func (c *Client) ArtifactTags(ctx context.Context, ns, prefix string) ([]ArtifactTag, error) {
	if ns == "" {
		return nil, errNoNamespace
	}
	p := artifactsPath(ns, "tags")
	if prefix != "" {
		p += "?" + url.Values{"prefix": {prefix}}.Encode()
	}
	var out []ArtifactTag
	if _, err := c.send(ctx, http.MethodGet, p, nil, nil, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// UntagArtifact deletes a tag of namespace ns (the blob stays).
func (c *Client) UntagArtifact(ctx context.Context, ns, tag string) error {
	if ns == "" {
		return errNoNamespace
	}
	_, err := c.send(ctx, http.MethodDelete, artifactsPath(ns, "tags/"+tag), nil, nil, nil)
	return err
}

// FetchArtifact copies the blob ref names (a tag, or a digest) in
// namespace ns to w, checking its digest as it streams; a mismatch is an
// error naming both digests (w then holds bytes that are not the blob).
func (c *Client) FetchArtifact(ctx context.Context, ns, ref string, w io.Writer) (digest string, n int64, err error) {
	if ns == "" {
		return "", 0, errNoNamespace
	}
	d, ok := isDigest(ref)
	if !ok {
		t, err := c.ArtifactTag(ctx, ns, ref)
		if err != nil {
			return "", 0, err
		}
		d = t.Digest
	}
	resp, err := c.stream(ctx, http.MethodGet, artifactsPath(ns, "blobs/"+d), nil, nil)
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	h := sha256.New()
	n, err = io.Copy(io.MultiWriter(w, h), resp.Body)
	if err != nil {
		return d, n, fmt.Errorf("client: fetching sha256:%s: %w", d, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != d {
		return d, n, fmt.Errorf("client: the bytes fetched hash to sha256:%s, not sha256:%s", got, d)
	}
	return d, n, nil
}
