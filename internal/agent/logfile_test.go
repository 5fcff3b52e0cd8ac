package agent

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
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
