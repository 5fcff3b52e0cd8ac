// Package console reads the in-sandbox agent's log: JSON lines
// {"t","s","m"}, in a file of its own (output.log, rotated to output.log.1;
// the process and container drivers) or on a microVM guest's serial
// console, which the kvm, libvirt and firecracker drivers write to a file
// (console.log) and which also carries the kernel's messages, with "\r\n"
// line ends from the tty. The app's output is the agent's stdout and stderr
// lines; its exit is the agent's last line; the rest is kept for failure
// reasons only.
package console

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"regexp"
	"strconv"
	"time"

	"github.com/berth-dev/berth/internal/vm"
)

// Entry is one line of the agent's log.
type Entry struct {
	T time.Time `json:"t"`
	S string    `json:"s"`
	M string    `json:"m"`
}

// ParseLine parses one console line as an agent log line. A kernel
// message may have been printed in front of it on the same line, so the
// JSON object is looked for where it starts.
func ParseLine(b []byte) (Entry, bool) {
	b = bytes.TrimRight(b, "\r")
	i := bytes.Index(b, []byte(`{"t":`))
	if i < 0 {
		return Entry{}, false
	}
	var e Entry
	if json.Unmarshal(b[i:], &e) != nil || e.S == "" {
		return Entry{}, false
	}
	return e, true
}

// AppLine keeps the app's output: stdout and stderr lines.
func AppLine(b []byte) (vm.LogLine, bool) {
	e, ok := ParseLine(b)
	if !ok || e.S != "stdout" && e.S != "stderr" {
		return vm.LogLine{}, false
	}
	return vm.LogLine{Time: e.T, Stream: e.S, Text: e.M}, true
}

// exitLine is the agent's last log line: `exit N: reason` (agent.Main logs
// it before it exits, and the guest reboots then).
var exitLine = regexp.MustCompile(`^exit (-?[0-9]+): (.*)$`)

// Exit finds the agent's exit record in the console's tail.
func Exit(path string) (int, string, bool) {
	var (
		code   int
		reason string
		found  bool
	)
	ScanTail(path, 256<<10, func(line []byte) {
		e, ok := ParseLine(line)
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

// AppTail returns the last n lines of the app's output (from path and,
// if rotated, path.1).
func AppTail(path string, n int) []string {
	lines, err := ReadRotated(path, n)
	if err != nil {
		return nil
	}
	texts := make([]string, len(lines))
	for i, l := range lines {
		texts[i] = l.Text
	}
	return texts
}

// Tail returns the last n non-empty console lines, as text: the
// agent's lines by their message, the kernel's as they are.
func Tail(path string, n int) []string {
	var out []string
	ScanTail(path, 64<<10, func(line []byte) {
		line = bytes.TrimRight(line, "\r")
		if e, ok := ParseLine(line); ok {
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

// ScanTail calls fn for each line in the last limit bytes of path.
func ScanTail(path string, limit int64, fn func([]byte)) {
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
			fn(buf) // the VMM may have ended mid-line
			return
		}
		fn(buf[:i])
		buf = buf[i+1:]
	}
}

// ReadLogs returns the last n app lines of the console (all when n <= 0),
// reading backwards from its end in growing chunks so that a short tail of
// a long console stays cheap. A missing file has no lines.
func ReadLogs(path string, n int) ([]vm.LogLine, error) {
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
			if l, ok := AppLine(buf[:i]); ok {
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

// ReadRotated returns the last n app lines (all when n <= 0) of an agent
// log and its rotated predecessor path.1, oldest first.
func ReadRotated(path string, n int) ([]vm.LogLine, error) {
	cur, err := ReadLogs(path, n)
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
	old, err := ReadLogs(path+".1", want)
	if err != nil {
		return nil, err
	}
	return append(old, cur...), nil
}
