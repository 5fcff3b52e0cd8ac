//go:build !linux

package proxy

import (
	"net"
	"time"
)

// parker is Linux's (h1park_linux.go): elsewhere connections are not parked.
type parker struct{}

func newParker(*H1Server) *parker            { return nil }
func (*parker) park(*h1conn, time.Time) bool { return false }
func (*parker) closeAll(bool)                {}
func (*parker) parkedCount() int             { return 0 }

func resumeConn(*parkedConn) (net.Conn, error) { return nil, net.ErrClosed }
