package agent

import (
	"bytes"
	"encoding/json"
	"os"
	"sync"
	"time"
)

// maxLogSize is when the log is rotated to <log>.1 (agent contract).
const maxLogSize = 8 << 20

// maxLogLine splits a line that never ends, so one runaway write cannot
// grow the agent's memory.
const maxLogLine = 64 << 10

// logFile appends JSON lines {"t","s","m"} to a file and rotates it.
type logFile struct {
	path string
	max  int64

	mu     sync.Mutex // guards f and size, and orders lines
	f      *os.File
	size   int64
	rotate bool // a regular file, not a device
}

func openLog(path string, max int64) (*logFile, error) {
	l := &logFile{path: path, max: max}
	if err := l.open(); err != nil {
		return nil, err
	}
	return l, nil
}

func (l *logFile) open() error {
	f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	l.f, l.size = f, fi.Size()
	// Only a regular file is rotated: a VM guest's agent logs to its
	// serial console (/dev/ttyS0), which must never be renamed.
	l.rotate = fi.Mode().IsRegular()
	return nil
}

type logLine struct {
	T string `json:"t"`
	S string `json:"s"`
	M string `json:"m"`
}

// line appends one line from stream s. Errors are dropped: there is no
// better place to report that the log cannot be written.
func (l *logFile) line(s, m string) {
	b, err := json.Marshal(logLine{T: time.Now().UTC().Format(time.RFC3339Nano), S: s, M: m})
	if err != nil {
		return
	}
	b = append(b, '\n')
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return
	}
	n, _ := l.f.Write(b)
	l.size += int64(n)
	if l.rotate && l.size > l.max {
		l.f.Close()
		l.f = nil
		_ = os.Rename(l.path, l.path+".1")
		_ = l.open()
	}
}

func (l *logFile) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}

// lineWriter cuts a stream into lines for a logFile.
type lineWriter struct {
	l   *logFile
	s   string
	buf []byte
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		switch {
		case i >= 0 && i <= maxLogLine:
			w.l.line(w.s, string(bytes.TrimSuffix(w.buf[:i], []byte("\r"))))
			w.buf = w.buf[i+1:]
			continue
		case len(w.buf) >= maxLogLine:
			w.l.line(w.s, string(w.buf[:maxLogLine]))
			w.buf = w.buf[maxLogLine:]
			continue
		}
		break
	}
	if len(w.buf) == 0 {
		w.buf = nil // let a large drained buffer go
	}
	return len(p), nil
}

// flush logs a last line that had no newline.
func (w *lineWriter) flush() {
	if len(w.buf) > 0 {
		w.l.line(w.s, string(w.buf))
		w.buf = nil
	}
}
