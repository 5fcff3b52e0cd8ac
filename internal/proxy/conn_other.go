//go:build !unix

package proxy

import "syscall"

// peekAlive cannot peek on this platform: the connection is taken as alive,
// and a stale one is caught by the stale-connection retry.
func peekAlive(syscall.RawConn) bool { return true }
