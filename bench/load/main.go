// Command load is a constant-rate (open-loop) HTTP/1.1 load generator for
// bench/proxy.sh. wrk keeps a fixed number of connections busy, so it can only
// measure latency at saturation; this tool sends requests on a fixed schedule
// (rate per second, spread over a pool of keep-alive connections) and measures
// each latency from the moment the request was released, not from when it
// was sent, so a stall in the server under test shows up as latency instead of
// silently lowering the offered load (the "coordinated omission" wrk2 fixes).
//
// Latency is measured from the moment the pacer released the request, which is
// when it fell due give or take the pacer's own timer granularity (Go sleeps
// of under a millisecond come back after about one, so requests are released
// in small bursts): waiting for a free connection counts, the pacer's lateness
// does not, so the numbers are comparable across servers on a loaded machine.
//
// It prints one line of key=value pairs: offered rate, requests completed,
// errors, and the p50/p90/p99/p99.9/max latency in microseconds.
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"sync"
	"time"
)

func main() {
	target := flag.String("url", "", "http://host:port/path to request (required)")
	rate := flag.Float64("rate", 1000, "requests per second")
	duration := flag.Duration("duration", 10*time.Second, "how long to measure")
	warmup := flag.Duration("warmup", 2*time.Second, "how long to send before measuring")
	conns := flag.Int("conns", 50, "keep-alive connections (the most requests in flight at once)")
	flag.Parse()
	if err := run(*target, *rate, *duration, *warmup, *conns); err != nil {
		fmt.Fprintln(os.Stderr, "load:", err)
		os.Exit(1)
	}
}

// sample is one completed request.
type sample struct {
	due     time.Time
	latency time.Duration
}

// job is one scheduled request: when it was due and when the pacer released it.
type job struct {
	due, released time.Time
}

func run(target string, rate float64, duration, warmup time.Duration, conns int) error {
	u, err := url.Parse(target)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		return fmt.Errorf("-url %q: want http://host:port/path", target)
	}
	if rate <= 0 || conns <= 0 || duration <= 0 || warmup < 0 {
		return errors.New("-rate, -conns and -duration must be positive, -warmup not negative")
	}
	reqLine := []byte("GET " + u.RequestURI() + " HTTP/1.1\r\nHost: " + u.Host + "\r\nUser-Agent: berth-bench-load\r\n\r\n")

	start := time.Now().Add(50 * time.Millisecond) // let the workers connect
	measureFrom := start.Add(warmup)
	end := measureFrom.Add(duration)
	total := int(rate * (warmup + duration).Seconds())
	interval := float64(time.Second) / rate

	due := make(chan job, 1<<16)
	go func() { // the pacer: release every request when it falls due
		defer close(due)
		for i := 0; i < total; {
			now := time.Now()
			for ; i < total; i++ {
				t := start.Add(time.Duration(float64(i) * interval))
				if t.After(now) {
					break
				}
				due <- job{due: t, released: now}
			}
			time.Sleep(50 * time.Microsecond)
		}
	}()

	var (
		mu      sync.Mutex
		samples []sample
		nerr    int
		lastErr error
		wg      sync.WaitGroup
	)
	for range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var local []sample
			var errs int
			var last error
			var c *conn
			for j := range due {
				if c == nil {
					if c, err = dial(u.Host); err != nil {
						errs, last = errs+1, err
						continue
					}
				}
				if err := c.roundTrip(reqLine); err != nil {
					errs, last = errs+1, err
					c.Close()
					c = nil
					continue
				}
				local = append(local, sample{due: j.due, latency: time.Since(j.released)})
			}
			if c != nil {
				c.Close()
			}
			mu.Lock()
			samples = append(samples, local...)
			nerr += errs
			if last != nil {
				lastErr = last
			}
			mu.Unlock()
		}()
	}
	wg.Wait()

	var lat []time.Duration
	for _, s := range samples {
		if !s.due.Before(measureFrom) && s.due.Before(end) {
			lat = append(lat, s.latency)
		}
	}
	if len(lat) == 0 {
		return fmt.Errorf("no request completed (errors %d, last %v)", nerr, lastErr)
	}
	slices.Sort(lat)
	q := func(p float64) int64 { return lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds() }
	fmt.Printf("rate=%.0f completed=%d errors=%d p50_us=%d p90_us=%d p99_us=%d p999_us=%d max_us=%d\n",
		rate, len(lat), nerr, q(0.50), q(0.90), q(0.99), q(0.999), lat[len(lat)-1].Microseconds())
	if nerr > 0 {
		fmt.Fprintf(os.Stderr, "load: %d errors, last: %v\n", nerr, lastErr)
	}
	return nil
}

// conn is one keep-alive client connection.
type conn struct {
	net.Conn
	br *bufio.Reader
}

func dial(addr string) (*conn, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	return &conn{Conn: c, br: bufio.NewReader(c)}, nil
}

// roundTrip sends one request and reads the whole response.
func (c *conn) roundTrip(req []byte) error {
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write(req); err != nil {
		return err
	}
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("status %d", resp.StatusCode)
	}
	if err == nil && resp.Close {
		err = errors.New("server closed the connection")
	}
	return err
}
