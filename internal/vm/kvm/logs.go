package kvm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"regexp"
	"strconv"
	"time"

	"github.com/berth-dev/berth/internal/vm"
)

// The serial console (console.log, the file QEMU writes the guest's ttyS0
// to) carries the kernel's messages and the agent's log: JSON lines
// {"t","s","m"} (the agent runs with --log /dev/ttyS0), with "\r\n" line
// ends from the tty. Lines that are not the agent's are kept for failure
// reasons only.

// logEntry is one line of the agent's log.
type logEntry struct {
	T time.Time `json:"t"`
	S string    `json:"s"`
	M string    `json:"m"`
}

// parseConsoleLine parses one console line as an agent log line. A kernel
// message may have been printed in front of it on the same line, so the
// JSON object is looked for where it starts.
func parseConsoleLine(b []byte) (logEntry, bool) {
	b = bytes.TrimRight(b, "\r")
	i := bytes.Index(b, []byte(`{"t":`))
	if i < 0 {
		return logEntry{}, false
	}
	var e logEntry
	if json.Unmarshal(b[i:], &e) != nil || e.S == "" {
		return logEntry{}, false
	}
	return e, true
}

// appLine keeps the app's output: stdout and stderr lines.
func appLine(b []byte) (vm.LogLine, bool) {
	e, ok := parseConsoleLine(b)
	if !ok || e.S != "stdout" && e.S != "stderr" {
		return vm.LogLine{}, false
	}
	return vm.LogLine{Time: e.T, Stream: e.S, Text: e.M}, true
}

// exitLine is the agent's last log line: `exit N: reason` (agent.Main logs
// it before it exits, and the guest reboots then).
var exitLine = regexp.MustCompile(`^exit (-?[0-9]+): (.*)$`)

// consoleExit finds the agent's exit record in the console's tail.
func consoleExit(path string) (int, string, bool) {
	var (
		code   int
		reason string
		found  bool
	)
	scanTail(path, 256<<10, func(line []byte) {
		e, ok := parseConsoleLine(line)
		if !ok || e.S != "agent" {
			return
		}
		if m := exitLine.FindStringSubmatch(e.M); m != nil {
			if n, err := strconv.Atoi(m[1]); err == nil {
				code, reason, found = n, m[2], true
			}
		}
	})
	return code, reason, found
}

// appTail returns the last n lines of the app's output.
func appTail(path string, n int) []string {
	lines, err := readLogs(path, n)
	if err != nil {
		return nil
	}
	texts := make([]string, len(lines))
	for i, l := range lines {
		texts[i] = l.Text
	}
	return texts
}

// consoleTail returns the last n non-empty console lines, as text: the
// agent's lines by their message, the kernel's as they are.
func consoleTail(path string, n int) []string {
	var out []string
	scanTail(path, 64<<10, func(line []byte) {
		line = bytes.TrimRight(line, "\r")
		if e, ok := parseConsoleLine(line); ok {
			line = []byte(e.M)
		}
		if len(bytes.TrimSpace(line)) == 0 {
			return
		}
		out = append(out, string(line))
		if len(out) > n {
			out = out[1:]
		}
	})
	return out
}

// scanTail calls fn for each line in the last limit bytes of path.
func scanTail(path string, limit int64, fn func([]byte)) {
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return
	}
	off := max(0, fi.Size()-limit)
	buf := make([]byte, fi.Size()-off)
	n, _ := f.ReadAt(buf, off)
	buf = buf[:n]
	if off > 0 {
		if i := bytes.IndexByte(buf, '\n'); i >= 0 {
			buf = buf[i+1:]
		}
	}
	for len(buf) > 0 {
		i := bytes.IndexByte(buf, '\n')
		if i < 0 {
			fn(buf) // QEMU may have ended mid-line
			return
		}
		fn(buf[:i])
		buf = buf[i+1:]
	}
}

// Logs returns up to n of the replica's most recent output lines (all of
// them when n <= 0), oldest first, from its serial console.
func (d *Driver) Logs(ctx context.Context, id string, n int) ([]vm.LogLine, error) {
	if _, err := d.load(id); err != nil {
		return nil, err
	}
	lines, err := readLogs(d.path(id, consoleFile), n)
	if err != nil {
		return nil, fmt.Errorf("kvm: logs of %s: %w", id, err)
	}
	return lines, nil
}

// readLogs returns the last n app lines of the console (all when n <= 0),
// reading backwards from its end in growing chunks so that a short tail of
// a long console stays cheap. A missing file has no lines.
func readLogs(path string, n int) ([]vm.LogLine, error) {
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
				break // still being written
			}
			if l, ok := appLine(buf[:i]); ok {
				lines = append(lines, l)
			}
			buf = buf[i+1:]
		}
		if n > 0 && len(lines) >= n {
			return lines[len(lines)-n:], nil
		}
		if off == 0 {
			return lines, nil
		}
		chunk *= 4
	}
}

// followPoll is how often FollowLogs looks for new output.
const followPoll = 100 * time.Millisecond

// FollowLogs writes the replica's output lines to w as they reach the
// console, starting with the next one, each as a JSON line
// {"t":"<RFC3339Nano>","s":"stdout"|"stderr","m":"<text>"} (the agent's log
// format). It returns nil when ctx ends or once the replica has ended and
// its output was written, and an error wrapping vm.ErrNotFound if the
// replica is stopped meanwhile.
func (d *Driver) FollowLogs(ctx context.Context, id string, w io.Writer) error {
	if _, err := d.load(id); err != nil {
		return err
	}
	f, err := os.OpenFile(d.path(id, consoleFile), os.O_RDONLY|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("kvm: logs of %s: %w", id, err)
	}
	defer f.Close()
	if _, err := f.Seek(0, io.SeekEnd); err != nil {
		return fmt.Errorf("kvm: logs of %s: %w", id, err)
	}
	var pending []byte
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
				if l, ok := appLine(pending[:i]); ok {
					b, _ := json.Marshal(logEntry{T: l.Time, S: l.Stream, M: l.Text})
					if _, err := w.Write(append(b, '\n')); err != nil {
						return wrote, err
					}
					wrote = true
				}
				pending = pending[i+1:]
			}
			if n == 0 || err == io.EOF {
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
		wrote, err := drain()
		if err != nil {
			return fmt.Errorf("kvm: logs of %s: %w", id, err)
		}
		if !wrote {
			st, err := d.load(id)
			if err != nil {
				return err
			}
			if d.instance(st).State.Terminal() {
				_, err := drain()
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
