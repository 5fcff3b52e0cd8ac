package proxy_test

import (
	"bufio"
	"bytes"
	"net"
	"strconv"
	"testing"

	"github.com/berth-dev/berth/internal/proxy"
)

// quietClient is a keep-alive HTTP/1.1 client that allocates nothing per
// request, so that testing.AllocsPerRun counts only the proxy's allocations
// (and the raw upstream's, which are none).
type quietClient struct {
	c   net.Conn
	br  *bufio.Reader
	req []byte
}

func newQuietClient(tb testing.TB, addr, req string) *quietClient {
	tb.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return &quietClient{c: c, br: bufio.NewReaderSize(c, 64<<10), req: []byte(req)}
}

var contentLength = []byte("content-length:")

// do sends the request and reads one response, returning its status and
// body length (-1 on any error).
func (q *quietClient) do() (status, n int) {
	if _, err := q.c.Write(q.req); err != nil {
		return 0, -1
	}
	line, err := q.br.ReadSlice('\n')
	if err != nil || len(line) < 12 {
		return 0, -1
	}
	status = int(line[9]-'0')*100 + int(line[10]-'0')*10 + int(line[11]-'0')
	cl := -1
	for {
		line, err = q.br.ReadSlice('\n')
		if err != nil {
			return status, -1
		}
		if len(line) <= 2 {
			break
		}
		if len(line) > len(contentLength) && bytes.EqualFold(line[:len(contentLength)], contentLength) {
			v := bytes.TrimSpace(line[len(contentLength):])
			cl = 0
			for _, c := range v {
				cl = cl*10 + int(c-'0')
			}
		}
	}
	if cl < 0 {
		return status, -1
	}
	if _, err := q.br.Discard(cl); err != nil {
		return status, -1
	}
	return status, cl
}

// TestKeepAliveGETAllocs pins the data plane's fast path at zero
// allocations: a keep-alive GET through the front end, forwarded over a
// pooled upstream connection, answered with a small body.
func TestKeepAliveGETAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("measures allocations over many requests")
	}
	if frontEnd == "h1-watch" {
		t.Skip("every request is watched for a hang-up: the slow path")
	}
	addr := rawUpstream(t)
	h := proxy.New(proxy.Options{})
	h.Swap(table(entry{static("bench", proxy.NewBackend("bench-1", addr, false)), catchAll}))
	paddr, _ := startH1(t, h, proxy.H1Options{})
	q := newQuietClient(t, paddr, "GET /bench?q=1 HTTP/1.1\r\nHost: bench.test\r\nUser-Agent: bench\r\nAccept: */*\r\n\r\n")
	for range 100 { // warm the pools
		if st, n := q.do(); st != 200 || n != 100 {
			t.Fatalf("status %d, %d bytes", st, n)
		}
	}
	var bad string
	allocs := testing.AllocsPerRun(2000, func() {
		if st, n := q.do(); st != 200 || n != 100 {
			bad = "status " + strconv.Itoa(st) + ", " + strconv.Itoa(n) + " bytes"
		}
	})
	if bad != "" {
		t.Fatal(bad)
	}
	if allocs != 0 {
		t.Errorf("%v allocations per keep-alive GET, want 0", allocs)
	}
}
