package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"sync"
	"time"
)

// Options configure a Server.
type Options struct {
	// Root, when set, confines every path of the files endpoints beneath
	// this directory (with os.Root: neither ".." nor symlinks escape it);
	// client paths are then absolute paths inside Root. Exec and PTY are
	// not confined by it. When empty, paths are used as given and the
	// sandbox itself is the wall.
	Root string
	// Dir is the working directory of commands whose request has no cwd
	// (and the base of a relative cwd); empty means the agent's own.
	Dir string
	// StateDir holds the output files of background processes
	// (/v1/processes); empty means a new temporary directory.
	StateDir string
	// Version is reported by /v1/info; empty means the build's module
	// version.
	Version string
	// LeaseFile is the agent's --lease-file, which PUT /v1/lease
	// rewrites: the host's way to move the lease deadline even when the
	// files endpoints are confined to a Root the file lies outside (a VM
	// guest with a workspace). Empty: /v1/lease answers 404.
	LeaseFile string
	// Logf, if set, receives one line per notable event (a command that
	// could not start, a session that ended badly). Nil discards them.
	Logf func(format string, args ...any)
}

// Server serves the agent protocol. Create it with NewServer.
type Server struct {
	opts    Options
	started time.Time
	hs      *http.Server

	// ctx is the parent of every request and session; cancelling it kills
	// every running command. Shutdown cancels it when its grace runs out.
	ctx    context.Context
	cancel context.CancelFunc

	sessions sync.WaitGroup // websocket sessions, which http.Server does not track

	procs procTable // background processes (/v1/processes)
}

// NewServer returns a Server for o. It does no I/O.
func NewServer(o Options) *Server {
	if o.Version == "" {
		o.Version = buildVersion()
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	s := &Server{opts: o, started: time.Now().UTC()}
	s.procs = procTable{dirOpt: o.StateDir, procs: make(map[string]*bgProc)}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.hs = &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       5 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		BaseContext:       func(net.Listener) context.Context { return s.ctx },
	}
	return s
}

func buildVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "dev"
}

// Serve accepts connections on ln until Shutdown or Close; it returns
// http.ErrServerClosed after those.
func (s *Server) Serve(ln net.Listener) error { return s.hs.Serve(ln) }

// Shutdown stops accepting connections and waits for running requests and
// sessions to finish. When ctx ends first it kills every running command,
// closes every connection and returns ctx's error.
func (s *Server) Shutdown(ctx context.Context) error {
	// Once http.Server.Shutdown returns no handler can start, so waiting
	// for the sessions (hijacked, hence not waited for by it) is safe.
	err := s.hs.Shutdown(ctx)
	// Background processes belong to no request: stop them politely too.
	s.procs.stopAll(ctx)
	if err == nil {
		done := make(chan struct{})
		go func() {
			s.sessions.Wait()
			close(done)
		}()
		select {
		case <-done:
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	if err != nil {
		s.Close()
	}
	return err
}

// Close kills every running command and closes every connection at once.
func (s *Server) Close() error {
	s.cancel()
	return s.hs.Close()
}

// Handler returns the protocol's HTTP handler, for serving it on a
// listener of the caller's choosing (or in tests).
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	// Methods are dispatched here rather than in mux patterns so that a
	// wrong method is answered with a JSON 405 like every other error.
	route := func(path string, byMethod map[string]http.HandlerFunc) {
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			h, ok := byMethod[r.Method]
			if !ok && r.Method == http.MethodHead {
				h, ok = byMethod[http.MethodGet]
			}
			if !ok {
				writeError(w, http.StatusMethodNotAllowed, fmt.Sprintf("method %s not allowed on %s", r.Method, path))
				return
			}
			h(w, r)
		})
	}
	route("/v1/info", map[string]http.HandlerFunc{"GET": s.handleInfo})
	route("/v1/exec", map[string]http.HandlerFunc{"POST": s.handleExec})
	route("/v1/exec/stream", map[string]http.HandlerFunc{"GET": s.handleExecStream})
	route("/v1/pty", map[string]http.HandlerFunc{"GET": s.handlePTY})
	route("/v1/files", map[string]http.HandlerFunc{"GET": s.handleReadFile, "PUT": s.handleWriteFile, "DELETE": s.handleRemove})
	route("/v1/files/stat", map[string]http.HandlerFunc{"GET": s.handleStat})
	route("/v1/files/list", map[string]http.HandlerFunc{"GET": s.handleList})
	route("/v1/files/mkdir", map[string]http.HandlerFunc{"POST": s.handleMkdir})
	route("/v1/files/read", map[string]http.HandlerFunc{"POST": serveJSON(s.readText)})
	route("/v1/files/write", map[string]http.HandlerFunc{"POST": serveJSON(s.write)})
	route("/v1/files/glob", map[string]http.HandlerFunc{"POST": serveJSON(s.glob)})
	route("/v1/files/grep", map[string]http.HandlerFunc{"POST": serveJSON(s.grep)})
	route("/v1/files/edit", map[string]http.HandlerFunc{"POST": serveJSON(s.edit)})
	route("/v1/files/patch", map[string]http.HandlerFunc{"POST": serveJSON(s.patch)})
	route("/v1/processes", map[string]http.HandlerFunc{"GET": s.handleListProcesses, "POST": s.handleStartProcess})
	route("/v1/processes/", map[string]http.HandlerFunc{"GET": s.handleProcessGet, "DELETE": s.handleKillProcess})
	route("/v1/lease", map[string]http.HandlerFunc{"PUT": s.handleLease})
	// Only a spare (spare.go) takes assignments; every other agent has
	// its replica.
	route("/v1/assign", map[string]http.HandlerFunc{"POST": func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusConflict, "this agent is not a spare: it has its replica already")
	}})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no endpoint %s %s (protocol %d)", r.Method, r.URL.Path, ProtocolVersion))
	})
	return mux
}

func (s *Server) handleInfo(w http.ResponseWriter, r *http.Request) {
	host, _ := os.Hostname()
	writeJSON(w, http.StatusOK, Info{
		Version:   s.opts.Version,
		Protocol:  ProtocolVersion,
		PID:       os.Getpid(),
		Hostname:  host,
		StartedAt: s.started,
	})
}

// httpError is an error with the status it is answered with.
type httpError struct {
	status int
	msg    string
}

func (e *httpError) Error() string { return e.msg }

func errorf(status int, format string, args ...any) error {
	return &httpError{status, fmt.Sprintf(format, args...)}
}

// maxJSONBody bounds request bodies decoded as JSON; exec requests carry
// stdin inline, so it is generous.
const maxJSONBody = 64 << 20

// decodeJSON reads one JSON value from r's body into v.
func decodeJSON(w http.ResponseWriter, r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxJSONBody))
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return errorf(http.StatusRequestEntityTooLarge, "request body over %d bytes", mbe.Limit)
		}
		if errors.Is(err, io.EOF) {
			return errorf(http.StatusBadRequest, "empty request body; want a JSON object")
		}
		return errorf(http.StatusBadRequest, "malformed JSON body: %v", err)
	}
	if dec.More() {
		return errorf(http.StatusBadRequest, "malformed JSON body: data after the object")
	}
	return nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, errorBody{Error: msg})
}

// writeErr answers err with its own status, or 500.
func writeErr(w http.ResponseWriter, err error) {
	var he *httpError
	if errors.As(err, &he) {
		writeError(w, he.status, he.msg)
		return
	}
	writeError(w, http.StatusInternalServerError, err.Error())
}
