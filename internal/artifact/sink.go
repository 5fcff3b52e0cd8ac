package artifact

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
)

// Sink is a store a caller writes artifacts to: the counterpart of Source,
// for the stores Open names (a deployment's workspace snapshots are pushed
// through one).
type Sink interface {
	// PutBlob uploads size bytes (-1 unknown) of r as blob hex; the store
	// verifies the digest. Uploading a blob the store holds is a no-op for
	// its content.
	PutBlob(ctx context.Context, hex string, size int64, r io.Reader) error
	// PutTag points tag at blob hex, which the store must hold.
	PutTag(ctx context.Context, tag, hex string) error
}

// OpenSink returns the Sink a `store` string names, for a deployment in
// namespace ns, with key the store's API key: the same forms as Open, with
// the same namespace rule for berth's own store (a URL naming this
// berth's admin API writes to Local through that namespace, only when it
// is ns) and the same address guard for external stores. An absolute
// store root must lie in o.Roots and is created if missing.
func OpenSink(store, ns, key string, o OpenOptions) (Sink, error) {
	switch {
	case store == "local":
		if o.Local == nil {
			return nil, errors.New("store local: this server has no artifact store")
		}
		return nsSink{s: o.Local, ns: ns}, nil
	case strings.HasPrefix(store, "/"):
		src, err := openRoot(store, o.Roots)
		if err != nil {
			return nil, err
		}
		s := src.(rootSource).s
		if err := os.MkdirAll(s.path("tmp"), 0o700); err != nil {
			return nil, fmt.Errorf("store %q: %w", store, err)
		}
		return nsSink{s: s}, nil
	case strings.HasPrefix(store, "http://") || strings.HasPrefix(store, "https://"):
		src, err := openURL(store, ns, key, o)
		if err != nil {
			return nil, err
		}
		switch v := src.(type) {
		case nsSource:
			return nsSink{s: v.s, ns: v.ns}, nil
		case *httpSource:
			return (*httpSink)(v), nil
		}
		return nil, fmt.Errorf("store %q: not writable", store)
	}
	return nil, fmt.Errorf("store %q: not local, an http(s):// URL or an absolute store root", store)
}

// nsSink writes to a Store on this host, through namespace ns ("" none:
// a store root).
type nsSink struct {
	s  *Store
	ns string
}

func (n nsSink) PutBlob(_ context.Context, hex string, _ int64, r io.Reader) error {
	_, _, err := n.s.PutBlob(hex, r, n.ns)
	return err
}

func (n nsSink) PutTag(_ context.Context, tag, hex string) error {
	if why := CheckTag(tag); why != "" {
		return fmt.Errorf("tag: %s", why)
	}
	if n.ns != "" && !n.s.Claimed(n.ns, hex) {
		return fmt.Errorf("%w: no blob sha256:%s in namespace %q", ErrNotFound, hex, n.ns)
	}
	_, err := n.s.PutTag(fullTag(n.ns, tag), TagRecord{Digest: hex})
	return err
}

// httpSink speaks the `art` protocol's uploads to an external store.
type httpSink httpSource

func (h *httpSink) put(ctx context.Context, p string, size int64, body io.Reader) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, h.base+p, body)
	if err != nil {
		return err
	}
	if size >= 0 {
		req.ContentLength = size
		req.Header.Set("Content-Length", strconv.FormatInt(size, 10))
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	if h.key != "" {
		req.Header.Set("Authorization", "Bearer "+h.key)
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if resp.StatusCode/100 != 2 {
		msg := strings.TrimSpace(string(b))
		if resp.StatusCode == http.StatusNotFound {
			return fmt.Errorf("%w: %s", ErrNotFound, msg)
		}
		return fmt.Errorf("artifact store answered %s: %s", resp.Status, msg)
	}
	return nil
}

func (h *httpSink) PutBlob(ctx context.Context, hex string, size int64, r io.Reader) error {
	if err := h.put(ctx, "/blobs/"+hex, size, r); err != nil {
		return fmt.Errorf("blob sha256:%s: %w", hex, err)
	}
	return nil
}

func (h *httpSink) PutTag(ctx context.Context, tag, hex string) error {
	if why := CheckTag(tag); why != "" {
		return fmt.Errorf("tag: %s", why)
	}
	if err := h.put(ctx, "/tags/"+tag, int64(len(hex)), strings.NewReader(hex)); err != nil {
		return fmt.Errorf("tag %q: %w", tag, err)
	}
	return nil
}

// notFound is a not-found message that still matches ErrNotFound.
type notFound string

func (e notFound) Error() string { return string(e) }
func (notFound) Unwrap() error   { return ErrNotFound }
