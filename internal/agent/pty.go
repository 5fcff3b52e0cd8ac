package agent

import (
	"context"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/creack/pty"
)

// ptyDrain bounds how long a PTY's output is read after its command exits,
// for when a background job still holds the terminal open.
const ptyDrain = time.Second

func (s *Server) handlePTY(w http.ResponseWriter, r *http.Request) {
	s.sessions.Add(1)
	defer s.sessions.Done()
	var req PTYRequest
	ss := s.accept(w, r, &req)
	if ss == nil {
		return
	}
	defer ss.c.CloseNow()
	sctx := r.Context()
	if err := checkSize(req.Cols, req.Rows); err != nil {
		ss.fail(sctx, err)
		return
	}
	if req.Cols == 0 && req.Rows == 0 {
		req.Cols, req.Rows = 80, 24
	}
	if len(req.Argv) == 0 && req.Command == "" {
		req.Argv = []string{defaultShell()}
	}
	// The terminal is the client's, so the agent's own TERM (from whatever
	// started it) does not describe it.
	env := map[string]string{"TERM": "xterm-256color"}
	for k, v := range req.Env {
		env[k] = v
	}
	ctx, cancel := context.WithCancel(sctx)
	defer cancel()
	cmd, err := s.command(ctx, req.Argv, req.Command, req.Cwd, env)
	if err != nil {
		ss.fail(sctx, err)
		return
	}
	ptmx, tty, err := pty.Open()
	if err != nil {
		ss.fail(sctx, errorf(http.StatusInternalServerError, "cannot open a pty: %v", err))
		return
	}
	defer ptmx.Close()
	if err := pty.Setsize(ptmx, &pty.Winsize{Cols: uint16(req.Cols), Rows: uint16(req.Rows)}); err != nil {
		tty.Close()
		ss.fail(sctx, errorf(http.StatusInternalServerError, "cannot size the pty: %v", err))
		return
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	// A session of its own with the pty as controlling terminal; the
	// session leader leads the process group that signals and kills reach.
	setSession(cmd)
	err = children.start(cmd)
	tty.Close() // the child has its copy; EIO on ptmx then means it is gone
	if err != nil {
		s.opts.Logf("pty %q: %v", cmd.Args, err)
		ss.fail(sctx, errorf(http.StatusUnprocessableEntity, "cannot start command: %v", err))
		return
	}
	go ss.readLoop(sctx, cancel, nopCloser{ptmx}, nil, func(m Control) error {
		if m.Type == CtlResize {
			if err := checkSize(m.Cols, m.Rows); err != nil || m.Cols == 0 {
				return errorf(http.StatusBadRequest, "bad terminal size %dx%d", m.Cols, m.Rows)
			}
			return pty.Setsize(ptmx, &pty.Winsize{Cols: uint16(m.Cols), Rows: uint16(m.Rows)})
		}
		return signalControl(cmd, m)
	})
	out := make(chan struct{})
	go func() {
		defer close(out)
		// Reading ends with EIO once every holder of the terminal is gone.
		_, _ = io.Copy(frameWriter{sctx, ss.c, ChanStdout}, ptmx)
	}()
	_ = children.wait(cmd)
	select {
	case <-out:
	case <-time.After(ptyDrain):
		ptmx.Close()
		<-out
	}
	ss.exit(sctx, cmd, false)
}

// nopCloser keeps CtlEOF from closing the terminal: in a PTY, end of input
// is the terminal's EOF character, which the client sends as data.
type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

func checkSize(cols, rows int) error {
	if cols < 0 || rows < 0 || cols > 0xffff || rows > 0xffff {
		return errorf(http.StatusBadRequest, "terminal size %dx%d out of range", cols, rows)
	}
	if (cols == 0) != (rows == 0) {
		return errorf(http.StatusBadRequest, "set both cols and rows, or neither")
	}
	return nil
}

func defaultShell() string {
	if sh := os.Getenv("SHELL"); sh != "" {
		if _, err := os.Stat(sh); err == nil {
			return sh
		}
	}
	return "/bin/sh"
}
