package process

import (
	"net"
	"sync"
	"testing"
)

// TestListeningConcurrent: listening runs in a goroutine per Start, so
// concurrent calls must be safe (the race detector failed on the netlink
// package's lazily set byte order) and each must see the listener.
func TestListeningConcurrent(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				if up, _ := listening(port, nil); !up {
					errs <- "listening did not see the listener"
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
}
