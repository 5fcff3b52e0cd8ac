package health

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http/httputil"
	"net/textproto"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Prober runs one check again and again. For an HTTP check it keeps the
// connection open between probes (HTTP/1.1 keep-alive) when the backend's
// answer allows it, so that a backend probed every few seconds is not
// handed a new connection each time; the verdict is Probe's (healthy iff
// the status is below 500). A TCP check connects afresh each time, since
// the connect is what it checks. Safe for concurrent use (probes are
// serialised).
type Prober struct {
	c      Check
	budget *Budget
	mu     sync.Mutex
	conn   net.Conn
	br     *bufio.Reader
	held   bool // conn counts against budget
}

// Budget bounds the connections a set of probers keeps open between
// probes (each is a file descriptor the proxy cannot use); a prober over
// budget closes its connection after each probe, as Probe does. Safe for
// concurrent use.
type Budget struct {
	max  int64
	used atomic.Int64
}

// NewBudget returns a budget of max kept connections.
func NewBudget(max int) *Budget { return &Budget{max: int64(max)} }

// Kept is the number of connections kept now.
func (b *Budget) Kept() int { return int(b.used.Load()) }

func (b *Budget) take() bool {
	if b.used.Add(1) > b.max {
		b.used.Add(-1)
		return false
	}
	return true
}

// NewProber returns a prober for c whose kept connection counts against
// budget (nil: no bound).
func NewProber(c Check, budget *Budget) *Prober { return &Prober{c: c, budget: budget} }

// maxDrain bounds the body read to keep a connection: a larger answer
// closes it instead.
const maxDrain = 64 << 10

// Probe runs the check once and returns nil when the backend is healthy.
func (p *Prober) Probe(ctx context.Context) error {
	c := p.c
	if c.Path == "" {
		return Probe(ctx, c)
	}
	path := c.Path
	if !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	if strings.ContainsAny(path, " \r\n") {
		return fmt.Errorf("health: invalid probe path %q", path)
	}
	if c.Timeout <= 0 {
		c.Timeout = 2 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn != nil {
		// The backend may have closed the idle connection since: a
		// failure on it is retried once on a new one, which decides.
		err := p.exchange(ctx, path)
		if err == nil || !p.reusedFailure(err) || ctx.Err() != nil {
			return err
		}
	}
	if err := p.dial(ctx); err != nil {
		return err
	}
	return p.exchange(ctx, path)
}

// errStatus marks a verdict from a status line that was read: it is not a
// failure of the connection, and is never retried.
type errStatus struct{ code int }

func (e errStatus) Error() string { return fmt.Sprintf("health: status %d", e.code) }

func (p *Prober) reusedFailure(err error) bool {
	var es errStatus
	return !errors.As(err, &es) && !errors.Is(err, ErrBadStatusLine)
}

func (p *Prober) dial(ctx context.Context) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", p.c.Addr)
	if err != nil {
		return err
	}
	if p.c.TLS {
		sni := p.c.SNI
		if sni == "" {
			sni, _, _ = net.SplitHostPort(p.c.Addr)
		}
		tc := tls.Client(conn, &tls.Config{ServerName: sni})
		if dl, ok := ctx.Deadline(); ok {
			conn.SetDeadline(dl)
		}
		if err := tc.HandshakeContext(ctx); err != nil {
			conn.Close()
			return err
		}
		conn = tc
	}
	p.conn, p.br = conn, bufio.NewReaderSize(conn, 4096)
	return nil
}

// exchange sends one GET on p.conn and reads the answer; the connection is
// kept only when the answer is complete and allows it.
func (p *Prober) exchange(ctx context.Context, path string) (err error) {
	keep := false
	defer func() {
		if !keep {
			p.closeLocked()
		}
	}()
	if dl, ok := ctx.Deadline(); ok {
		p.conn.SetDeadline(dl)
	}
	if _, err := fmt.Fprintf(p.conn, "GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: berth/health\r\n\r\n", path, p.c.Addr); err != nil {
		return err
	}
	tp := textproto.NewReader(p.br)
	line, err := tp.ReadLine()
	if err != nil {
		return fmt.Errorf("health: reading status line: %w", err)
	}
	code, err := statusCode(line)
	if err != nil {
		return err
	}
	var verdict error
	if code >= 500 {
		verdict = errStatus{code}
	}
	// The status line decides; what follows only decides whether the
	// connection can carry the next probe.
	h, herr := tp.ReadMIMEHeader()
	if herr != nil || code < 200 || strings.HasPrefix(line, "HTTP/1.0") || hasToken(h.Values("Connection"), "close") {
		return verdict
	}
	var body io.Reader
	switch te, cl := h.Get("Transfer-Encoding"), h.Get("Content-Length"); {
	case code == 204 || code == 304:
		body = strings.NewReader("")
	case te != "":
		if !strings.EqualFold(strings.TrimSpace(te), "chunked") {
			return verdict
		}
		body = httputil.NewChunkedReader(p.br)
	case cl != "":
		n, err := strconv.ParseInt(strings.TrimSpace(cl), 10, 64)
		if err != nil || n < 0 || n > maxDrain {
			return verdict
		}
		body = io.LimitReader(p.br, n)
	default:
		return verdict // the body runs until the connection closes
	}
	if n, err := io.Copy(io.Discard, io.LimitReader(body, maxDrain+1)); err != nil || n > maxDrain {
		return verdict
	}
	if te := h.Get("Transfer-Encoding"); te != "" {
		// The chunked reader stops at the last chunk; the trailer
		// section ends with an empty line.
		if _, err := tp.ReadMIMEHeader(); err != nil {
			return verdict
		}
	}
	if !p.held && p.budget != nil {
		if !p.budget.take() {
			return verdict
		}
		p.held = true
	}
	keep = true
	return verdict
}

func hasToken(vs []string, tok string) bool {
	for _, v := range vs {
		for f := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(f), tok) {
				return true
			}
		}
	}
	return false
}

// closeLocked closes the kept connection; p.mu is held.
func (p *Prober) closeLocked() {
	if p.conn != nil {
		p.conn.Close()
		p.conn, p.br = nil, nil
	}
	if p.held {
		p.budget.used.Add(-1)
		p.held = false
	}
}

// Close closes the connection the prober keeps, if any.
func (p *Prober) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closeLocked()
}
