package vmfake

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/berth-dev/berth/internal/vm"
	"mvdan.cc/sh/v3/expand"
	"mvdan.cc/sh/v3/interp"
	"mvdan.cc/sh/v3/syntax"
)

// shell runs the setup hooks, in order, then the start command in one
// interpreter, and returns the exit status, or an error when the
// interpreter itself failed (which makes the replica failed).
func (r *replica) shell(ctx context.Context, port int) (int, error) {
	stdout := &lineWriter{r: r, ctx: ctx, stream: "stdout"}
	stderr := &lineWriter{r: r, ctx: ctx, stream: "stderr"}
	defer stdout.flush()
	defer stderr.flush()

	env := vm.AppEnv([]string{"HOME=/", "PATH=/bin"}, r.spec.Env, port)
	sh, err := interp.New(
		interp.Env(expand.ListEnviron(env...)),
		interp.StdIO(nil, stdout, stderr),
		interp.ExecHandlers(func(interp.ExecHandlerFunc) interp.ExecHandlerFunc { return r.exec }),
		interp.OpenHandler(r.open),
		interp.StatHandler(r.stat),
		interp.ReadDirHandler2(func(context.Context, string) ([]fs.DirEntry, error) { return nil, nil }),
	)
	if err != nil {
		return 0, fmt.Errorf("vmfake: %w", err)
	}
	// Not interp.Dir, which wants the directory on the host.
	sh.Dir = "/"
	if r.spec.WorkDir != "" {
		sh.Dir = filepath.Clean("/" + r.spec.WorkDir)
	}

	command := r.spec.Command
	if strings.TrimSpace(command) == "" {
		command = "serve"
	}
	scripts := append(slices.Clone(r.spec.SetupHooks), command)
	for i, src := range scripts {
		hook := i < len(scripts)-1
		f, err := syntax.NewParser().Parse(strings.NewReader(src), "")
		if err != nil {
			fmt.Fprintf(stderr, "sh: %v\n", err)
			return 2, nil
		}
		var status error
		for _, stmt := range f.Stmts {
			status = sh.Run(ctx, stmt)
			if sh.Exited() {
				break
			}
		}
		code := 0
		if es, ok := errors.AsType[interp.ExitStatus](status); ok {
			code = int(es)
		} else if status != nil {
			return 0, status
		}
		if sh.Exited() || !hook {
			return code, nil
		}
		if code != 0 {
			fmt.Fprintf(stderr, "setup hook %d failed with exit status %d\n", i+1, code)
			return code, nil
		}
	}
	return 0, nil
}

// exec runs the commands that are not shell builtins.
func (r *replica) exec(ctx context.Context, args []string) error {
	hc := interp.HandlerCtx(ctx)
	switch args[0] {
	case "serve", "serve-env":
		return r.serve(ctx, hc, args[0] == "serve-env")
	case "sleep":
		var d time.Duration
		for _, a := range args[1:] {
			s, err := strconv.ParseFloat(strings.TrimSuffix(a, "s"), 64)
			if err != nil || s < 0 {
				fmt.Fprintf(hc.Stderr, "sleep: invalid time interval %q\n", a)
				return interp.ExitStatus(1)
			}
			d += time.Duration(s * float64(time.Second))
		}
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return r.thawed(ctx)
		case <-ctx.Done():
			return ctx.Err()
		}
	case "cat":
		for _, name := range args[1:] {
			b, err := r.read(hc.Dir, name)
			if err != nil {
				fmt.Fprintf(hc.Stderr, "cat: %s: No such file or directory\n", name)
				return interp.ExitStatus(1)
			}
			hc.Stdout.Write(b)
		}
		return nil
	}
	fmt.Fprintf(hc.Stderr, "%s: command not found\n", args[0])
	return interp.ExitStatus(127)
}

