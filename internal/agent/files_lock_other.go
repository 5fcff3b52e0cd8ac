//go:build !linux

package agent

import "os"

// flockDir does not lock where berth does not write sandboxes' files from
// the host: the mutex of rootLock is the whole lock there.
func flockDir(d *os.File) bool { return false }
