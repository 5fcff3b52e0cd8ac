package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Spare mode: the rules are in the package documentation ("Spare agents").

// spareFlags are the flags of spare mode.
type spareFlags struct {
	on   bool
	fd   int
	room string // ignored: room on the command line for the assignment
}

func (s *spareFlags) register(fl *flag.FlagSet) {
	fl.BoolVar(&s.on, "spare", false, "wait for a POST /v1/assign on --listen before starting (see the package documentation)")
	fl.IntVar(&s.fd, "spare-fd", -1, "`FD` of a pipe or socket from the driver: \"ready\" is written to it once listening, and the spare exits when it closes before the assignment")
	fl.StringVar(&s.room, "spare-room", "", "ignored: room on the command line that the assigned arguments replace")
}

// spareUsage is the status of a spare's bad assignment or bad flags.
const spareUsage = 2

// awaitAssignment is spare mode: it listens on listen, waits for the
// assignment, applies it (flags parsed into fl, environment, host name,
// files, command line) and returns the listener Main serves the protocol on.
// When the spare ends instead it returns a nil listener and the exit status.
// orig are Main's arguments as the process got them, for the command line.
func awaitAssignment(ctx context.Context, fl *flag.FlagSet, listen string, sf *spareFlags, orig []string, sigs <-chan os.Signal, stderr io.Writer) (net.Listener, int) {
	warn := func(format string, args ...any) { fmt.Fprintf(stderr, "berth agent: spare: "+format+"\n", args...) }
	ln, err := listenOn(listen)
	if err != nil {
		warn("%v", err)
		return nil, 1
	}
	h := newHandoff(ln)
	lost := make(chan struct{})
	var link *os.File
	if sf.fd >= 0 {
		// Non-blocking, so the runtime poller reads it and Close ends the
		// read once the spare is assigned.
		syscall.SetNonblock(sf.fd, true)
		link = os.NewFile(uintptr(sf.fd), "spare-link")
		if _, err := link.Write([]byte("ready\n")); err != nil {
			warn("the driver's end of --spare-fd is gone: %v", err)
			h.close()
			return nil, 0
		}
		go func() {
			defer close(lost)
			var b [64]byte
			for {
				if _, err := link.Read(b[:]); err != nil {
					return
				}
			}
		}()
	}
	closeLink := func() {
		if link != nil {
			link.Close()
		}
	}

	type request struct {
		c       GuestConfig
		reply   chan error
		written chan struct{} // closed once the answer is written
	}
	reqs := make(chan request)
	done := make(chan struct{}) // closed when the spare phase ends
	defer close(done)
	var taken atomic.Bool
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/assign", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			writeError(w, http.StatusMethodNotAllowed, "method "+r.Method+" not allowed on /v1/assign")
			return
		}
		if !taken.CompareAndSwap(false, true) {
			writeError(w, http.StatusConflict, "this spare has been assigned already")
			return
		}
		var c GuestConfig
		req := request{reply: make(chan error, 1), written: make(chan struct{})}
		defer close(req.written)
		if err := decodeJSON(w, r, &c); err != nil {
			req.reply <- err // single-use: a malformed assignment ends the spare too
		} else {
			req.c = c
		}
		select {
		case reqs <- req:
		case <-done:
			writeError(w, http.StatusServiceUnavailable, "this spare is ending")
			return
		}
		if err := <-req.reply; err != nil {
			writeErr(w, err)
			return
		}
		// Tells Assign that this spare stopped taking connections before
		// answering, so the next one reaches the replica's agent (agents
		// of older berths do not say so, and Assign checks).
		w.Header().Set(stagedHeader, "closed")
		w.WriteHeader(http.StatusNoContent)
		// On the wire before the spare phase goes on with Main's set-up
		// (which holds this process's CPU until COMMAND starts).
		http.NewResponseController(w).Flush()
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if taken.Load() {
			writeError(w, http.StatusServiceUnavailable, "this spare is being assigned")
			return
		}
		writeError(w, http.StatusServiceUnavailable, "this agent is a spare awaiting its assignment (POST /v1/assign)")
	})
	stage := h.stage(false)
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(stage) }()
	// stop ends the spare phase's server once the assignment's answer is
	// written; the listener itself lives on in the handoff.
	stop := func() {
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if hs.Shutdown(sctx) != nil {
			hs.Close()
		}
	}
	fail := func(code int) (net.Listener, int) {
		stop()
		closeLink()
		h.close()
		return nil, code
	}
	for {
		select {
		case req := <-reqs:
			if len(req.reply) > 0 {
				// Malformed: the handler answers with its error.
				warn("malformed assignment")
				return fail(spareUsage)
			}
			err := applyAssignment(fl, req.c, orig)
			if err != nil {
				req.reply <- errorf(http.StatusBadRequest, "assignment: %v", err)
				warn("assignment: %v", err)
				return fail(spareUsage)
			}
			// The staging server takes no more connections before the
			// answer: the caller's next one (Client.Assign's Info) waits in
			// the handoff for Main's server instead of being refused by
			// this one and retried.
			stage.Close()
			req.reply <- nil
			// Until the answer is written: the driver's Start returns on
			// it (once the replica's agent answers), and Main's set-up
			// would otherwise delay this goroutine's write by milliseconds
			// (it runs until COMMAND has started, and a busy process's
			// other goroutines wait for it).
			select {
			case <-req.written:
			case <-time.After(time.Second):
			}
			closeLink()
			// In the background: Shutdown closes the stage at once, so
			// new connections already go to Main's server, but waiting
			// for the answer to be written and its connection to go idle
			// (Shutdown polls) would delay COMMAND.
			go stop()
			return h.stage(true), -1
		case <-lost:
			// The driver is gone: nobody will ever assign this spare.
			return fail(0)
		case <-sigs:
			return fail(0)
		case <-ctx.Done():
			return fail(0)
		case err := <-served:
			warn("serving: %v", err)
			return fail(1)
		}
	}
}