// serve answers HTTP until ctx ends (Stop, Exit, Crash, an expired lease).
func (r *replica) serve(ctx context.Context, hc interp.HandlerContext, env bool) error {
	a := &app{body: "ok\n"}
	if env {
		hook, _ := r.read(hc.Dir, "hook.txt")
		a.body = fmt.Sprintf("%s\n%s\n%s\n%s\n", hc.Env.Get("GREETING").String(), hc.Dir, strings.TrimSpace(string(hook)), token())
	}
	r.h.mu.Lock()
	r.app = a
	r.h.mu.Unlock()
	<-ctx.Done()
	r.h.mu.Lock()
	if r.app == a {
		r.app = nil
	}
	r.h.mu.Unlock()
	return ctx.Err()
}

func abs(dir, name string) string {
	if filepath.IsAbs(name) {
		return filepath.Clean(name)
	}
	return filepath.Join(dir, name)
}

func (r *replica) read(dir, name string) ([]byte, error) {
	r.h.mu.Lock()
	defer r.h.mu.Unlock()
	b, ok := r.files[abs(dir, name)]
	if !ok {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	return slices.Clone(b), nil
}

// open opens a file of the replica's file system in memory. Writes append
// (after truncation, for ">"), which is all redirections need.
func (r *replica) open(ctx context.Context, name string, flag int, perm os.FileMode) (io.ReadWriteCloser, error) {
	if name == "/dev/null" {
		return devNull{}, nil
	}
	p := abs(interp.HandlerCtx(ctx).Dir, name)
	r.h.mu.Lock()
	defer r.h.mu.Unlock()
	b, ok := r.files[p]
	if !ok && flag&os.O_CREATE == 0 {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	if !ok || flag&os.O_TRUNC != 0 {
		b = nil
		r.files[p] = b
	}
	return &memFile{r: r, path: p, rd: bytes.NewReader(slices.Clone(b))}, nil
}

func (r *replica) stat(ctx context.Context, name string, _ bool) (fs.FileInfo, error) {
	p := abs(interp.HandlerCtx(ctx).Dir, name)
	r.h.mu.Lock()
	defer r.h.mu.Unlock()
	if b, ok := r.files[p]; ok {
		return fileInfo{name: filepath.Base(p), size: int64(len(b))}, nil
	}
	return nil, &fs.PathError{Op: "stat", Path: name, Err: fs.ErrNotExist}
}

type memFile struct {
	r    *replica
	path string
	rd   *bytes.Reader
}

func (f *memFile) Read(p []byte) (int, error) { return f.rd.Read(p) }

func (f *memFile) Write(p []byte) (int, error) {
	f.r.h.mu.Lock()
	defer f.r.h.mu.Unlock()
	f.r.files[f.path] = append(f.r.files[f.path], p...)
	return len(p), nil
}

func (f *memFile) Close() error { return nil }

type devNull struct{}

func (devNull) Read([]byte) (int, error)    { return 0, io.EOF }
func (devNull) Write(p []byte) (int, error) { return len(p), nil }
func (devNull) Close() error                { return nil }

type fileInfo struct {
	name string
	size int64
}

func (fi fileInfo) Name() string       { return fi.name }
func (fi fileInfo) Size() int64        { return fi.size }
func (fi fileInfo) Mode() fs.FileMode  { return 0o644 }
func (fi fileInfo) ModTime() time.Time { return time.Time{} }
func (fi fileInfo) IsDir() bool        { return false }
func (fi fileInfo) Sys() any           { return nil }

// lineWriter turns a stream into log lines.
type lineWriter struct {
	r      *replica
	ctx    context.Context // the replica's: a frozen write ends with it
	stream string
	mu     sync.Mutex
	buf    []byte
}

func (w *lineWriter) Write(p []byte) (int, error) {
	if err := w.r.thawed(w.ctx); err != nil {
		return 0, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		w.r.logLine(w.stream, string(w.buf[:i]))
		w.buf = w.buf[i+1:]
	}
}

func (w *lineWriter) flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.buf) > 0 {
		w.r.logLine(w.stream, string(w.buf))
		w.buf = nil
	}
}
