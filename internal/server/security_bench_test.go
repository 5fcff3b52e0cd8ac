package server

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"testing"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/guard"
	"github.com/berth-dev/berth/internal/proxy"
	"github.com/berth-dev/berth/internal/proxy/proxytest"
	"github.com/berth-dev/berth/internal/route"
	"github.com/berth-dev/berth/internal/siem"
	"github.com/berth-dev/berth/internal/store"
)

// BenchmarkSecurityOverhead is issue 15's figure: a keep-alive GET through
// the data plane's front end with guard and SIEM off, then with 256 guard
// rules (none matching) and the SIEM analysing every request, then a
// request a rule blocks. The delta between off and on is what the guard
// and the SIEM cost a request (the SIEM's analysis runs on its own
// goroutine, so on 2 cores part of it overlaps).
func BenchmarkSecurityOverhead(b *testing.B) {
	const req = "GET /bench?q=1 HTTP/1.1\r\nHost: bench.test\r\nUser-Agent: Mozilla/5.0 (X11; Linux x86_64) bench\r\nAccept: */*\r\n\r\n"
	addr := proxytest.RawUpstream(b, 100)
	serve := func(b *testing.B, o proxy.Options, status, n int) {
		h := proxy.New(o)
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
		for b.Loop() {
			if st, got := q.Do(); st != status || got != n {
				b.Fatalf("status %d, %d bytes; want %d, %d", st, got, status, n)
			}
		}
	}
	secured := func(b *testing.B, block bool) proxy.Options {
		st, err := store.Open(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { st.Close() })
		ctx := context.Background()
		log := slog.New(slog.DiscardHandler)
		g, err := guard.New(ctx, guard.Options{Store: st, Enforce: true, Log: log})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(g.Close)
		for i := range 256 {
			var m apitype.RuleMatch
			switch i % 4 {
			case 0, 1:
				m.Client = fmt.Sprintf("198.51.%d.%d", i/250, i%250)
			case 2:
				m.Client = fmt.Sprintf("2001:db8:%x::/48", i)
			case 3:
				m.PathPrefix, m.UserAgentContains = fmt.Sprintf("/wp-admin/%d", i), "sqlmap"
			}
			if block && i == 255 {
				m = apitype.RuleMatch{Client: "127.0.0.1"}
			}
			if _, err := g.Add(ctx, apitype.RuleSpec{Action: apitype.RuleBlock, Match: m}); err != nil {
				b.Fatal(err)
			}
		}
		e, err := siem.New(siem.Options{Store: st, Log: log})
		if err != nil {
			b.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		go e.Run(rctx)
		b.Cleanup(func() { cancel(); e.Close() })
		s := &Server{guard: g, siem: e}
		return proxy.Options{Guard: s.guardCheck, Observe: s.observe}
	}
	b.Run("off", func(b *testing.B) { serve(b, proxy.Options{}, 200, 100) })
	b.Run("guard256+siem", func(b *testing.B) { serve(b, secured(b, false), 200, 100) })
	b.Run("blocked", func(b *testing.B) { serve(b, secured(b, true), 403, len("blocked\n")) })
}