// applyAssignment makes the spare the replica c describes.
func applyAssignment(fl *flag.FlagSet, c GuestConfig, orig []string) error {
	for _, kv := range c.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" || strings.IndexByte(kv, 0) >= 0 {
			return fmt.Errorf("bad environment entry %q", kv)
		}
	}
	for p := range c.Files {
		if !strings.HasPrefix(p, "/") {
			return fmt.Errorf("file path %q is not absolute", p)
		}
	}
	for _, a := range c.Args {
		if strings.IndexByte(a, 0) >= 0 {
			return errors.New("an argument holds a NUL byte")
		}
	}
	// Flags that only make sense at start: an assignment setting them is
	// a caller's mistake, not something to ignore.
	for _, name := range []string{"spare", "spare-fd", "spare-room", "vm-init", "config"} {
		if hasFlag(c.Args, name) {
			return fmt.Errorf("--%s cannot be assigned", name)
		}
	}
	var usage bytes.Buffer
	out := fl.Output()
	fl.SetOutput(&usage)
	err := fl.Parse(c.Args)
	fl.SetOutput(out)
	if err != nil {
		return err
	}
	if err := c.apply(); err != nil {
		return err
	}
	// Best effort: a command line that cannot be rewritten only makes ps
	// show the spare's.
	_ = rewriteArgs(orig, c.Args)
	return nil
}

// hasFlag reports whether args, parsed as flags, would set the flag name:
// a "-name" or "--name" token (with or without "=value") before "--".
func hasFlag(args []string, name string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		t := strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
		if t == a {
			continue
		}
		t, _, _ = strings.Cut(t, "=")
		if t == name {
			return true
		}
	}
	return false
}

// handoff shares one listener between the spare phase's server and, after
// the assignment, Main's: one goroutine accepts, and each stage takes the
// connections while it is open. A connection nobody took yet waits for the
// next stage.
type handoff struct {
	ln     net.Listener
	conns  chan net.Conn
	failed chan struct{} // closed when Accept fails for good
	err    error         // Accept's error, set before failed is closed
}

func newHandoff(ln net.Listener) *handoff {
	h := &handoff{ln: ln, conns: make(chan net.Conn), failed: make(chan struct{})}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				h.err = err
				close(h.failed)
				return
			}
			select {
			case h.conns <- c:
			case <-h.failed:
				c.Close()
				return
			}
		}
	}()
	return h
}

func (h *handoff) close() { h.ln.Close() }

// stage returns a listener taking connections from h. Closing a final
// stage closes the shared listener too.
func (h *handoff) stage(final bool) net.Listener {
	return &stageListener{h: h, final: final, closed: make(chan struct{})}
}

type stageListener struct {
	h      *handoff
	final  bool
	once   sync.Once
	closed chan struct{}
}

func (s *stageListener) Accept() (net.Conn, error) {
	select {
	case <-s.closed: // first: a closed stage takes nothing more
		return nil, net.ErrClosed
	default:
	}
	select {
	case c := <-s.h.conns:
		return c, nil
	case <-s.closed:
		return nil, net.ErrClosed
	case <-s.h.failed:
		return nil, s.h.err
	}
}

func (s *stageListener) Close() error {
	s.once.Do(func() {
		close(s.closed)
		if s.final {
			s.h.close()
		}
	})
	return nil
}

func (s *stageListener) Addr() net.Addr { return s.h.ln.Addr() }

// stagedHeader is set by a spare's answer to its assignment when it took
// no more connections before answering.
const stagedHeader = "Berth-Spare-Staging"

// Assign hands a spare agent (`berth agent --spare`) its replica: c's Args,
// Env, Hostname and Files, as described in the package documentation. It
// returns once the agent has taken them, before the hooks and COMMAND run.
func (c *Client) Assign(ctx context.Context, g GuestConfig) error {
	b, err := json.Marshal(g)
	if err != nil {
		return err
	}
	resp, err := c.send(ctx, "POST", "/v1/assign", nil, bytes.NewReader(b))
	if err != nil {
		return err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	c.Close() // the staging server's connection: the next goes to the replica's agent
	if resp.Header.Get(stagedHeader) == "closed" {
		// The spare stopped taking connections before it answered: every
		// later one waits for the replica's own agent, which is what a
		// round trip to it here would check (it would cost the Start of a
		// scale from zero a wake-up of each side).
		return nil
	}
	// An agent of an older berth: its staging server may still take a
	// connection and answer it 503. Wait (bounded) until the replica's
	// own agent answers.
	for range 10000 {
		c.Close()
		if _, err := c.Info(ctx); err == nil {
			c.Close()
			return nil
		} else if ctx.Err() != nil {
			return ctx.Err()
		}
		// Rarely reached: the spare's staging server stops taking
		// connections before it answers, so the first Info waits for
		// the replica's own server. Short: on the path of a scale from
		// zero.
		time.Sleep(100 * time.Microsecond)
	}
	c.Close()
	return nil
}
