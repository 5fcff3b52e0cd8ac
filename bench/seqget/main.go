// Command seqget sends -n GET requests one after another on one keep-alive
// connection and reads each whole answer: a fixed, known amount of work for
// bench/profile.sh to divide instruction and syscall counts by. It prints
// "requests=N seconds=S" and exits non-zero on any error or non-200 answer.
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
	"time"
)

func main() {
	addr := flag.String("addr", "", "host:port of the server (required)")
	path := flag.String("path", "/", "request path")
	n := flag.Int("n", 1000, "requests to send")
	timeout := flag.Duration("timeout", 30*time.Second, "deadline of each request (servers under valgrind are slow)")
	flag.Parse()
	if err := run(*addr, *path, *n, *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "seqget:", err)
		os.Exit(1)
	}
}

func run(addr, path string, n int, timeout time.Duration) error {
	if addr == "" || n <= 0 || timeout <= 0 {
		return errors.New("-addr is required, -n and -timeout must be positive")
	}
	req := []byte("GET " + path + " HTTP/1.1\r\nHost: " + addr + "\r\nUser-Agent: berth-bench-seqget\r\nAccept: */*\r\n\r\n")
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return err
	}
	defer c.Close()
	br := bufio.NewReader(c)
	start := time.Now()
	for i := range n {
		c.SetDeadline(time.Now().Add(timeout))
		if _, err := c.Write(req); err != nil {
			return fmt.Errorf("request %d: %w", i, err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return fmt.Errorf("request %d: %w", i, err)
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil {
			return fmt.Errorf("request %d: reading the body: %w", i, err)
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("request %d: status %d", i, resp.StatusCode)
		}
		if resp.Close {
			return fmt.Errorf("request %d: the server closed the connection", i)
		}
	}
	fmt.Printf("requests=%d seconds=%.3f\n", n, time.Since(start).Seconds())
	return nil
}
