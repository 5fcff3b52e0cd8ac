//go:build unix

package agent

import "syscall"

// openNonblock makes opening a FIFO return at once instead of waiting for
// a writer; on regular files it changes nothing.
const openNonblock = syscall.O_NONBLOCK
