package build

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// stopGrace is how long a program stopped by its context has between
// SIGTERM (buildah then removes its working containers) and SIGKILL.
const stopGrace = 10 * time.Second

// maxOutput caps the standard output output keeps (a hash, a JSON
// configuration).
const maxOutput = 4 << 20

// command makes a command in a process group of its own, so that stopping
// it (its context ending) stops what it started too.
func command(ctx context.Context, name string, args, env []string, dir string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env, cmd.Dir = env, dir
	cmd.WaitDelay = stopGrace
	inGroup(cmd)
	return cmd
}

// run runs a program, its standard output and error logged line by line.
func run(ctx context.Context, lg *logger, name string, args, env []string, dir string) error {
	pr, pw := io.Pipe()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		lg.copyLines(pr)
		_, _ = io.Copy(io.Discard, pr)
	}()
	cmd := command(ctx, name, args, env, dir)
	cmd.Stdout, cmd.Stderr = pw, pw
	err := cmd.Run()
	killGroup(cmd)
	pw.Close()
	wg.Wait()
	return runErr(ctx, name, args, err)
}

// output runs a program and returns its standard output; its standard
// error is logged.
func output(ctx context.Context, lg *logger, name string, args, env []string, dir string) (string, error) {
	pr, pw := io.Pipe()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		lg.copyLines(pr)
		_, _ = io.Copy(io.Discard, pr)
	}()
	var out capBuffer
	cmd := command(ctx, name, args, env, dir)
	cmd.Stdout, cmd.Stderr = &out, pw
	err := cmd.Run()
	killGroup(cmd)
	pw.Close()
	wg.Wait()
	if err == nil && out.over {
		err = fmt.Errorf("more than %d bytes of output", maxOutput)
	}
	return out.String(), runErr(ctx, name, args, err)
}

// runErr names the program and its first arguments in err, and says when
// it was stopped because the build's time ran out.
func runErr(ctx context.Context, name string, args []string, err error) error {
	if err == nil {
		return nil
	}
	what := filepath.Base(name)
	for i := 0; i < len(args); i++ {
		if globalWithValue[args[i]] {
			i++ // and its value: a path, not the subcommand
			continue
		}
		if !strings.HasPrefix(args[i], "-") {
			what += " " + args[i]
			break
		}
	}
	if c := context.Cause(ctx); c != nil {
		if errors.Is(c, context.DeadlineExceeded) {
			return fmt.Errorf("%s: the build's time ran out: %w", what, c)
		}
		return fmt.Errorf("%s: stopped: %w", what, c)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// globalWithValue are the options before git's and buildah's subcommands
// that take a value.
var globalWithValue = map[string]bool{"-C": true, "--storage-driver": true, "--root": true, "--runroot": true}

// capBuffer keeps the first maxOutput bytes written to it.
type capBuffer struct {
	bytes.Buffer
	over bool
}

func (b *capBuffer) Write(p []byte) (int, error) {
	if room := maxOutput - b.Len(); len(p) > room {
		b.over = true
		if room > 0 {
			b.Buffer.Write(p[:room])
		}
		return len(p), nil
	}
	return b.Buffer.Write(p)
}
