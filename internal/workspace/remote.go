package workspace

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/berth-dev/berth/internal/artifact"
)

// ErrNotFound: the store has no such ref or blob.
var ErrNotFound = errors.New("not found")

// Remote is a deployment's store (vm.workspace.store): where each new
// snapshot is pushed, by digest, and tagged with the workspace's ref, and
// what a host without the snapshot restores it from.
type Remote interface {
	// Resolve is the digest (hex) ref names; an error wrapping ErrNotFound
	// when it names none.
	Resolve(ctx context.Context, ref string) (string, error)
	// Fetch streams blob hex (the caller verifies the bytes).
	Fetch(ctx context.Context, hex string) (io.ReadCloser, error)
	// PutBlob uploads size bytes of r as blob hex.
	PutBlob(ctx context.Context, hex string, size int64, r io.Reader) error
	// PutTag points ref at blob hex.
	PutTag(ctx context.Context, ref, hex string) error
}

// ArtifactRemote is a Remote over an artifact store (package artifact):
// berth's own ("local", or its admin URL …/namespaces/{ns}/artifacts), an
// `art serve` URL or a store root.
func ArtifactRemote(src artifact.Source, sink artifact.Sink) Remote {
	return artifactRemote{src, sink}
}

type artifactRemote struct {
	src  artifact.Source
	sink artifact.Sink
}

func (a artifactRemote) Resolve(ctx context.Context, ref string) (string, error) {
	hex, err := a.src.Resolve(ctx, ref)
	if errors.Is(err, artifact.ErrNotFound) {
		return "", fmt.Errorf("%w: %v", ErrNotFound, err)
	}
	return hex, err
}

func (a artifactRemote) Fetch(ctx context.Context, hex string) (io.ReadCloser, error) {
	rc, _, err := a.src.Fetch(ctx, hex)
	if errors.Is(err, artifact.ErrNotFound) {
		return nil, fmt.Errorf("%w: %v", ErrNotFound, err)
	}
	return rc, err
}

func (a artifactRemote) PutBlob(ctx context.Context, hex string, size int64, r io.Reader) error {
	return a.sink.PutBlob(ctx, hex, size, r)
}

func (a artifactRemote) PutTag(ctx context.Context, ref, hex string) error {
	return a.sink.PutTag(ctx, ref, hex)
}

// S3Options say how to reach an S3-compatible service.
type S3Options struct {
	// Endpoint is the service's URL (http://127.0.0.1:9000,
	// https://s3.eu-west-1.amazonaws.com); empty is AWS's
	// https://s3.amazonaws.com.
	Endpoint string
	// AccessKey, SecretKey and SessionToken sign the requests; all empty
	// is anonymous access.
	AccessKey, SecretKey, SessionToken string
	Region                             string
}

// S3 is an S3-compatible bucket holding workspace snapshots under a
// prefix, laid out as an artifact store root is:
//
//	<prefix>blobs/sha256/<hex>   each snapshot, by digest
//	<prefix>tags/<ref>           the digest ref names, as text
type S3 struct {
	c      *minio.Client
	bucket string
	prefix string // "" or ending in "/"
}

// ParseS3 splits s3://bucket[/prefix] into bucket and prefix (which ends
// in "/" unless empty).
func ParseS3(store string) (bucket, prefix string, err error) {
	rest, ok := strings.CutPrefix(store, "s3://")
	if !ok {
		return "", "", fmt.Errorf("store %q is not s3://bucket[/prefix]", store)
	}
	bucket, prefix, _ = strings.Cut(rest, "/")
	if bucket == "" {
		return "", "", fmt.Errorf("store %q names no bucket", store)
	}
	prefix = strings.Trim(prefix, "/")
	if prefix != "" {
		prefix += "/"
	}
	return bucket, prefix, nil
}

// NewS3 opens store, s3://bucket[/prefix], with o.
func NewS3(store string, o S3Options) (*S3, error) {
	bucket, prefix, err := ParseS3(store)
	if err != nil {
		return nil, err
	}
	ep := o.Endpoint
	if ep == "" {
		ep = "https://s3.amazonaws.com"
	}
	u, err := url.Parse(ep)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("S3 endpoint %q is not an http(s) URL", ep)
	}
	var creds *credentials.Credentials
	if o.AccessKey != "" || o.SecretKey != "" {
		creds = credentials.NewStaticV4(o.AccessKey, o.SecretKey, o.SessionToken)
	} else {
		creds = credentials.New(&credentials.Static{Value: credentials.Value{SignerType: credentials.SignatureAnonymous}})
	}
	c, err := minio.New(u.Host, &minio.Options{Creds: creds, Secure: u.Scheme == "https", Region: o.Region, BucketLookup: minio.BucketLookupPath})
	if err != nil {
		return nil, fmt.Errorf("S3 endpoint %q: %w", ep, err)
	}
	return &S3{c: c, bucket: bucket, prefix: prefix}, nil
}

func (s *S3) blob(hex string) string { return s.prefix + "blobs/sha256/" + hex }
func (s *S3) tag(ref string) string  { return s.prefix + "tags/" + ref }

func notFound(err error) bool {
	var r minio.ErrorResponse
	if errors.As(err, &r) {
		return r.StatusCode == 404 || r.Code == "NoSuchKey" || r.Code == "NoSuchBucket"
	}
	return false
}

// Object opens the object key of the bucket (the prefix is not applied)
// and returns its size.
func (s *S3) Object(ctx context.Context, key string) (io.ReadCloser, int64, error) {
	obj, err := s.c.GetObject(ctx, s.bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, 0, err
	}
	st, err := obj.Stat()
	if err != nil {
		obj.Close()
		if notFound(err) {
			return nil, 0, fmt.Errorf("%w: no object %q in bucket %q", ErrNotFound, key, s.bucket)
		}
		return nil, 0, fmt.Errorf("object %q in bucket %q: %w", key, s.bucket, err)
	}
	return obj, st.Size, nil
}

func (s *S3) Resolve(ctx context.Context, ref string) (string, error) {
	rc, _, err := s.Object(ctx, s.tag(ref))
	if err != nil {
		return "", err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, 4<<10))
	if err != nil {
		return "", fmt.Errorf("tag %q: %w", ref, err)
	}
	hex := strings.TrimPrefix(strings.TrimSpace(string(b)), "sha256:")
	if !isHex(hex) {
		return "", fmt.Errorf("tag %q: the bucket holds no digest there", ref)
	}
	return hex, nil
}

func (s *S3) Fetch(ctx context.Context, hex string) (io.ReadCloser, error) {
	rc, _, err := s.Object(ctx, s.blob(hex))
	return rc, err
}

func (s *S3) PutBlob(ctx context.Context, hex string, size int64, r io.Reader) error {
	_, err := s.c.PutObject(ctx, s.bucket, s.blob(hex), r, size, minio.PutObjectOptions{ContentType: "application/x-tar"})
	if err != nil {
		return fmt.Errorf("blob sha256:%s to bucket %q: %w", hex, s.bucket, err)
	}
	return nil
}

func (s *S3) PutTag(ctx context.Context, ref, hex string) error {
	_, err := s.c.PutObject(ctx, s.bucket, s.tag(ref), strings.NewReader(hex), int64(len(hex)), minio.PutObjectOptions{ContentType: "text/plain"})
	if err != nil {
		return fmt.Errorf("tag %q in bucket %q: %w", ref, s.bucket, err)
	}
	return nil
}

func isHex(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
