//go:build !linux

package proxy

import "net"

// rawIO is Linux's (rawio_linux.go); elsewhere the connection's own Read
// and Write serve.
type rawIO struct{ net.Conn }

func (r *rawIO) init(nc net.Conn) bool { r.Conn = nc; return true }

// canHold: no write is held here (see rawio_linux.go).
func (r *rawIO) canHold() bool { return false }

func (r *rawIO) holdWrite() {}
