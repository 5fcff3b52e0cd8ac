// Package health probes backends the way app-lb does (app-lb.md §3.5): one
// raw HTTP/1.1 GET whose status line decides (healthy iff status < 500, so a
// 404 is healthy), or a bare TCP connect when the check has no path.
package health

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/textproto"
	"strconv"
	"strings"
	"time"
)

// Check describes one probe.
type Check struct {
	Addr    string        // host:port to connect to
	TLS     bool          // probe over TLS (https upstreams)
	SNI     string        // server name for TLS; defaults to the host of Addr
	Path    string        // request path; "" means a TCP connect only
	Timeout time.Duration // whole-probe deadline; at least 1s is sensible
}

// Probe runs one check and returns nil when the backend is healthy.
func Probe(ctx context.Context, c Check) error {
	if c.Timeout <= 0 {
		c.Timeout = 2 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", c.Addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	if c.Path == "" && !c.TLS {
		return nil
	}
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	if c.TLS {
		sni := c.SNI
		if sni == "" {
			sni, _, _ = net.SplitHostPort(c.Addr)
		}
		tc := tls.Client(conn, &tls.Config{ServerName: sni})
		if err := tc.HandshakeContext(ctx); err != nil {
			return err
		}
		conn = tc
		if c.Path == "" {
			return nil
		}
	}
	path := c.Path
	if !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	if strings.ContainsAny(path, " \r\n") {
		return fmt.Errorf("health: invalid probe path %q", path)
	}
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: berth/health\r\nConnection: close\r\n\r\n", path, c.Addr); err != nil {
		return err
	}
	line, err := textproto.NewReader(bufio.NewReaderSize(conn, 256)).ReadLine()
	if err != nil {
		return fmt.Errorf("health: reading status line: %w", err)
	}
	code, err := statusCode(line)
	if err != nil {
		return err
	}
	if code >= 500 {
		return fmt.Errorf("health: status %d", code)
	}
	return nil
}

// ErrBadStatusLine is returned when the response does not start with an
// HTTP/1.x status line.
var ErrBadStatusLine = errors.New("health: malformed status line")

func statusCode(line string) (int, error) {
	proto, rest, ok := strings.Cut(line, " ")
	if !ok || !strings.HasPrefix(proto, "HTTP/1.") || len(rest) < 3 {
		return 0, ErrBadStatusLine
	}
	code, err := strconv.Atoi(rest[:3])
	if err != nil || code < 100 || code > 999 {
		return 0, ErrBadStatusLine
	}
	return code, nil
}
