// Package syncbuf is a byte buffer safe for concurrent writers: what tests
// hand a server's logger, a daemon's stdout and stderr, or a log follower,
// and read back while those still write.
package syncbuf

import (
	"bytes"
	"sync"
)

// Buffer collects writes; the zero value is ready to use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String is everything written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
