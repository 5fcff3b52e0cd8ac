package console

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/agent"
	"github.com/berth-dev/berth/internal/vm"
)

// TestConsoleParsing covers what the console can look like: tty line ends,
// kernel messages in front of or between the agent's lines, a cut last
// line.
func TestConsoleParsing(t *testing.T) {
	text := "[    0.1] Linux version x\r\n" +
		`{"t":"2025-01-02T03:04:05Z","s":"agent","m":"agent listening on vsock:52 (pid 1)"}` + "\r\n" +
		`{"t":"2025-01-02T03:04:06Z","s":"stdout","m":"one"}` + "\r\n" +
		`[    1.2] random: crng init done{"t":"2025-01-02T03:04:07Z","s":"stderr","m":"two"}` + "\r\n" +
		"not json at all\n" +
		`{"t":"2025-01-02T03:04:08Z","s":"agent","m":"exit 7: exited with code 7"}` + "\r\n" +
		"[    2.0] reboot: Restarting system\r\n" +
		`{"t":"2025-01-02T03:04:09Z","s":"stdout","m":"cut`
	p := filepath.Join(t.TempDir(), "console.log")
	os.WriteFile(p, []byte(text), 0o600)
	lines, err := ReadLogs(p, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []vm.LogLine{
		{Time: time.Date(2025, 1, 2, 3, 4, 6, 0, time.UTC), Stream: "stdout", Text: "one"},
		{Time: time.Date(2025, 1, 2, 3, 4, 7, 0, time.UTC), Stream: "stderr", Text: "two"},
	}
	if !slices.EqualFunc(lines, want, func(a, b vm.LogLine) bool { return a.Text == b.Text && a.Stream == b.Stream && a.Time.Equal(b.Time) }) {
		t.Errorf("ReadLogs = %+v, want %+v", lines, want)
	}
	code, reason, ok := Exit(p)
	if !ok || code != 7 || reason != "exited with code 7" {
		t.Errorf("Exit = %d, %q, %v; want 7", code, reason, ok)
	}
	tail := Tail(p, 2)
	if !slices.Equal(tail, []string{"[    2.0] reboot: Restarting system", `{"t":"2025-01-02T03:04:09Z","s":"stdout","m":"cut`}) {
		t.Errorf("Tail = %q", tail)
	}
	if _, _, ok := Exit(filepath.Join(t.TempDir(), "none")); ok {
		t.Error("Exit found an exit in a missing file")
	}
}

// TestAgentExitLine pins the coupling with the agent: the real agent's last
// log line is what Exit reads.
func TestAgentExitLine(t *testing.T) {
	dir, err := os.MkdirTemp("", "con") // short: the agent's socket lives here
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	log := filepath.Join(dir, "console.log")
	code := agent.Main(t.Context(), []string{"--listen", "unix:" + filepath.Join(dir, "a.sock"), "--log", log,
		"--", "sh", "-c", "echo bye; exit 5"}, io.Discard)
	if code != 5 {
		t.Fatalf("agent.Main = %d, want 5", code)
	}
	got, reason, ok := Exit(log)
	if !ok || got != 5 || reason != "exited with code 5" {
		t.Errorf("Exit of the agent's log = %d, %q, %v; want 5, exited with code 5", got, reason, ok)
	}
	if tail := AppTail(log, 1); !slices.Equal(tail, []string{"bye"}) {
		t.Errorf("AppTail = %q, want bye", tail)
	}
}
