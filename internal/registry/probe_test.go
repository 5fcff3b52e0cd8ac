package registry

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/proxy"
)

// probeServer counts the probes and connections it gets; it answers 500
// while failing is set.
type probeServer struct {
	*httptest.Server
	reqs, conns atomic.Int32
	failing     atomic.Bool
}

func newProbeServer(t *testing.T) *probeServer {
	ps := &probeServer{}
	ps.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ps.reqs.Add(1)
		if ps.failing.Load() {
			w.WriteHeader(500)
		}
	}))
	ps.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			ps.conns.Add(1)
		}
	}
	ps.Start()
	t.Cleanup(ps.Close)
	return ps
}

func (ps *probeServer) addr() string { return strings.TrimPrefix(ps.URL, "http://") }

func healthPath(s apitype.DeploymentSpec, path string) apitype.DeploymentSpec {
	s.Health = &apitype.HealthCheck{Path: apitype.Nullable[string]{Value: &path}}
	return s
}

func backends(t *testing.T, reg *Registry) []*proxy.Backend {
	t.Helper()
	var bs []*proxy.Backend
	for _, e := range reg.List() {
		bs = append(bs, e.Pool.Backends()...)
	}
	return bs
}

// TestProbeDedupes: fifty deployments on one upstream cost one probe per
// round, whose verdict reaches every one of them.
func TestProbeDedupes(t *testing.T) {
	r := newRig(t)
	srv := newProbeServer(t)
	ctx := context.Background()
	for i := range 50 {
		id := fmt.Sprintf("d%02d", i)
		if _, _, err := r.reg.Put(ctx, static(id, id+".test", srv.addr()), PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	srv.failing.Store(true)
	r.reg.ProbeOnce(ctx)
	if n := srv.reqs.Load(); n != 1 {
		t.Fatalf("%d probes for 50 deployments on one upstream, want 1", n)
	}
	for _, b := range backends(t, r.reg) {
		if b.Healthy() {
			t.Fatalf("upstream of a deployment still healthy after a failed probe")
		}
	}
	srv.failing.Store(false)
	r.reg.ProbeOnce(ctx)
	for _, b := range backends(t, r.reg) {
		if !b.Healthy() {
			t.Fatalf("upstream of a deployment still unhealthy after a good probe")
		}
	}
	if n := srv.reqs.Load(); n != 2 {
		t.Fatalf("%d probes after two rounds, want 2", n)
	}
}

// TestRunSpreadsProbes: ten distinct checks are started a tenth of the
// interval apart, not all at once, and keep their connections from one
// round to the next (fake clock; the upstream is real).
func TestRunSpreadsProbes(t *testing.T) {
	r := newRig(t)
	srv := newProbeServer(t)
	ctx := context.Background()
	for i := range 10 {
		id := fmt.Sprintf("d%02d", i)
		s := healthPath(static(id, id+".test", srv.addr()), fmt.Sprintf("/h%d", i))
		if _, _, err := r.reg.Put(ctx, s, PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- r.reg.Run(ctx) }()
		at := func(d time.Duration, want int32) {
			t.Helper()
			time.Sleep(d)
			synctest.Wait()
			if n := srv.reqs.Load(); n != want {
				t.Fatalf("after %v more: %d probes, want %d", d, n, want)
			}
		}
		at(time.Millisecond, 1)      // 0 s: the first
		at(time.Second, 6)           // 1.001 s: those due at 0, 0.2, ... 1.0 s
		at(900*time.Millisecond, 10) // 1.901 s: all ten
		at(200*time.Millisecond, 11) // 2.101 s: the second round's first
		if n := srv.conns.Load(); n != 10 {
			t.Fatalf("%d connections for 10 checks over two rounds, want 10", n)
		}
		cancel()
		<-done
	})
}
