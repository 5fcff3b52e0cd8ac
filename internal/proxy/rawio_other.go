//go:build !linux

package proxy

import "net"

// rawIO is Linux's (rawio_linux.go); elsewhere the connection's own Read
// and Write serve.
type rawIO struct{ net.Conn }

func (r *rawIO) init(nc net.Conn) bool { r.Conn = nc; return true }
