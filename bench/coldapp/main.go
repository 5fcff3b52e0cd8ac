// Command coldapp is the trivial app the cold-start benchmarks run in a
// replica. It listens on $PORT and answers every request with when its main
// started and when it began listening (unix nanoseconds), so a benchmark can
// subtract the app's own start-to-listen time from the time to first byte
// and see berth's share. ?sleep=MS holds the request that long, to make
// concurrent load.
package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"
)

func main() {
	start := time.Now()
	ln, err := net.Listen("tcp", "127.0.0.1:"+os.Getenv("PORT"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	listening := time.Now()
	http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ms, err := strconv.Atoi(r.URL.Query().Get("sleep")); err == nil && ms > 0 {
			time.Sleep(time.Duration(ms) * time.Millisecond)
		}
		fmt.Fprintf(w, "%d %d\n", start.UnixNano(), listening.UnixNano())
	}))
}
