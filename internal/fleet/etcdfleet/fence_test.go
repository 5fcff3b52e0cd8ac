package etcdfleet_test

import (
	"context"
	"io"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/berth-dev/berth/internal/fleet/etcdfleet"
	"github.com/berth-dev/berth/internal/fleet/etcdtest"
)

// blackhole forwards TCP to target until Cut: then it carries no byte in
// either direction and sends no reset, as a partition looks to both ends,
// until Mend.
type blackhole struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	cut    bool
	conns  []net.Conn
}

func newBlackhole(t *testing.T, target string) *blackhole {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &blackhole{ln: ln, target: target}
	t.Cleanup(func() {
		ln.Close()
		b.mu.Lock()
		for _, c := range b.conns {
			c.Close()
		}
		b.mu.Unlock()
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go b.serve(c)
		}
	}()
	return b
}

func (b *blackhole) URL() string { return "http://" + b.ln.Addr().String() }

func (b *blackhole) serve(c net.Conn) {
	b.mu.Lock()
	if b.cut {
		b.mu.Unlock()
		b.track(c) // held open, silent
		return
	}
	b.mu.Unlock()
	u, err := net.DialTimeout("tcp", b.target, 5*time.Second)
	if err != nil {
		c.Close()
		return
	}
	b.track(c)
	b.track(u)
	go b.pipe(u, c)
	b.pipe(c, u)
}

func (b *blackhole) track(c net.Conn) {
	b.mu.Lock()
	b.conns = append(b.conns, c)
	b.mu.Unlock()
}

// pipe copies src to dst, dropping what it reads while cut.
func (b *blackhole) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			b.mu.Lock()
			cut := b.cut
			b.mu.Unlock()
			if !cut {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
		}
		if err != nil {
			if err != io.EOF {
				dst.Close()
			}
			return
		}
	}
}

// Cut starts the partition; connections made meanwhile are held silent.
func (b *blackhole) Cut() { b.mu.Lock(); b.cut = true; b.mu.Unlock() }

// Mend ends it; the connections that lost bytes are closed, as their
// peers' would time out, so clients dial again.
func (b *blackhole) Mend() {
	b.mu.Lock()
	b.cut = false
	conns := b.conns
	b.conns = nil
	b.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

// TestFenceOnPartition: a host cut off from etcd stops counting its
// Computers' slots — and tells its caller to stop them — before etcd can
// expire its lease and give the slots to another host; so with one fleet
// slot, the Computer on the far side of the partition is told to stop
// before the other host's start is let through. Healed, the host
// registers again and holds nothing.
func TestFenceOnPartition(t *testing.T) {
	c := etcdtest.Start(t, 1)
	bh := newBlackhole(t, c.Endpoints()[0][len("http://"):])
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{bh.URL()}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })

	fenced := make(chan []string, 1)
	o := etcdfleet.Options{LeaseTTL: 2 * time.Second, SlotLimit: 1, OpTimeout: 2 * time.Second,
		OnFenced: func(ids []string) { fenced <- ids }}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := etcdfleet.Join(ctx, cli, etcdfleet.Host{ID: "alpha", Address: "alpha:9090", Drivers: []string{"process"}}, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Leave(context.Background()) })
	b := join(t, c, "beta", etcdfleet.Options{LeaseTTL: 2 * time.Second, SlotLimit: 1})

	if r, err := a.Reserve(ctxT(t), "one"); err != nil || r.Kind != etcdfleet.Reserved {
		t.Fatalf("alpha's reserve: %+v %v", r, err)
	}
	if r, _ := b.Reserve(ctxT(t), "two"); r.Kind != etcdfleet.AtCapacity {
		t.Fatalf("beta's reserve on a full fleet: %+v", r)
	}

	bh.Cut()
	deadline := time.Now().Add(60 * time.Second)
	for {
		r, err := b.Reserve(ctxT(t), "two")
		if err == nil && r.Kind == etcdfleet.Reserved {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("beta never got the slot (last %+v %v)", r, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// beta got the slot, so etcd expired alpha's lease: alpha must have
	// been fenced before that.
	select {
	case ids := <-fenced:
		if !slices.Equal(ids, []string{"one"}) {
			t.Fatalf("fenced %v, want [one]", ids)
		}
	default:
		t.Fatal("another host got the slot while the partitioned host still counted its Computer")
	}

	bh.Mend()
	waitFor(t, "alpha to register again", func() bool {
		hs, err := b.Hosts(ctxT(t))
		return err == nil && len(hs) == 2
	})
	if r, _ := a.Reserve(ctxT(t), "one"); r.Kind != etcdfleet.AtCapacity {
		t.Fatalf("alpha's reserve after the heal, while beta holds the slot: %+v", r)
	}
}

// TestJoinOutwaitsADeadRegistration: a berth killed -9 leaves its
// registration on a lease that lapses in its own time; the berth started
// again on that host id waits it out — keeping its own new lease alive
// meanwhile, though that lease's TTL is shorter than the wait — and joins.
func TestJoinOutwaitsADeadRegistration(t *testing.T) {
	c := etcdtest.Start(t, 1)
	raw := c.Client(t)
	old, err := raw.Grant(ctxT(t), 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Put(ctxT(t), etcdfleet.DefaultPrefix+"hosts/a", `{"id":"a"}`, clientv3.WithLease(old.ID)); err != nil {
		t.Fatal(err)
	}
	m := join(t, c, "a", etcdfleet.Options{LeaseTTL: time.Second})
	hs, err := m.Hosts(ctxT(t))
	if err != nil || len(hs) != 1 || hs[0].ID != "a" || hs[0].Address != "a:9090" {
		t.Fatalf("hosts after the join: %+v %v", hs, err)
	}
}
