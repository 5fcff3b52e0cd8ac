package firecracker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/console"
)

// Logs returns up to n of the replica's most recent output lines (all of
// them when n <= 0), oldest first, from its serial console (package
// console).
func (d *Driver) Logs(ctx context.Context, id string, n int) ([]vm.LogLine, error) {
	return d.rd.Logs(id, n, console.ReadLogs, consoleFile)
}

// FollowLogs writes the replica's output lines to w as they reach the
// console, starting with the next one, in the agent's log format (see
// console.Follow). It returns nil when ctx ends or once the replica has
// ended and its output was written, and an error wrapping vm.ErrNotFound if
// the replica is stopped meanwhile.
func (d *Driver) FollowLogs(ctx context.Context, id string, w io.Writer) error {
	return d.rd.FollowLogs(ctx, id, w, d.instance, console.Follow, consoleFile)
}

// DialAgent connects to the agent in the guest through the VMM's vsock
// socket: Firecracker forwards a connection that says "CONNECT <port>\n"
// to that guest port and answers "OK <host port>\n" first.
func (d *Driver) DialAgent(ctx context.Context, id string) (net.Conn, error) {
	st, err := d.rd.Load(id)
	if err != nil {
		return nil, err
	}
	if st.Suspended {
		return nil, fmt.Errorf("firecracker: agent of %s: the replica is suspended", id)
	}
	c, err := d.dialAgent(ctx, st)
	if err != nil {
		return nil, fmt.Errorf("firecracker: agent of %s: %w", id, err)
	}
	return c, nil
}

// handshakePatience bounds the vsock handshake when ctx has no deadline.
const handshakePatience = 10 * time.Second

func (d *Driver) dialAgent(ctx context.Context, st state) (net.Conn, error) {
	var dialer net.Dialer
	c, err := dialer.DialContext(ctx, "unix", d.hostPath(st, vsockSock))
	if err != nil {
		return nil, err
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(handshakePatience)
	}
	c.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Now()) })
	err = vsockHandshake(c, d.agentPort)
	if !stop() || err != nil {
		c.Close()
		if err == nil {
			err = ctx.Err()
		}
		return nil, err
	}
	c.SetDeadline(time.Time{})
	return c, nil
}

// vsockHandshake asks the VMM for a guest port. The answer is read a byte at
// a time: whatever follows it belongs to the caller.
func vsockHandshake(c net.Conn, port uint32) error {
	if _, err := fmt.Fprintf(c, "CONNECT %d\n", port); err != nil {
		return err
	}
	var line []byte
	b := make([]byte, 1)
	for len(line) < 64 {
		if _, err := io.ReadFull(c, b); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return fmt.Errorf("vsock port %d: the VMM closed the connection (is the agent listening?)", port)
			}
			return err
		}
		if b[0] == '\n' {
			break
		}
		line = append(line, b[0])
	}
	if !strings.HasPrefix(string(line), "OK ") {
		return fmt.Errorf("vsock port %d: unexpected handshake answer %q", port, line)
	}
	return nil
}
