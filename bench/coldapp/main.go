// Command coldapp is the trivial app the cold-start benchmarks run in a
// replica. It listens on $PORT and answers every request with when its main
// started and when it began listening (unix nanoseconds), so a benchmark can
// subtract the app's own start-to-listen time from the time to first byte
// and see berth's share. ?sleep=MS holds the request that long, to make
// concurrent load. With $APP_REVISION set it answers it in x-heyo-revision
// (the rollout benchmark's expected_header).
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
	rev := os.Getenv("APP_REVISION") // answered in x-heyo-revision, for rollouts' expected_header
	http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if rev != "" {
			w.Header().Set("X-Heyo-Revision", rev)
		}
		if ms, err := strconv.Atoi(r.URL.Query().Get("sleep")); err == nil && ms > 0 {
			time.Sleep(time.Duration(ms) * time.Millisecond)
		}
		fmt.Fprintf(w, "%d %d\n", start.UnixNano(), listening.UnixNano())
	}))
}
