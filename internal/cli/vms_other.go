//go:build !unix

package cli

// watchResize does nothing where there is no SIGWINCH: the remote
// terminal keeps the size it started with.
func watchResize(fd int, resize func(cols, rows int)) (stop func()) {
	return func() {}
}
