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
	// ExpectHeader, when set (with Path), makes the probe healthy only on
	// a 2xx whose response carries this header with exactly ExpectValue
	// (health.expected_header, which rollouts require).
	ExpectHeader, ExpectValue string
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
	tr := textproto.NewReader(bufio.NewReaderSize(conn, 256))
	line, err := tr.ReadLine()
	if err != nil {
		return fmt.Errorf("health: reading status line: %w", err)
	}
	code, err := statusCode(line)
	if err != nil {
		return err
	}
	if c.ExpectHeader != "" {
		return expect(tr, code, c.ExpectHeader, c.ExpectValue)
	}
	if code >= 500 {
		return fmt.Errorf("health: status %d", code)
	}
	return nil
}

// maxProbeHeader bounds the response header a probe with an expected
// header reads.
const maxProbeHeader = 16 << 10

// expect checks a response for health.expected_header: a 2xx with the
// header name (case-insensitive) carrying exactly value.
func expect(tr *textproto.Reader, code int, name, value string) error {
	if code < 200 || code > 299 {
		return fmt.Errorf("health: status %d, want 2xx with %s: %s", code, name, value)
	}
	n := 0
	var seen []string
	for {
		line, err := tr.ReadLine()
		if err != nil {
			return fmt.Errorf("health: reading the response header: %w", err)
		}
		if line == "" {
			break
		}
		if n += len(line); n > maxProbeHeader {
			return errors.New("health: response header too large")
		}
		k, v, ok := strings.Cut(line, ":")
		if ok && strings.EqualFold(strings.TrimSpace(k), name) {
			v = strings.Trim(v, " \t")
			if v == value {
				return nil
			}
			seen = append(seen, v)
		}
	}
	if len(seen) == 0 {
		return fmt.Errorf("health: the response has no %s header", name)
	}
	return fmt.Errorf("health: %s is %q, want %q", name, seen[0], value)
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
