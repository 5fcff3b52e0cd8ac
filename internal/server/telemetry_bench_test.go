package server

import (
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/proxy"
	"github.com/berth-dev/berth/internal/proxy/proxytest"
	"github.com/berth-dev/berth/internal/route"
	"github.com/berth-dev/berth/internal/siem"
	"github.com/berth-dev/berth/internal/telemetry"
)

// observer is a Server with the SIEM off and, when on, the telemetry
// store open: what the proxy's Observe runs.
func observer(b *testing.B, on bool) *Server {
	e, err := siem.New(siem.Options{Config: siem.Config{Disabled: true}, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	s := &Server{siem: e}
	if on {
		t, err := telemetry.Open(telemetry.Options{Dir: b.TempDir()})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { t.Close() })
		s.telemetry = t
	}
	return s
}

// cpuTime is the process's user and system CPU so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkObserveTelemetry is the request path's cost of telemetry: the
// proxy's Observe on one Completion, with telemetry off and on (the
// record copied into the queue; the writer drains it on its own
// goroutine, counted in cpu-ns/op, which is the whole process's CPU).
//
//	go test -run '^$' -bench 'ObserveTelemetry|TelemetryOverhead' ./internal/server/
func BenchmarkObserveTelemetry(b *testing.B) {
	c := proxy.Completion{Time: time.Now(), Client: netip.MustParseAddr("192.0.2.7"), Method: "GET", Host: "web.example.com",
		Path: "/api/items/42", RawQuery: "page=2", UserAgent: "bench", Status: 200, Duration: time.Millisecond, Bytes: 512,
		Deployment: "web", Namespace: "default", Backend: "sb-1234", Scheme: "none"}
	for _, on := range []bool{false, true} {
		name := map[bool]string{false: "off", true: "on"}[on]
		b.Run(name, func(b *testing.B) {
			s := observer(b, on)
			b.ReportAllocs()
			cpu0 := cpuTime()
			for b.Loop() {
				s.observe(&c)
			}
			if s.telemetry != nil {
				s.telemetry.Close() // the writer's share of the CPU, counted
			}
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// BenchmarkTelemetryOverhead is a keep-alive GET through the data plane's
// front end with telemetry off and on; cpu-ns/op is the whole process's
// CPU per request (front end, upstream, and the telemetry writer).
func BenchmarkTelemetryOverhead(b *testing.B) {
	const req = "GET /bench?q=1 HTTP/1.1\r\nHost: bench.test\r\nUser-Agent: bench\r\nAccept: */*\r\n\r\n"
	addr := proxytest.RawUpstream(b, 100)
	for _, on := range []bool{false, true} {
		name := map[bool]string{false: "off", true: "on"}[on]
		b.Run(name, func(b *testing.B) {
			s := observer(b, on)
			h := proxy.New(proxy.Options{Observe: s.observe})
			var rb route.Builder[*proxy.Deployment]
			d := &proxy.Deployment{ID: "bench", Pool: proxy.NewPool(proxy.NewBackend("bench-1", addr, false))}
			rb.Add("bench", d, []route.Rule{{PathPrefix: "/"}})
			h.Swap(rb.Build())
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			fe := h.NewH1Server(&http.Server{Handler: h}, proxy.H1Options{})
			go fe.Serve(ln)
			b.Cleanup(func() { fe.Close() })
			q := proxytest.NewQuietClient(b, ln.Addr().String(), req)
			b.ReportAllocs()
			cpu0 := cpuTime()
			for b.Loop() {
				if st, got := q.Do(); st != 200 || got != 100 {
					b.Fatalf("status %d, %d bytes", st, got)
				}
			}
			if s.telemetry != nil {
				s.telemetry.Close()
			}
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}
