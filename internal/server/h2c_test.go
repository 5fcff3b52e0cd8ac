package server

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"
)

// TestH2CStalledConnectionsClosed: an h2c client (prior knowledge) that
// stops mid-frame (the preface, then half a HEADERS frame), or sends
// nothing after its preface and answers no ping, is disconnected once the
// header timeout has passed twice (no frame: ping; no answer: close), on
// both front ends, rather than held for the idle timeout (120 s) or for
// ever.
func TestH2CStalledConnectionsClosed(t *testing.T) {
	for _, std := range []bool{false, true} {
		name := "front end"
		if std {
			name = "net/http"
		}
		t.Run(name, func(t *testing.T) {
			o := Options{
				ProxyAddr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0", DataDir: t.TempDir(),
				ReadHeaderTimeout: 200 * time.Millisecond, StdHTTP: std, EgressAddr: "off",
				Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
			}
			testOptions(&o)
			s := runWith(t, o)

			const preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
			settings := []byte{0, 0, 0, 4, 0, 0, 0, 0, 0} // empty SETTINGS
			// HEADERS, END_HEADERS, stream 1, 100 bytes announced, 10 sent.
			halfHeaders := append([]byte{0, 0, 100, 1, 4, 0, 0, 0, 1}, make([]byte, 10)...)
			for _, tt := range []struct {
				name string
				send []byte
			}{
				{"half a HEADERS frame", append(append([]byte(preface), settings...), halfHeaders...)},
				{"idle after the preface", append([]byte(preface), settings...)},
			} {
				c, err := net.Dial("tcp", s.ProxyAddr())
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				if _, err := c.Write(tt.send); err != nil {
					t.Fatal(err)
				}
				// Not a timing assertion: the bound only turns "never
				// closed" into a failure, well inside the idle timeout.
				c.SetReadDeadline(time.Now().Add(60 * time.Second))
				_, err = io.Copy(io.Discard, c) // the server's SETTINGS, PING...
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					t.Errorf("%s: the connection was still open after 60s", tt.name)
				}
			}
		})
	}
}
