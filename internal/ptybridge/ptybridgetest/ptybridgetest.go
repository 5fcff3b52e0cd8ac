// Package ptybridgetest is a raw websocket client of the terminal routes
// (package ptybridge) for tests: it records every message of a session,
// the close status included, so that tests can assert the protocol's
// order rather than what a forgiving client makes of it.
package ptybridgetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/coder/websocket"
)

// Result is what the server sent in one session.
type Result struct {
	Ready  map[string]any // the first message
	Output string         // the 0x02 frames' bytes, in order
	// Last is the last text message (the exit or error message), and
	// AfterLast whether any output frame came after it.
	Last      map[string]any
	AfterLast bool
	// Close is the close status the server sent (-1 for none: the
	// connection just ended, which a browser reports as 1006).
	Close websocket.StatusCode
	// ReadErr is the error that ended the session.
	ReadErr error
}

// ExitCode returns the code of an exit message, or -1.
func (r Result) ExitCode() int {
	if r.Last["type"] != "exit" {
		return -1
	}
	c, ok := r.Last["code"].(float64)
	if !ok {
		return -1
	}
	return int(c)
}

// Check reports what is wrong with a session that should have ended with
// exit code code after output containing want.
func (r Result) Check(code int, want string) error {
	var errs []string
	if r.Ready["type"] != "ready" {
		errs = append(errs, fmt.Sprintf("first message %v, want ready", r.Ready))
	}
	if !strings.Contains(r.Output, want) {
		errs = append(errs, fmt.Sprintf("output %q lacks %q", r.Output, want))
	}
	if r.ExitCode() != code {
		errs = append(errs, fmt.Sprintf("last message %v, want exit %d", r.Last, code))
	}
	if r.AfterLast {
		errs = append(errs, "output after the exit message")
	}
	if r.Close != websocket.StatusNormalClosure {
		errs = append(errs, fmt.Sprintf("close status %d (%v), want 1000", r.Close, r.ReadErr))
	}
	return errors.Join(toErrs(errs)...)
}

func toErrs(s []string) []error {
	var out []error
	for _, e := range s {
		out = append(out, errors.New(e))
	}
	return out
}

// Run dials url (ws://...) with header, types input into the terminal,
// and reads until the server closes the connection.
func Run(ctx context.Context, url string, header http.Header, input string) (Result, error) {
	conn, resp, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: header})
	if err != nil {
		if resp != nil {
			return Result{}, fmt.Errorf("dial: %d: %w", resp.StatusCode, err)
		}
		return Result{}, fmt.Errorf("dial: %w", err)
	}
	defer conn.CloseNow()
	conn.SetReadLimit(1 << 20)
	var r Result
	_, msg, err := conn.Read(ctx)
	if err != nil {
		return r, fmt.Errorf("reading the ready message: %w", err)
	}
	if err := json.Unmarshal(msg, &r.Ready); err != nil {
		return r, fmt.Errorf("ready message %q: %w", msg, err)
	}
	if err := conn.Write(ctx, websocket.MessageBinary, append([]byte{0x01}, input...)); err != nil {
		return r, fmt.Errorf("typing: %w", err)
	}
	var out strings.Builder
	for {
		typ, msg, err := conn.Read(ctx)
		if err != nil {
			r.Output, r.ReadErr = out.String(), err
			r.Close = websocket.CloseStatus(err)
			return r, nil
		}
		if typ == websocket.MessageBinary {
			if len(msg) > 0 && msg[0] == 0x02 {
				out.Write(msg[1:])
				if r.Last != nil {
					r.AfterLast = true
				}
			}
			continue
		}
		r.Last = nil
		if err := json.Unmarshal(msg, &r.Last); err != nil {
			return r, fmt.Errorf("text message %q: %w", msg, err)
		}
	}
}

// Sessions runs n sessions, a few at a time, each typing input(i), and
// fails t for each one that does not end with exit code code after
// output containing want(i), an exit message and a 1000 close.
func Sessions(t testing.TB, ctx context.Context, n int, url string, header http.Header, input, want func(i int) string, code int) {
	t.Helper()
	const parallel = 4
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	var mu sync.Mutex
	bad := 0
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			r, err := Run(ctx, url, header, input(i))
			if err == nil {
				err = r.Check(code, want(i))
			}
			if err != nil {
				mu.Lock()
				bad++
				mu.Unlock()
				t.Errorf("session %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	if bad > 0 {
		t.Errorf("%d of %d sessions did not end with their output, exit %d and a 1000 close", bad, n, code)
	}
}
