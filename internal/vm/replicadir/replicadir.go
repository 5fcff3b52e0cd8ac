// Package replicadir is the per-replica state directory every local driver
// keeps: <Root>/<id>/ with a state.json holding what re-adoption needs. It
// validates ids (a replica name berth gives, safe as one path element),
// writes the state atomically, loads one replica's state and lists them all.
// What else lives in a replica directory is the driver's own.
package replicadir

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/proc"
)

// StateFile is the name of a replica's state inside its directory.
const StateFile = "state.json"

// ValidID reports whether id is a replica name berth gives and is safe as a
// single path element (and, having no commas, in QEMU's option syntax).
func ValidID(id string) bool {
	if _, ok := vm.Owner(id); !ok {
		return false
	}
	for _, c := range id {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// WriteAtomic replaces dir/name by rename, so no reader sees half of it.
func WriteAtomic(dir, name string, b []byte, perm fs.FileMode) error {
	tmp, err := os.CreateTemp(dir, "."+name+".tmp-*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(b)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil && perm != 0o600 {
		err = os.Chmod(tmp.Name(), perm)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), filepath.Join(dir, name))
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}

// WriteState replaces the state file of the replica directory dir.
func WriteState(dir string, st any) error {
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	return WriteAtomic(dir, StateFile, b, 0o600)
}

// Dir is a driver's root of replica directories; S is its state type.
type Dir[S any] struct {
	// Root is the directory holding one directory per replica.
	Root string
	// Driver names the driver in errors and log lines ("process").
	Driver string
	// Log receives replicas skipped by States (a corrupt state file).
	Log *slog.Logger
	// ID is the replica id a state records.
	ID func(S) string
	// Empty is the state of a replica whose directory has no state file
	// yet (a start interrupted before it wrote one); its pid is 0.
	Empty func(id, deployment string) S
}

// Path is a path inside replica id's directory (the directory itself
// without names).
func (d *Dir[S]) Path(id string, name ...string) string {
	return filepath.Join(append([]string{d.Root, id}, name...)...)
}

// NotFound is the error for an unknown replica id.
func (d *Dir[S]) NotFound(id string) error {
	return fmt.Errorf("%s: %q: %w", d.Driver, id, vm.ErrNotFound)
}

// Exists reports whether id is valid and has a directory.
func (d *Dir[S]) Exists(id string) bool {
	if !ValidID(id) {
		return false
	}
	fi, err := os.Stat(d.Path(id))
	return err == nil && fi.IsDir()
}

// Load reads a replica's state. It returns an error wrapping vm.ErrNotFound
// for an invalid id or one without a directory.
func (d *Dir[S]) Load(id string) (S, error) {
	var zero S
	if !ValidID(id) {
		return zero, d.NotFound(id)
	}
	b, err := os.ReadFile(d.Path(id, StateFile))
	if errors.Is(err, fs.ErrNotExist) {
		if _, err := os.Stat(d.Path(id)); err != nil {
			return zero, fmt.Errorf("%s: %s: %w", d.Driver, id, vm.ErrNotFound)
		}
		owner, _ := vm.Owner(id)
		return d.Empty(id, owner), nil
	}
	if err != nil {
		return zero, fmt.Errorf("%s: %s: %w", d.Driver, id, err)
	}
	var st S
	if err := json.Unmarshal(b, &st); err != nil {
		return zero, fmt.Errorf("%s: %s: corrupt %s: %w", d.Driver, id, StateFile, err)
	}
	if got := d.ID(st); got != id {
		return zero, fmt.Errorf("%s: %s: %s names %q", d.Driver, id, StateFile, got)
	}
	return st, nil
}

// States loads every replica under Root, skipping (and logging) those whose
// state cannot be read.
func (d *Dir[S]) States() ([]S, error) {
	ents, err := os.ReadDir(d.Root)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", d.Driver, err)
	}
	var sts []S
	for _, e := range ents {
		if !e.IsDir() || !ValidID(e.Name()) {
			continue
		}
		st, err := d.Load(e.Name())
		if err != nil {
			if !errors.Is(err, vm.ErrNotFound) && d.Log != nil {
				d.Log.Warn(d.Driver+": skipping replica", "id", e.Name(), "err", err)
			}
			continue
		}
		sts = append(sts, st)
	}
	return sts, nil
}

// Inspect loads replica id and describes it with instance.
func (d *Dir[S]) Inspect(id string, instance func(S) vm.Instance) (vm.Instance, error) {
	st, err := d.Load(id)
	if err != nil {
		return vm.Instance{}, err
	}
	return instance(st), nil
}

// List describes every replica under Root with instance.
func (d *Dir[S]) List(instance func(S) vm.Instance) ([]vm.Instance, error) {
	sts, err := d.States()
	if err != nil {
		return nil, err
	}
	insts := make([]vm.Instance, 0, len(sts))
	for _, st := range sts {
		insts = append(insts, instance(st))
	}
	return insts, nil
}

// TailLines is how many output lines a failure Reason ends with.
const TailLines = 5

// WithTail appends the last output lines of a replica to a Reason.
func WithTail(reason string, tail []string) string {
	if len(tail) == 0 {
		return reason
	}
	return reason + "; last output:\n" + strings.Join(tail, "\n")
}

// LastLines is the last n lines of s.
func LastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// waitPoll is how often Wait looks at a replica that has no process to
// wait on (one being started, or suspended to disk).
const waitPoll = 50 * time.Millisecond

// Wait is vm.Waiter's Wait for a driver whose replica runs while one host
// process does (its agent, its container's init, its VMM), which process
// names: it waits on that process (a pidfd, not a poll) and returns once
// instance reports the replica terminal. A replica that goes away meanwhile
// (stopped) ends the wait with an error wrapping vm.ErrNotFound.
func (d *Dir[S]) Wait(ctx context.Context, id string, instance func(S) vm.Instance, process func(S) (pid int, startTicks uint64)) (vm.Instance, error) {
	for {
		st, err := d.Load(id)
		if err != nil {
			return vm.Instance{}, err
		}
		inst := instance(st)
		if inst.State.Terminal() {
			return inst, nil
		}
		if pid, ticks := process(st); proc.Alive(pid, ticks) {
			if err := proc.Wait(ctx, pid, ticks); err != nil {
				return vm.Instance{}, err
			}
			continue
		}
		select {
		case <-ctx.Done():
			return vm.Instance{}, ctx.Err()
		case <-time.After(waitPoll):
		}
	}
}
