//go:build unix

package cli

import (
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/term"
)

// watchResize calls resize with the terminal's new size each time the
// window changes (SIGWINCH), until stop is called.
func watchResize(fd int, resize func(cols, rows int)) (stop func()) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGWINCH)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case <-ch:
				if cols, rows, err := term.GetSize(fd); err == nil {
					resize(cols, rows)
				}
			}
		}
	}()
	return func() {
		signal.Stop(ch)
		close(done)
	}
}
