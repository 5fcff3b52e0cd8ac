package agent

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakePort behaves like the guest's end of a virtio serial port: it reads
// end of file while no host is connected (instead of blocking), and a host
// connection is a pipe whose far end the test holds.
type fakePort struct {
	mu     sync.Mutex
	cur    net.Conn // guest end of the current host connection
	closed bool
	opens  int
}

// connect attaches a new host connection and returns the host's end.
func (p *fakePort) connect() net.Conn {
	guest, host := net.Pipe()
	p.mu.Lock()
	p.cur = guest
	p.mu.Unlock()
	return host
}

func (p *fakePort) conn() (net.Conn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, net.ErrClosed
	}
	return p.cur, nil
}

func (p *fakePort) Read(b []byte) (int, error) {
	c, err := p.conn()
	if err != nil {
		return 0, err
	}
	if c == nil {
		return 0, io.EOF
	}
	n, err := c.Read(b)
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrClosedPipe) {
		p.mu.Lock()
		if p.cur == c {
			p.cur = nil
		}
		p.mu.Unlock()
		if n == 0 {
			return 0, io.EOF
		}
		return n, nil
	}
	return n, err
}

func (p *fakePort) Write(b []byte) (int, error) {
	c, err := p.conn()
	if err != nil {
		return 0, err
	}
	if c == nil {
		return len(b), nil // QEMU drops what nobody reads
	}
	return c.Write(b)
}

// Close closes the descriptor, not the host's connection: blocked reads
// and writes fail (as the poller makes them on a real device), the next
// descriptor sees the same host.
func (p *fakePort) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	if p.cur != nil {
		p.cur.SetDeadline(time.Now())
	}
	return nil
}

// newFakeGuest serves the agent protocol on a port listener over a fake
// port, reopening the port (a fresh fakePort sharing the host side) as the
// real listener reopens its device.
type fakeGuest struct {
	mu   sync.Mutex
	port *fakePort
	ln   *portListener
}

func newFakeGuest(t *testing.T) *fakeGuest {
	g := &fakeGuest{}
	g.ln = newPortListener("virtio:test", func() (io.ReadWriteCloser, error) {
		g.mu.Lock()
		defer g.mu.Unlock()
		old := g.port
		g.port = &fakePort{}
		if old != nil {
			// The host connection belongs to the device, not to the
			// descriptor; keep it unless it ended.
			old.mu.Lock()
			g.port.cur = old.cur
			old.mu.Unlock()
			if g.port.cur != nil {
				g.port.cur.SetDeadline(time.Time{})
			}
		}
		return g.port, nil
	})
	srv := NewServer(Options{Dir: t.TempDir()})
	go srv.Serve(g.ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		g.ln.Close()
	})
	return g
}

// connect attaches a host once the listener has its port open.
func (g *fakeGuest) connect(t *testing.T) net.Conn {
	t.Helper()
	for range 500 {
		g.mu.Lock()
		p := g.port
		g.mu.Unlock()
		if p != nil {
			return p.connect()
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("the listener never opened its port")
	return nil
}

func portSessionFor(t *testing.T, conn net.Conn) *PortSession {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	s, err := NewPortSession(ctx, conn)
	if err != nil {
		t.Fatalf("NewPortSession: %v", err)
	}
	return s
}

func info(t *testing.T, s *PortSession) Info {
	t.Helper()
	c := NewClient(func(context.Context) (net.Conn, error) { return s.Open() })
	defer c.Close()
	in, err := c.Info(t.Context())
	if err != nil {
		t.Fatalf("Info over the port: %v", err)
	}
	return in
}

func TestPortSessionServesAgent(t *testing.T) {
	g := newFakeGuest(t)
	s := portSessionFor(t, g.connect(t))
	defer s.Close()
	if in := info(t, s); in.Protocol != 1 {
		t.Errorf("Info.Protocol = %d, want 1", in.Protocol)
	}
	// Several connections at once share the port.
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Go(func() {
			c := NewClient(func(context.Context) (net.Conn, error) { return s.Open() })
			defer c.Close()
			res, err := c.Exec(t.Context(), ExecRequest{Command: fmt.Sprintf("echo conn-%d", i)})
			if err == nil && strings.TrimSpace(res.Output) != fmt.Sprintf("conn-%d", i) {
				err = fmt.Errorf("exec %d printed %q", i, res.Output)
			}
			if err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestPortSessionNewHost checks that a host that goes away (berth
// restarting) leaves the port usable for the next one, even when the old
// host left half a frame behind and garbage precedes the next hello.
func TestPortSessionNewHost(t *testing.T) {
	g := newFakeGuest(t)
	first := g.connect(t)
	s1 := portSessionFor(t, first)
	info(t, s1)
	// Half a yamux header, then the host is gone.
	if _, err := first.Write([]byte{0, 0, 0}); err != nil {
		t.Fatal(err)
	}
	first.Close()
	<-s1.Closed()

	second := g.connect(t)
	if _, err := io.WriteString(second, "stale bytes without a newline"); err != nil {
		t.Fatal(err)
	}
	s2 := portSessionFor(t, second)
	defer s2.Close()
	if in := info(t, s2); in.Protocol != 1 {
		t.Errorf("second host: Info.Protocol = %d, want 1", in.Protocol)
	}
}

// TestPortHandshakeIgnoresStaleOutput checks the host side: whatever the
// guest wrote before its ready line (an old session's frames) is skipped,
// and a ready line with another nonce is not taken for the answer.
func TestPortHandshakeIgnoresStaleOutput(t *testing.T) {
	host, guest := net.Pipe()
	defer guest.Close()
	go func() {
		br := bufio.NewReader(guest)
		var nonce string
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			if n, ok := strings.CutPrefix(strings.TrimSpace(line), portHello); ok {
				nonce = n
				break
			}
		}
		io.WriteString(guest, "\x00\x01\x02 old frames\n"+portReady+"0123\n"+portReady+nonce+"\n")
		io.Copy(io.Discard, br)
	}()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	s, err := NewPortSession(ctx, host)
	if err != nil {
		t.Fatalf("NewPortSession: %v", err)
	}
	s.Close()
}

func TestPortHandshakeNoAnswer(t *testing.T) {
	host, guest := net.Pipe()
	defer guest.Close()
	go io.Copy(io.Discard, guest) // a guest whose agent is not up yet
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	_, err := NewPortSession(ctx, host)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("NewPortSession without an answer: error %v, want a deadline error", err)
	}

	host, guest = net.Pipe()
	go func() {
		io.ReadAtLeast(guest, make([]byte, 1), 1)
		guest.Close()
	}()
	if _, err := NewPortSession(t.Context(), host); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Fatalf("NewPortSession on a closed connection: error %v, want it to say so", err)
	}
}

func TestListenVirtioErrors(t *testing.T) {
	for _, addr := range []string{"virtio:no-such-port", "virtio:/nonexistent/vport9p9", "virtio:"} {
		ln, err := listenOn(addr)
		if err == nil {
			ln.Close()
			t.Errorf("listenOn(%q) succeeded, want an error", addr)
		}
	}
}

func TestValidNonce(t *testing.T) {
	for _, tt := range []struct {
		s    string
		want bool
	}{
		{"0123abcdef", true},
		{"", false},
		{"ABCD", false},
		{"12 34", false},
		{strings.Repeat("a", 65), false},
	} {
		if got := validNonce(tt.s); got != tt.want {
			t.Errorf("validNonce(%q) = %v, want %v", tt.s, got, tt.want)
		}
	}
}
