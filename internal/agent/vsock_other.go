//go:build !linux

package agent

import (
	"errors"
	"net"
)

// listenVsock: vsock exists only in Linux guests.
func listenVsock(port uint32) (net.Listener, error) {
	return nil, errors.New("vsock is only supported on Linux")
}
