package container

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"

	"github.com/berth-dev/berth/internal/vm"
)

// logEntry is one line of the agent's log (see the agent contract).
type logEntry struct {
	T time.Time `json:"t"`
	S string    `json:"s"`
	M string    `json:"m"`
}

// appLine parses one log line, keeping only the app's output.
func appLine(b []byte) (vm.LogLine, bool) {
	var e logEntry
	if json.Unmarshal(b, &e) != nil || e.S != "stdout" && e.S != "stderr" {
		return vm.LogLine{}, false
	}
	return vm.LogLine{Time: e.T, Stream: e.S, Text: e.M}, true
}

// Logs returns up to n of the replica's most recent output lines (all when
// n <= 0), oldest first, from output.log and its rotated predecessor.
func (d *Driver) Logs(ctx context.Context, id string, n int) ([]vm.LogLine, error) {
	if _, err := d.load(id); err != nil {
		return nil, err
	}
	lines, err := readLogs(d.path(id, runDir, logFile), n)
	if err != nil {
		return nil, fmt.Errorf("container: logs of %s: %w", id, err)
	}
	return lines, nil
}

// readLogs returns the last n lines (all when n <= 0) of a log and its
// rotated predecessor.
func readLogs(path string, n int) ([]vm.LogLine, error) {
	cur, err := readLogFile(path, n)
	if err != nil {
		return nil, err
	}
	if n > 0 && len(cur) >= n {
		return cur[len(cur)-n:], nil
	}
	want := 0
	if n > 0 {
		want = n - len(cur)
	}
	old, err := readLogFile(path+".1", want)
	if err != nil {
		return nil, err
	}
	return append(old, cur...), nil
}

// readLogFile returns the last n app lines of one file (all when n <= 0),
// reading backwards in growing chunks. A missing file has no lines.
func readLogFile(path string, n int) ([]vm.LogLine, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	size := fi.Size()
	chunk := int64(64 << 10)
	if n <= 0 {
		chunk = size
	}
	for {
		off := max(0, size-chunk)
		buf := make([]byte, size-off)
		if _, err := f.ReadAt(buf, off); err != nil && err != io.EOF {
			return nil, err
		}
		if off > 0 {
			if i := bytes.IndexByte(buf, '\n'); i >= 0 {
				buf = buf[i+1:]
			} else {
				buf = nil
			}
		}
		var lines []vm.LogLine
		for len(buf) > 0 {
			i := bytes.IndexByte(buf, '\n')
			if i < 0 {
				break // an unterminated last line is still being written
			}
			if l, ok := appLine(buf[:i]); ok {
				lines = append(lines, l)
			}
			buf = buf[i+1:]
		}
		if n > 0 && len(lines) >= n || off == 0 {
			if n > 0 && len(lines) > n {
				lines = lines[len(lines)-n:]
			}
			return lines, nil
		}
		chunk *= 4
	}
}

// followPoll is how often FollowLogs looks for new output.
const followPoll = 100 * time.Millisecond

// FollowLogs writes the replica's output lines to w as they are written,
// starting with the next one, each as a JSON line in the agent's log
// format, across rotation. It returns nil when ctx ends or once the
// replica has ended and its output is written, and an error wrapping
// vm.ErrNotFound if the replica is stopped meanwhile.
func (d *Driver) FollowLogs(ctx context.Context, id string, w io.Writer) error {
	if _, err := d.load(id); err != nil {
		return err
	}
	path := d.path(id, runDir, logFile)
	var (
		f       *os.File
		pending []byte
	)
	defer func() {
		if f != nil {
			f.Close()
		}
	}()
	first := true
	open := func() error {
		nf, err := os.Open(path)
		if errors.Is(err, fs.ErrNotExist) {
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
		if f != nil {
			f.Close()
		}
		f, pending = nf, nil
		return nil
	}
	buf := make([]byte, 64<<10)
	drain := func() (bool, error) {
		wrote := false
		for {
			n, err := f.Read(buf)
			pending = append(pending, buf[:n]...)
			for {
				i := bytes.IndexByte(pending, '\n')
				if i < 0 {
					break
				}
				line := pending[:i+1]
				if _, ok := appLine(line[:i]); ok {
					if _, err := w.Write(line); err != nil {
						return wrote, err
					}
					wrote = true
				}
				pending = pending[i+1:]
			}
			if err == io.EOF || n == 0 {
				return wrote, nil
			}
			if err != nil {
				return wrote, err
			}
		}
	}
	ended := func() (bool, error) {
		st, err := d.load(id)
		if err != nil {
			return false, err
		}
		return d.instance(st).State.Terminal(), nil
	}
	tick := time.NewTicker(followPoll)
	defer tick.Stop()
	for {
		if f == nil {
			if err := open(); err != nil {
				return fmt.Errorf("container: logs of %s: %w", id, err)
			}
		}
		if f != nil {
			wrote, err := drain()
			if err != nil {
				return fmt.Errorf("container: logs of %s: %w", id, err)
			}
			cur, errCur := os.Stat(path)
			fi, errF := f.Stat()
			if errCur == nil && errF == nil {
				if pos, err := f.Seek(0, io.SeekCurrent); !os.SameFile(cur, fi) || err == nil && cur.Size() < pos {
					if _, err := drain(); err != nil {
						return fmt.Errorf("container: logs of %s: %w", id, err)
					}
					if err := open(); err != nil {
						return fmt.Errorf("container: logs of %s: %w", id, err)
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
					if _, err := drain(); err != nil {
						return fmt.Errorf("container: logs of %s: %w", id, err)
					}
					return nil
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
