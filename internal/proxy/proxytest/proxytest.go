// Package proxytest has raw HTTP/1.1 peers for measuring the data plane: an
// upstream and a keep-alive client that allocate nothing per request, so
// that testing.AllocsPerRun and benchmarks see only the proxy's own cost.
package proxytest

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"net"
	"strconv"
	"strings"
	"testing"
)

// RawUpstream is a minimal keep-alive HTTP/1.1 server on loopback that
// answers every request head (requests without a body) with the same
// response: a text/plain body of n bytes, the last one a newline. It
// returns its host:port; it stops with the test.
func RawUpstream(tb testing.TB, n int) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ln.Close() })
	resp := []byte("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: " + strconv.Itoa(n) + "\r\n\r\n" +
		strings.Repeat("x", max(n-1, 0)) + strings.Repeat("\n", min(n, 1)))
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					// A request without a body ends at the first empty line.
					for {
						line, err := br.ReadSlice('\n')
						if err != nil {
							return
						}
						if len(line) <= 2 {
							break
						}
					}
					if _, err := c.Write(resp); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// QuietClient is a keep-alive HTTP/1.1 client connection that sends one
// fixed request over and over and reads Content-Length framed responses,
// allocating nothing per request.
type QuietClient struct {
	c   net.Conn
	br  *bufio.Reader
	req []byte
}

// NewQuietClient connects to addr; req is the raw request, head and all.
// The connection closes with the test.
func NewQuietClient(tb testing.TB, addr, req string) *QuietClient {
	tb.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return &QuietClient{c: c, br: bufio.NewReaderSize(c, 64<<10), req: []byte(req)}
}

// NewQuietTLSClient is NewQuietClient over TLS with conf; the handshake is
// done when it returns.
func NewQuietTLSClient(tb testing.TB, addr, req string, conf *tls.Config) *QuietClient {
	tb.Helper()
	c, err := tls.Dial("tcp", addr, conf)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return &QuietClient{c: c, br: bufio.NewReaderSize(c, 64<<10), req: []byte(req)}
}

var contentLength = []byte("content-length:")

// Do sends the request and reads one response, returning its status and
// body length; n is -1 when the exchange failed or the response had no
// Content-Length.
func (q *QuietClient) Do() (status, n int) {
	if _, err := q.c.Write(q.req); err != nil {
		return 0, -1
	}
	line, err := q.br.ReadSlice('\n')
	if err != nil || len(line) < 12 {
		return 0, -1
	}
	status = int(line[9]-'0')*100 + int(line[10]-'0')*10 + int(line[11]-'0')
	cl := -1
	for {
		line, err = q.br.ReadSlice('\n')
		if err != nil {
			return status, -1
		}
		if len(line) <= 2 {
			break
		}
		if len(line) > len(contentLength) && bytes.EqualFold(line[:len(contentLength)], contentLength) {
			cl = 0
			for _, c := range bytes.TrimSpace(line[len(contentLength):]) {
				if c < '0' || c > '9' {
					return status, -1
				}
				cl = cl*10 + int(c-'0')
			}
		}
	}
	if cl < 0 {
		return status, -1
	}
	if _, err := q.br.Discard(cl); err != nil {
		return status, -1
	}
	return status, cl
}

// AllocsPerRequest warms q up, then returns the allocations per request
// (testing.AllocsPerRun over runs requests), failing tb if any answer is
// not status with a body of n bytes. AllocsPerRun counts the whole
// process's allocations, so goroutines a previous test left winding down
// can add to one measurement: it measures up to three times and returns
// the least, which an allocation on the request path raises every time.
func AllocsPerRequest(tb testing.TB, q *QuietClient, runs, status, n int) float64 {
	tb.Helper()
	for range 200 { // warm the pools
		if st, got := q.Do(); st != status || got != n {
			tb.Fatalf("status %d, %d bytes; want %d, %d bytes", st, got, status, n)
		}
	}
	var bad string
	least := -1.0
	for range 3 {
		allocs := testing.AllocsPerRun(runs, func() {
			if st, got := q.Do(); (st != status || got != n) && bad == "" {
				bad = "status " + strconv.Itoa(st) + ", " + strconv.Itoa(got) + " bytes"
			}
		})
		if bad != "" {
			tb.Fatal(bad)
		}
		if least < 0 || allocs < least {
			least = allocs
		}
		if least == 0 {
			break
		}
	}
	return least
}
