// Command register creates -n static deployments through berth's admin API
// for bench/memory.sh, as fast as the API takes them: -conns workers, each on
// one keep-alive connection, POST /deployments with
//
//	{"id": "<prefix>-00042", "routes": [{"host": "<prefix>-00042.bench.test"}], "upstreams": ["<upstream>"]}
//
// (a host route each, so no two rules tie). It prints "deployments=N
// seconds=S per_s=R first_per_s=F last_per_s=L" (F and L: the rate over the
// first and the last -step deployments, to show whether a write slows down as
// the table grows; each step also goes to stderr) and exits non-zero on the
// first answer that is not 201.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	admin := flag.String("admin", "", "http://host:port of berth's admin API (required)")
	upstream := flag.String("upstream", "", "host:port every deployment forwards to (required)")
	n := flag.Int("n", 10000, "deployments to create")
	conns := flag.Int("conns", 4, "concurrent requests")
	prefix := flag.String("prefix", "mem", "deployment id prefix")
	step := flag.Int("step", 1000, "report the rate every this many deployments")
	flag.Parse()
	if err := run(*admin, *upstream, *prefix, *n, *conns, *step); err != nil {
		fmt.Fprintln(os.Stderr, "register:", err)
		os.Exit(1)
	}
}

func run(admin, upstream, prefix string, n, conns, step int) error {
	if admin == "" || upstream == "" || n <= 0 || conns <= 0 || step <= 0 {
		return errors.New("-admin and -upstream are required, -n, -conns and -step must be positive")
	}
	c := &http.Client{
		Transport: &http.Transport{MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns},
		Timeout:   30 * time.Second,
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var next, done atomic.Int64
	var smu sync.Mutex
	var rates []float64
	stepStart := time.Now()
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	start := time.Now()
	for range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1))
				if i > n {
					return
				}
				id := fmt.Sprintf("%s-%05d", prefix, i)
				body := fmt.Sprintf(`{"id":%q,"routes":[{"host":"%s.bench.test"}],"upstreams":[%q]}`, id, id, upstream)
				if err := post(ctx, c, admin+"/deployments", body); err != nil {
					once.Do(func() { firstErr = fmt.Errorf("deployment %s: %w", id, err); cancel() })
					return
				}
				if d := done.Add(1); d%int64(step) == 0 {
					smu.Lock()
					r := float64(step) / time.Since(stepStart).Seconds()
					rates = append(rates, r)
					stepStart = time.Now()
					smu.Unlock()
					fmt.Fprintf(os.Stderr, "register: %d done, %.0f/s over the last %d\n", d, r, step)
				}
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	secs := time.Since(start).Seconds()
	first, last := float64(n)/secs, float64(n)/secs
	if len(rates) > 0 {
		first, last = rates[0], rates[len(rates)-1]
	}
	fmt.Printf("deployments=%d seconds=%.2f per_s=%.0f first_per_s=%.0f last_per_s=%.0f\n", n, secs, float64(n)/secs, first, last)
	return nil
}

func post(ctx context.Context, c *http.Client, url, body string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewBufferString(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		return fmt.Errorf("status %d: %s", resp.StatusCode, bytes.TrimSpace(msg))
	}
	return nil
}
