// Command upstream is the fixed backend of bench/proxy.sh and the other
// bench scripts: a minimal HTTP/1.1 server. It runs with GOMAXPROCS=1
// (unless the environment says otherwise) so that it takes a bounded share
// of the benchmark machine, and the same instance serves the direct run and
// the runs through every proxy, so their differences are the proxies' own.
//
// What it answers:
//
//	GET /      12 bytes ("hello berth\n"), the "12-byte upstream"
//	GET /100   100 bytes
//	GET /1k    1,024 bytes
//	GET /64k   65,536 bytes
//	POST any   reads and discards the request body, then answers the 12 bytes
//	GET /ws    a websocket echo: every message comes back as it was sent
//
// Any other GET path answers the 12 bytes too, so health probes and routed
// paths (/d123/...) all get 200.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"runtime"
	"strconv"

	"github.com/coder/websocket"
)

// small is the default body: 12 bytes, so that the benchmark measures
// per-request overhead rather than copying.
var small = []byte("hello berth\n")

// sized is a body of exactly n bytes, newline-terminated.
func sized(n int) []byte {
	b := bytes.Repeat([]byte("berth bench "), n/12+1)[:n]
	b[n-1] = '\n'
	return b
}

func main() {
	addr := flag.String("addr", "127.0.0.1:18080", "listen address")
	flag.Parse()
	if len(small) != 12 {
		log.Fatalf("body is %d bytes, want 12", len(small))
	}
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1)
	}
	bodies := map[string][]byte{"/100": sized(100), "/1k": sized(1024), "/64k": sized(65536)}
	lens := map[string][]string{}
	for p, b := range bodies {
		lens[p] = []string{strconv.Itoa(len(b))}
	}
	smallLen := []string{strconv.Itoa(len(small))}
	textPlain := []string{"text/plain"}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ws" && r.Header.Get("Upgrade") != "" {
			echo(w, r)
			return
		}
		body, clen := small, smallLen
		if r.Method == http.MethodPost || r.Method == http.MethodPut {
			if _, err := io.Copy(io.Discard, r.Body); err != nil {
				http.Error(w, "reading the body: "+err.Error(), http.StatusBadRequest)
				return
			}
		} else if b, ok := bodies[r.URL.Path]; ok {
			body, clen = b, lens[r.URL.Path]
		}
		hdr := w.Header()
		hdr["Content-Type"] = textPlain
		hdr["Content-Length"] = clen
		w.Write(body)
	})
	fmt.Fprintf(os.Stderr, "upstream listening on %s (GOMAXPROCS=%d)\n", *addr, runtime.GOMAXPROCS(0))
	log.Fatal(http.ListenAndServe(*addr, h))
}

// echo upgrades to a websocket and sends every message back with its type.
func echo(w http.ResponseWriter, r *http.Request) {
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
	if err != nil {
		return // Accept has answered the client
	}
	defer c.CloseNow()
	c.SetReadLimit(1 << 20)
	ctx := context.Background()
	buf := make([]byte, 0, 4096)
	for {
		typ, rd, err := c.Reader(ctx)
		if err != nil {
			return
		}
		buf = buf[:0]
		for {
			if len(buf) == cap(buf) {
				buf = append(buf, 0)[:len(buf)]
			}
			n, err := rd.Read(buf[len(buf):cap(buf)])
			buf = buf[:len(buf)+n]
			if err == io.EOF {
				break
			}
			if err != nil {
				return
			}
		}
		if err := c.Write(ctx, typ, buf); err != nil {
			return
		}
	}
}
