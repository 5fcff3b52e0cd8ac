package artifact

import (
	"context"
	"io"
	"sync/atomic"
)

// Counting wraps a Source and counts the bytes its blobs deliver, for a
// job's "bytes transferred" (artifact-pull, mount-pull).
type Counting struct {
	Source
	n atomic.Int64
}

// Fetch fetches digest from the wrapped Source, counting what is read.
func (c *Counting) Fetch(ctx context.Context, digest string) (io.ReadCloser, int64, error) {
	rc, size, err := c.Source.Fetch(ctx, digest)
	if err != nil {
		return nil, 0, err
	}
	return &countingReader{rc: rc, n: &c.n}, size, nil
}

// Bytes is how many bytes the fetched blobs delivered so far.
func (c *Counting) Bytes() int64 { return c.n.Load() }

type countingReader struct {
	rc io.ReadCloser
	n  *atomic.Int64
}

func (r *countingReader) Read(p []byte) (int, error) {
	n, err := r.rc.Read(p)
	r.n.Add(int64(n))
	return n, err
}

func (r *countingReader) Close() error { return r.rc.Close() }
