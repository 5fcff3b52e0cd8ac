package agent

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestLogRotation(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out.log")
	l, err := openLog(path, 200)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	w := &lineWriter{l: l, s: "stdout"}
	for i := range 10 {
		w.Write([]byte("line " + strings.Repeat("x", i) + "\n"))
	}
	w.Write([]byte("partial"))
	w.flush()

	var all []string
	for _, p := range []string{path + ".1", path} {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		st, _ := f.Stat()
		if st.Size() > 200+100 {
			t.Errorf("%s is %d bytes, past the rotation size", p, st.Size())
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var ll logLine
			if err := json.Unmarshal(sc.Bytes(), &ll); err != nil || ll.S != "stdout" || ll.T == "" {
				t.Errorf("bad line %q: %v", sc.Text(), err)
			}
			all = append(all, ll.M)
		}
		f.Close()
	}
	// .1 holds only the latest rotated file; the lines in both end with
	// the most recent ones, in order.
	if n := len(all); n < 3 || all[n-1] != "partial" || all[n-2] != "line "+strings.Repeat("x", 9) {
		t.Errorf("lines across the two files: %q", all)
	}
}

func TestLineWriterSplitsLongLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out.log")
	l, err := openLog(path, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	w := &lineWriter{l: l, s: "stderr"}
	w.Write([]byte(strings.Repeat("y", maxLogLine+10) + "\r\nend\n"))
	l.Close()
	b, _ := os.ReadFile(path)
	var got []int
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var ll logLine
		if err := json.Unmarshal([]byte(line), &ll); err != nil {
			t.Fatal(err)
		}
		got = append(got, len(ll.M))
	}
	if len(got) != 3 || got[0] != maxLogLine || got[1] != 10 || got[2] != 3 {
		t.Errorf("line lengths %v, want [%d 10 3]", got, maxLogLine)
	}
}

// TestLogNoRotationOfDevices logs past the size limit into a named pipe, as
// a VM guest's agent does into its serial console: a file that is not a
// regular file must never be renamed.
func TestLogNoRotationOfDevices(t *testing.T) {
	path := filepath.Join(t.TempDir(), "console")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	// Held open for reading and writing, so the log's open and writes do
	// not block.
	r, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	l, err := openLog(path, 10)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for range 3 {
		l.line("stdout", "a line longer than ten bytes")
	}
	buf := make([]byte, 4096)
	n, _ := r.Read(buf)
	if got := strings.Count(string(buf[:n]), "\n"); got == 0 {
		t.Errorf("read %q from the pipe, want log lines", buf[:n])
	}
	if fi, err := os.Lstat(path); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("the pipe is gone or replaced: %v, %v", fi, err)
	}
	if _, err := os.Lstat(path + ".1"); !os.IsNotExist(err) {
		t.Errorf("the pipe was rotated to %s.1", path)
	}
}
