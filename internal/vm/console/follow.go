package console

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"time"
)

// followPoll is how often Follow and FollowRotated look for new output.
const followPoll = 100 * time.Millisecond

// tailer reads the complete lines a growing file has.
type tailer struct {
	f       *os.File
	pending []byte // a line not terminated yet
	buf     []byte
}

func newTailer(f *os.File) *tailer { return &tailer{f: f, buf: make([]byte, 64<<10)} }

// drain hands emit every complete line (with its "\n") the file has now,
// and reports whether emit wrote any.
func (t *tailer) drain(emit func(line []byte) (bool, error)) (bool, error) {
	wrote := false
	for {
		n, err := t.f.Read(t.buf)
		t.pending = append(t.pending, t.buf[:n]...)
		for {
			i := bytes.IndexByte(t.pending, '\n')
			if i < 0 {
				break
			}
			ok, werr := emit(t.pending[:i+1])
			if werr != nil {
				return wrote, werr
			}
			wrote = wrote || ok
			t.pending = t.pending[i+1:]
		}
		if n == 0 || err == io.EOF {
			return wrote, nil
		}
		if err != nil {
			return wrote, err
		}
	}
}

// Follow writes the app's lines to w as they reach the console at path,
// starting with the next one, each as a JSON line
// {"t":"<RFC3339Nano>","s":"stdout"|"stderr","m":"<text>"} (the agent's log
// format). Whenever a poll finds nothing new it asks ended: true means the
// guest is done, and Follow writes what is left and returns; an error from
// ended is returned as it is. Follow returns nil when ctx ends.
func Follow(ctx context.Context, path string, w io.Writer, ended func() (bool, error)) error {
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.Seek(0, io.SeekEnd); err != nil {
		return err
	}
	t := newTailer(f)
	emit := func(line []byte) (bool, error) {
		l, ok := AppLine(line[:len(line)-1])
		if !ok {
			return false, nil
		}
		b, _ := json.Marshal(Entry{T: l.Time, S: l.Stream, M: l.Text})
		_, err := w.Write(append(b, '\n'))
		return true, err
	}
	tick := time.NewTicker(followPoll)
	defer tick.Stop()
	for {
		wrote, err := t.drain(emit)
		if err != nil {
			return err
		}
		if !wrote {
			done, err := ended()
			if err != nil {
				return err
			}
			if done {
				_, err := t.drain(emit)
				return err
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// FollowRotated is Follow for an agent log file of its own (output.log,
// which the agent rotates to output.log.1; the process and container
// drivers): it writes the app's lines as the agent wrote them, starting
// with the next one, and follows the log across rotation and truncation.
// A log not written yet is waited for (and then all of it is new).
func FollowRotated(ctx context.Context, path string, w io.Writer, ended func() (bool, error)) error {
	var t *tailer
	defer func() {
		if t != nil {
			t.f.Close()
		}
	}()
	// open (re)opens the log; at the first opening it skips to the end,
	// so only new output is written.
	first := true
	open := func() error {
		nf, err := os.Open(path)
		if errors.Is(err, fs.ErrNotExist) {
			// Not written yet: retry at the next poll, and then every
			// line is new.
			first = false
			return nil
		}
		if err != nil {
			return err
		}
		if first {
			if _, err := nf.Seek(0, io.SeekEnd); err != nil {
				nf.Close()
				return err
			}
		}
		first = false
		if t != nil {
			t.f.Close()
		}
		t = newTailer(nf)
		return nil
	}
	emit := func(line []byte) (bool, error) {
		if _, ok := AppLine(line[:len(line)-1]); !ok {
			return false, nil
		}
		_, err := w.Write(line)
		return true, err
	}
	tick := time.NewTicker(followPoll)
	defer tick.Stop()
	for {
		if t == nil {
			if err := open(); err != nil {
				return err
			}
		}
		if t != nil {
			wrote, err := t.drain(emit)
			if err != nil {
				return err
			}
			// Rotated (a new file at path) or truncated: the old file was
			// drained above, continue with the new one from its start.
			cur, errCur := os.Stat(path)
			fi, errF := t.f.Stat()
			if errCur == nil && errF == nil {
				if pos, err := t.f.Seek(0, io.SeekCurrent); !os.SameFile(cur, fi) || err == nil && cur.Size() < pos {
					// Lines the agent wrote before it switched files.
					if _, err := t.drain(emit); err != nil {
						return err
					}
					if err := open(); err != nil {
						return err
					}
					continue
				}
			}
			if !wrote {
				done, err := ended()
				if err != nil {
					return err
				}
				if done {
					// The agent wrote its last line before the exit file.
					_, err := t.drain(emit)
					return err
				}
			}
		} else if done, err := ended(); err != nil {
			return err
		} else if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}
