// Command idleconns holds idle keep-alive connections open against an HTTP
// server for bench/memory.sh: it opens -n TCP connections to -addr one after
// another, sends one GET on each and reads the whole response (so that each
// connection has been through a request and sits idle in keep-alive), then
// prints "ready open=N" on stdout and keeps them all open until it gets
// SIGINT/SIGTERM or -hold passes. The server's memory per idle connection is
// then (RSS while held - RSS before) / N.
//
// It exits non-zero if any connection fails or any answer is not 200.
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	addr := flag.String("addr", "", "host:port of the server (required)")
	host := flag.String("host", "", "Host header (default: -addr)")
	path := flag.String("path", "/", "request path")
	n := flag.Int("n", 1000, "connections to open")
	hold := flag.Duration("hold", 60*time.Second, "the longest to keep the connections open")
	flag.Parse()
	if err := run(*addr, *host, *path, *n, *hold); err != nil {
		fmt.Fprintln(os.Stderr, "idleconns:", err)
		os.Exit(1)
	}
}

func run(addr, host, path string, n int, hold time.Duration) error {
	if addr == "" || n <= 0 || hold <= 0 {
		return errors.New("-addr is required, -n and -hold must be positive")
	}
	if host == "" {
		host = addr
	}
	req := []byte("GET " + path + " HTTP/1.1\r\nHost: " + host + "\r\nUser-Agent: berth-bench-idleconns\r\n\r\n")
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := range n {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			return fmt.Errorf("connection %d: %w", i, err)
		}
		conns = append(conns, c)
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write(req); err != nil {
			return fmt.Errorf("connection %d: %w", i, err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return fmt.Errorf("connection %d: %w", i, err)
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil {
			return fmt.Errorf("connection %d: reading the body: %w", i, err)
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("connection %d: status %d", i, resp.StatusCode)
		}
		if resp.Close {
			return fmt.Errorf("connection %d: the server closed the connection after the answer", i)
		}
		c.SetDeadline(time.Time{})
	}
	fmt.Printf("ready open=%d\n", len(conns))
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	select {
	case <-sig:
	case <-time.After(hold):
	}
	// Before closing, check that the server kept them: a connection the
	// server closed reads EOF at once.
	closed := 0
	one := make([]byte, 1)
	for _, c := range conns {
		c.SetReadDeadline(time.Now().Add(time.Millisecond))
		if _, err := c.Read(one); err == io.EOF {
			closed++
		}
	}
	if closed > 0 {
		return fmt.Errorf("the server had closed %d of the %d idle connections", closed, len(conns))
	}
	return nil
}
