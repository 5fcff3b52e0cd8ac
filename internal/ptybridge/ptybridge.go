// Package ptybridge carries a terminal session over a client's websocket:
// the one implementation behind a deployment's shell
// (GET /deployments/{id}/shell) and a Computer's terminal
// (GET /computers/{id}/terminal).
//
// The framing is app-lb.md §2.6's: binary 0x01+bytes from the client are
// keystrokes, binary 0x02+bytes from the server are terminal output, and
// text messages are JSON control messages: the route's ready message
// first, {"type":"resize","cols":C,"rows":R} from the client, and last
// {"type":"exit","code":N} (or {"type":"error","message":M} when no exit
// status came), followed by a normal (1000) close.
//
// The order at the end is what clients rely on: the command exits, every
// byte of its output is sent, then the exit message, then the close
// handshake. Nothing cancels the context of a websocket read or write
// before that (coder/websocket closes the connection when one is
// cancelled).
package ptybridge

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/coder/websocket"

	"github.com/berth-dev/berth/internal/web"
)

// MaxSize is the largest terminal width or height, in the query and in
// resize messages.
const MaxSize = 1000

// Frame tags: the first byte of every binary message.
const (
	tagInput  = 0x01 // client → server: keystrokes
	tagOutput = 0x02 // server → client: terminal output
)

// endTimeout bounds the write of the last message to a client that does
// not read.
const endTimeout = 5 * time.Second

// Terminal is a command running on a terminal (an agent PTY session).
type Terminal interface {
	// Read returns terminal output, and io.EOF once the command has
	// exited and all of its output has been read.
	Read(p []byte) (int, error)
	// Write types p into the terminal.
	Write(p []byte) (int, error)
	Resize(cols, rows int) error
	// Wait returns the exit code once the command has exited, or why no
	// exit code came.
	Wait() (code int, err error)
	// Close ends the session, killing the command if it still runs.
	Close() error
}

// Size reads the initial terminal size from the cols and rows query
// parameters (80×24 when absent).
func Size(q url.Values) (cols, rows int, err error) {
	cols, rows = 80, 24
	for _, p := range []struct {
		name string
		dst  *int
	}{{"cols", &cols}, {"rows", &rows}} {
		if v := q.Get(p.name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > MaxSize {
				return 0, 0, web.Invalid(p.name, "must be an integer from 1 to %d, got %q", MaxSize, v)
			}
			*p.dst = n
		}
	}
	return cols, rows, nil
}

// Options are what differs between the routes that use the bridge.
type Options struct {
	// Ready is the first message, sent (as JSON text) once the websocket
	// is open.
	Ready any
	// Ended, when set, is called with the session's outcome (Terminal.Wait's)
	// before the last message goes out.
	Ended func(code int, err error)
}

// Serve upgrades r to a websocket and bridges it to t until the command
// exits or the client leaves. It owns t: it closes t when it returns, and
// a client that leaves ends the command. It returns after the close
// handshake, so the handler may return at once.
func Serve(w http.ResponseWriter, r *http.Request, t Terminal, o Options) {
	defer t.Close()
	ws, err := websocket.Accept(w, r, nil)
	if err != nil {
		return // Accept has answered
	}
	defer ws.CloseNow()
	// The session's reads and writes run under the request's context,
	// never one cancelled when the command ends.
	ctx := r.Context()
	ready, err := json.Marshal(o.Ready)
	if err != nil {
		return
	}
	if err := ws.Write(ctx, websocket.MessageText, ready); err != nil {
		return
	}

	// Terminal output → client. The last message waits for all of it.
	outDone := make(chan struct{})
	go func() {
		defer close(outDone)
		buf := make([]byte, 32<<10)
		for {
			n, err := t.Read(buf[1:])
			if n > 0 {
				buf[0] = tagOutput
				if ws.Write(ctx, websocket.MessageBinary, buf[:n+1]) != nil {
					t.Close() // the client left: end the command
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()

	// Client → terminal, until the connection ends: the client leaves, or
	// the close handshake below completes.
	inDone := make(chan struct{})
	go func() {
		defer close(inDone)
		for {
			typ, msg, err := ws.Read(ctx)
			if err != nil {
				t.Close() // the client left (or the session is over): end the command
				return
			}
			if typ == websocket.MessageBinary {
				if len(msg) > 0 && msg[0] == tagInput {
					// A terminal that no longer takes input is not the
					// client's error; Wait reports the outcome.
					_, _ = t.Write(msg[1:])
				}
				continue
			}
			var m struct {
				Type       string
				Cols, Rows int
			}
			if json.Unmarshal(msg, &m) == nil && m.Type == "resize" && m.Cols > 0 && m.Rows > 0 && m.Cols <= MaxSize && m.Rows <= MaxSize {
				_ = t.Resize(m.Cols, m.Rows)
			}
		}
	}()

	code, werr := t.Wait()
	<-outDone
	if o.Ended != nil {
		o.Ended(code, werr)
	}
	var end []byte
	if werr != nil {
		end, _ = json.Marshal(map[string]string{"type": "error", "message": werr.Error()})
	} else {
		end, _ = json.Marshal(map[string]any{"type": "exit", "code": code})
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), endTimeout)
	defer cancel()
	if ws.Write(wctx, websocket.MessageText, end) == nil {
		ws.Close(websocket.StatusNormalClosure, "")
	}
	ws.CloseNow()
	<-inDone
}
