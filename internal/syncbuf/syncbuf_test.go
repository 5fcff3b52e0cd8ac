package syncbuf

import (
	"strings"
	"sync"
	"testing"
)

// TestConcurrentWrites: writes from many goroutines all land, whole.
func TestConcurrentWrites(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				b.Write([]byte("ab\n"))
			}
		})
	}
	wg.Wait()
	if got := b.String(); strings.Count(got, "ab\n") != 800 || len(got) != 2400 {
		t.Errorf("%d bytes, %d lines; want 800 whole lines", len(got), strings.Count(got, "ab\n"))
	}
}
