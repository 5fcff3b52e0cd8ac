package container

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"

	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/console"
)

// Logs returns up to n of the replica's most recent output lines (all when
// n <= 0), oldest first, from output.log and its rotated predecessor.
func (d *Driver) Logs(ctx context.Context, id string, n int) ([]vm.LogLine, error) {
	if _, err := d.rd.Load(id); err != nil {
		return nil, err
	}
	lines, err := console.ReadRotated(d.path(id, runDir, logFile), n)
	if err != nil {
		return nil, fmt.Errorf("container: logs of %s: %w", id, err)
	}
	return lines, nil
}

// followPoll is how often FollowLogs looks for new output.
const followPoll = 100 * time.Millisecond

// FollowLogs writes the replica's output lines to w as they are written,
// starting with the next one, each as a JSON line in the agent's log
// format, across rotation. It returns nil when ctx ends or once the
// replica has ended and its output is written, and an error wrapping
// vm.ErrNotFound if the replica is stopped meanwhile.
func (d *Driver) FollowLogs(ctx context.Context, id string, w io.Writer) error {
	if _, err := d.rd.Load(id); err != nil {
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
				if _, ok := console.AppLine(line[:i]); ok {
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
		st, err := d.rd.Load(id)
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
