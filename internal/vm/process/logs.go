package process

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/console"
)

// Logs returns up to n of the replica's most recent output lines (all of
// them when n <= 0), oldest first, from output.log and its rotated
// predecessor output.log.1.
func (d *Driver) Logs(ctx context.Context, id string, n int) ([]vm.LogLine, error) {
	if _, err := d.rd.Load(id); err != nil {
		return nil, err
	}
	lines, err := console.ReadRotated(d.path(id, logFile), n)
	if err != nil {
		return nil, fmt.Errorf("process: logs of %s: %w", id, err)
	}
	return lines, nil
}

// followPoll is how often FollowLogs looks for new output.
const followPoll = 100 * time.Millisecond

// FollowLogs writes the replica's output lines to w as they are written,
// starting with the next one: each as a JSON line
// {"t":"<RFC3339Nano>","s":"stdout"|"stderr","m":"<text>"}, the agent's
// log format. It follows the log across rotation. It returns nil when ctx
// ends or once the replica has ended and all its output was written, and an
// error wrapping vm.ErrNotFound if the replica is stopped meanwhile.
func (d *Driver) FollowLogs(ctx context.Context, id string, w io.Writer) error {
	if _, err := d.rd.Load(id); err != nil {
		return err
	}
	path := d.path(id, logFile)
	var (
		f       *os.File
		pending []byte // a line not terminated yet
	)
	defer func() {
		if f != nil {
			f.Close()
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
		if f != nil {
			f.Close()
		}
		f, pending = nf, nil
		return nil
	}
	// drain writes every complete line that f has now.
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
	tick := time.NewTicker(followPoll)
	defer tick.Stop()
	for {
		if f == nil {
			if err := open(); err != nil {
				return fmt.Errorf("process: logs of %s: %w", id, err)
			}
		}
		if f != nil {
			wrote, err := drain()
			if err != nil {
				return fmt.Errorf("process: logs of %s: %w", id, err)
			}
			// Rotated (a new file at path) or truncated: the old file was
			// drained above, continue with the new one from its start.
			cur, errCur := os.Stat(path)
			fi, errF := f.Stat()
			if errCur == nil && errF == nil {
				if pos, err := f.Seek(0, io.SeekCurrent); !os.SameFile(cur, fi) || err == nil && cur.Size() < pos {
					// Lines the agent wrote before it switched files.
					if _, err := drain(); err != nil {
						return fmt.Errorf("process: logs of %s: %w", id, err)
					}
					if err := open(); err != nil {
						return fmt.Errorf("process: logs of %s: %w", id, err)
					}
					continue
				}
			}
			if !wrote {
				st, err := d.rd.Load(id)
				if err != nil {
					return err
				}
				if d.instance(st).State.Terminal() {
					// The agent wrote its last line before the exit file.
					if _, err := drain(); err != nil {
						return fmt.Errorf("process: logs of %s: %w", id, err)
					}
					return nil
				}
			}
		} else if st, err := d.rd.Load(id); err != nil {
			return err
		} else if d.instance(st).State.Terminal() {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// DialAgent connects to the replica's agent over its unix socket.
func (d *Driver) DialAgent(ctx context.Context, id string) (net.Conn, error) {
	if _, err := d.rd.Load(id); err != nil {
		return nil, err
	}
	var dialer net.Dialer
	c, err := dialer.DialContext(ctx, "unix", filepath.Join(d.path(id), sockFile))
	if err != nil {
		return nil, fmt.Errorf("process: agent of %s: %w", id, err)
	}
	return c, nil
}
