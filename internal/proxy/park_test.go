package proxy_test

import (
	"context"
	"net/http"
	"runtime"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/proxy"
)

// waitFor polls cond until it holds, failing after hangGuard. It only
// bounds a wait for a state; it asserts nothing about time.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(hangGuard); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", hangGuard, what)
		}
	}
}

func parkingProxy(t *testing.T, o proxy.H1Options) (string, *proxy.H1Server) {
	if runtime.GOOS != "linux" {
		t.Skip("connections are parked on Linux only")
	}
	h, _ := echoProxy(t)
	return startH1(t, h, o)
}

// TestH1ParkAndResume: a kept-alive connection idle for ParkAfter is
// parked, and serves its next request when the client sends one; then it
// parks again.
func TestH1ParkAndResume(t *testing.T) {
	addr, fe := parkingProxy(t, proxy.H1Options{ParkAfter: 20 * time.Millisecond, IdleTimeout: time.Minute})
	rc := dialRaw(t, addr)
	for i := range 3 {
		rc.send("GET /x HTTP/1.1\r\nHost: app.test\r\n\r\n")
		if resp, _ := rc.response("GET"); resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: %d", i, resp.StatusCode)
		}
		waitFor(t, "the connection to be parked", func() bool { return fe.Parked() == 1 })
	}
	// A head sent in pieces after resuming is read as a whole.
	rc.send("GET /x HTTP/1.1\r\n")
	waitFor(t, "the connection to be resumed", func() bool { return fe.Parked() == 0 })
	rc.send("Host: app.test\r\n\r\n")
	if resp, _ := rc.response("GET"); resp.StatusCode != http.StatusOK {
		t.Fatalf("after a split head: %d", resp.StatusCode)
	}
	// Nor does the park deadline cut off a head whose rest comes later
	// than ParkAfter (no ReadHeaderTimeout is set here).
	rc.send("GET /x HTTP/1.1\r\n")
	time.Sleep(3 * 20 * time.Millisecond)
	rc.send("Host: app.test\r\n\r\n")
	if resp, _ := rc.response("GET"); resp.StatusCode != http.StatusOK {
		t.Fatalf("after a slow head: %d", resp.StatusCode)
	}
}

// TestH1ParkedIdleTimeout: a parked connection still closes once its idle
// timeout passes.
func TestH1ParkedIdleTimeout(t *testing.T) {
	addr, fe := parkingProxy(t, proxy.H1Options{ParkAfter: 10 * time.Millisecond, IdleTimeout: 200 * time.Millisecond})
	rc := dialRaw(t, addr)
	rc.send("GET /x HTTP/1.1\r\nHost: app.test\r\n\r\n")
	if resp, _ := rc.response("GET"); resp.StatusCode != http.StatusOK {
		t.Fatalf("%d", resp.StatusCode)
	}
	if !rc.closed() {
		t.Fatal("the parked connection was not closed after its idle timeout")
	}
	if n := fe.Parked(); n != 0 {
		t.Errorf("%d connections still parked", n)
	}
}

// TestH1ParkedClientHangsUp: a client closing a parked connection takes it
// out of the parker.
func TestH1ParkedClientHangsUp(t *testing.T) {
	addr, fe := parkingProxy(t, proxy.H1Options{ParkAfter: 10 * time.Millisecond, IdleTimeout: time.Minute})
	rc := dialRaw(t, addr)
	rc.send("GET /x HTTP/1.1\r\nHost: app.test\r\n\r\n")
	rc.response("GET")
	waitFor(t, "the connection to be parked", func() bool { return fe.Parked() == 1 })
	rc.c.Close()
	waitFor(t, "the closed connection to leave the parker", func() bool { return fe.Parked() == 0 })
}

// TestH1ShutdownClosesParked: Shutdown counts parked connections as idle:
// it closes them and returns.
func TestH1ShutdownClosesParked(t *testing.T) {
	addr, fe := parkingProxy(t, proxy.H1Options{ParkAfter: 10 * time.Millisecond, IdleTimeout: time.Minute})
	rc := dialRaw(t, addr)
	rc.send("GET /x HTTP/1.1\r\nHost: app.test\r\n\r\n")
	rc.response("GET")
	waitFor(t, "the connection to be parked", func() bool { return fe.Parked() == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	if err := fe.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if !rc.closed() {
		t.Error("the parked connection was not closed by Shutdown")
	}
}
