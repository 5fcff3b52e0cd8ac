// Command upstream is the fixed backend of bench/proxy.sh: a minimal HTTP/1.1
// server that answers every request with the same 100-byte body. It runs with
// GOMAXPROCS=1 (unless the environment says otherwise) so that it takes a
// bounded share of the benchmark machine, and the same instance serves the
// direct run and the runs through every proxy, so their differences are the
// proxies' own.
package main

import (
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"runtime"
	"strconv"
)

// body is exactly 100 bytes: a small API answer, so that the benchmark
// measures per-request overhead rather than copying.
var body = []byte("hello from the berth bench upstream; this body is exactly one hundred bytes long, padded to fit....\n")

func main() {
	addr := flag.String("addr", "127.0.0.1:18080", "listen address")
	flag.Parse()
	if len(body) != 100 {
		log.Fatalf("body is %d bytes, want 100", len(body))
	}
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1)
	}
	clen := strconv.Itoa(len(body))
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hdr := w.Header()
		hdr["Content-Type"] = []string{"text/plain"}
		hdr["Content-Length"] = []string{clen}
		w.Write(body)
	})
	fmt.Fprintf(os.Stderr, "upstream listening on %s (GOMAXPROCS=%d)\n", *addr, runtime.GOMAXPROCS(0))
	log.Fatal(http.ListenAndServe(*addr, h))
}
