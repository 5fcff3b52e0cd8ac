package container

import (
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/agent"
	"github.com/berth-dev/berth/internal/vm/vmtest"
)

// BenchmarkScaleFromZero measures a replica of a trivial app (busybox
// httpd) from nothing to the first byte of its first answer, on the
// driver, as a deployment scaled to zero gets it: with the driver's spare
// container for its image ready (made after the previous start, while the
// deployment idled). Start renames the spare into place ("mount"), makes
// the working directory and sets the host name ("prepare"), plugs in the
// veth ("network") and assigns the spare's agent its replica ("run", the
// agent's round trip); then the shell and httpd come up. berth's share is
// Start less "run".
func BenchmarkScaleFromZero(b *testing.B) { benchScaleFromZero(b, DefaultSpares) }

// BenchmarkScaleFromZeroCold is BenchmarkScaleFromZero without spares:
// Start mounts the rootfs ("mount"), writes the files ("prepare"), makes
// and plugs in the network namespace ("network") and runs the runtime
// ("run"); then the agent, the shell and httpd come up.
func BenchmarkScaleFromZeroCold(b *testing.B) { benchScaleFromZero(b, 0) }

func benchScaleFromZero(b *testing.B, spares int) {
	d := newDriver(b)
	d.pool = d.newPool(spares)
	kind := spareKind{"busybox", "small"}
	if spares > 0 {
		// The first start of an image is cold; its spare follows.
		s := spec("bench", app)
		if _, err := d.Start(context.Background(), s); err != nil {
			b.Fatal(err)
		}
		if err := d.Stop(context.Background(), s.Name, time.Second); err != nil {
			b.Fatal(err)
		}
	}
	waitSpare := func() {
		for deadline := time.Now().Add(30 * time.Second); spares > 0 && readySpares(d, kind) < spares; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				b.Fatal("no spare container got ready")
			}
		}
	}
	waitSpare()
	var mu sync.Mutex
	steps := map[string][]time.Duration{}
	d.trace = func(step string, dur time.Duration) {
		mu.Lock()
		steps[step] = append(steps[step], dur)
		mu.Unlock()
	}
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	var total, start, share, ready []time.Duration
	for b.Loop() {
		s := spec("bench", app)
		mu.Lock()
		nr := len(steps["run"])
		mu.Unlock()
		t0 := time.Now()
		inst, err := d.Start(context.Background(), s)
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		for {
			resp, err := client.Get("http://" + inst.Addr + "/")
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			if time.Since(t0) > 30*time.Second {
				b.Fatalf("no answer from %s: %v", inst.Addr, err)
			}
			// 100µs in the kernel: a Go timer under a millisecond fires
			// about a millisecond late in an idle process, which would
			// add up to that to every figure.
			ts := syscall.NsecToTimespec(int64(100 * time.Microsecond))
			syscall.Nanosleep(&ts, nil)
		}
		t2 := time.Now()
		total = append(total, t2.Sub(t0))
		start = append(start, t1.Sub(t0))
		ready = append(ready, t2.Sub(t1))
		mu.Lock()
		rt := steps["run"][nr]
		mu.Unlock()
		share = append(share, t1.Sub(t0)-rt)
		b.StopTimer()
		if err := d.Stop(context.Background(), s.Name, time.Second); err != nil {
			b.Fatal(err)
		}
		waitSpare()
		b.StartTimer()
	}
	vmtest.ReportP50P90(b, "ttfb", total)
	vmtest.ReportP50P90(b, "start", start)
	vmtest.ReportP50P90(b, "berth", share)
	vmtest.ReportP50P90(b, "app", ready)
	for _, step := range []string{"mount", "prepare", "network", "run"} {
		vmtest.ReportP50P90(b, step, steps[step])
	}
}

// BenchmarkExec measures an exec round trip through the agent of a
// running replica: `true` over the agent's unix socket.
func BenchmarkExec(b *testing.B) {
	d := newDriver(b)
	s := spec("exec", app)
	if _, err := d.Start(context.Background(), s); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { d.Stop(context.Background(), s.Name, time.Second) })
	c := agent.NewClient(func(ctx context.Context) (net.Conn, error) { return d.DialAgent(ctx, s.Name) })
	defer c.Close()
	ctx := context.Background()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := c.Exec(ctx, agent.ExecRequest{Argv: []string{"true"}}); err == nil {
			break
		} else if time.Now().After(deadline) {
			b.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	var ds []time.Duration
	for b.Loop() {
		t0 := time.Now()
		res, err := c.Exec(ctx, agent.ExecRequest{Argv: []string{"true"}})
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("exec true: %+v, %v", res, err)
		}
		ds = append(ds, time.Since(t0))
	}
	vmtest.ReportP50P90(b, "exec", ds)
}
