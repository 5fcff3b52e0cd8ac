// Command wsload measures websocket messages per second through a proxy for
// bench/proxy.sh: it opens -conns websocket connections to -url, and each one
// sends a -size byte binary message and waits for its echo, again and again,
// for -duration (after -warmup, whose messages are not counted). It prints one
// line of key=value pairs: connections, messages echoed, errors, messages per
// second and the p50/p90/p99/max round-trip latency in microseconds.
//
// It exits non-zero when a connection cannot be opened, an echo differs from
// what was sent, or no message came back at all.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/coder/websocket"
)

func main() {
	target := flag.String("url", "", "ws://host:port/path of a websocket echo (required)")
	conns := flag.Int("conns", 50, "concurrent websocket connections")
	duration := flag.Duration("duration", 5*time.Second, "how long to measure")
	warmup := flag.Duration("warmup", 0, "how long to send before measuring")
	size := flag.Int("size", 32, "message size in bytes")
	flag.Parse()
	if err := run(*target, *conns, *duration, *warmup, *size); err != nil {
		fmt.Fprintln(os.Stderr, "wsload:", err)
		os.Exit(1)
	}
}

func run(target string, conns int, duration, warmup time.Duration, size int) error {
	if target == "" {
		return errors.New("-url is required (ws://host:port/path)")
	}
	if conns <= 0 || duration <= 0 || warmup < 0 || size <= 0 || size > 1<<20 {
		return errors.New("-conns, -duration and -size (at most 1 MiB) must be positive, -warmup not negative")
	}
	// The dials share one transport so that a proxy's limit on new
	// connections is not confused with Go's per-host idle limit.
	tr := &http.Transport{MaxIdleConnsPerHost: conns, DisableCompression: true}
	hc := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), warmup+duration+30*time.Second)
	defer cancel()

	cs := make([]*websocket.Conn, conns)
	var dialErr error
	var dmu sync.Mutex
	var dwg sync.WaitGroup
	sem := make(chan struct{}, 64) // a bounded number of handshakes at once
	for i := range cs {
		dwg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; dwg.Done() }()
			dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
			defer dcancel()
			c, resp, err := websocket.Dial(dctx, target, &websocket.DialOptions{HTTPClient: hc})
			if err != nil {
				status := ""
				if resp != nil {
					status = fmt.Sprintf(" (HTTP %d)", resp.StatusCode)
				}
				dmu.Lock()
				dialErr = fmt.Errorf("connection %d: %w%s", i, err, status)
				dmu.Unlock()
				return
			}
			c.SetReadLimit(int64(size) + 1024)
			cs[i] = c
		}()
	}
	dwg.Wait()
	defer func() {
		for _, c := range cs {
			if c != nil {
				c.CloseNow()
			}
		}
	}()
	if dialErr != nil {
		return dialErr
	}

	start := time.Now()
	measureFrom := start.Add(warmup)
	end := measureFrom.Add(duration)
	var (
		mu      sync.Mutex
		lat     []time.Duration
		nerr    int
		lastErr error
		wg      sync.WaitGroup
	)
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			msg := bytes.Repeat([]byte{byte('a' + i%26)}, size)
			var local []time.Duration
			var err error
			for {
				t0 := time.Now()
				if !t0.Before(end) {
					break
				}
				if err = c.Write(ctx, websocket.MessageBinary, msg); err != nil {
					break
				}
				var got []byte
				if _, got, err = c.Read(ctx); err != nil {
					break
				}
				if !bytes.Equal(got, msg) {
					err = fmt.Errorf("connection %d: echo of %d bytes differs from the %d sent", i, len(got), len(msg))
					break
				}
				if !t0.Before(measureFrom) {
					local = append(local, time.Since(t0))
				}
			}
			mu.Lock()
			lat = append(lat, local...)
			if err != nil {
				nerr++
				lastErr = err
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(measureFrom)
	if len(lat) == 0 {
		return fmt.Errorf("no message came back (errors %d, last %v)", nerr, lastErr)
	}
	slices.Sort(lat)
	q := func(p float64) int64 { return lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds() }
	fmt.Printf("conns=%d msgs=%d errors=%d msgs_per_s=%.0f p50_us=%d p90_us=%d p99_us=%d max_us=%d\n",
		conns, len(lat), nerr, float64(len(lat))/elapsed.Seconds(), q(0.50), q(0.90), q(0.99), q(1))
	if nerr > 0 {
		fmt.Fprintf(os.Stderr, "wsload: %d connections failed, last: %v\n", nerr, lastErr)
		return errors.New("some connections failed")
	}
	return nil
}
