package cli

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// logLineRE is the one format of berth logs, backlog and -f alike.
var logLineRE = regexp.MustCompile(`^(\S+) (\S+) (stdout|stderr) (.*)$`)

// tickWriter collects what berth logs -f prints and cancels the command
// once two complete lines have arrived (the app writes one every 0.2 s).
type tickWriter struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	cancel context.CancelFunc
}

func (w *tickWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(b)
	if strings.Count(w.buf.String(), "\n") >= 2 {
		w.cancel()
	}
	return len(b), nil
}

// TestLogsFollowFormatLive: berth logs -f prints the same line format as
// berth logs, "<time> <vm> <stream> <text>" (issue 10 §4: it printed the
// agent's JSON lines after the VM id).
func TestLogsFollowFormatLive(t *testing.T) {
	srv := vmLiveServer(t)
	op := func(args ...string) []string {
		return append([]string{"--server", srv, "--user", "admin", "--password", "opw"}, args...)
	}
	app := fmt.Sprintf("echo boot; (while sleep 0.2; do echo tick; done) & exec env %s=app %q -test.run=^$", agentRole, os.Args[0])
	spec := fmt.Sprintf(`{"id":"web","routes":[{"host":"web.test"}],"vm":{"driver":"process","port":8080,"start_command":%q},"scaling":{"min_replicas":1,"max_replicas":1}}`, app)
	file := filepath.Join(t.TempDir(), "web.json")
	if err := os.WriteFile(file, []byte(spec), 0o600); err != nil {
		t.Fatal(err)
	}
	mustRun(t, "", op("apply", "-f", file)...)

	var backlog string
	for deadline := time.Now().Add(60 * time.Second); ; {
		backlog = mustRun(t, "", op("logs", "web")...)
		if strings.Contains(backlog, " stdout boot\n") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no boot line in the logs: %q", backlog)
		}
		time.Sleep(100 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	w := &tickWriter{cancel: cancel}
	var errb bytes.Buffer
	code := Run(ctx, op("logs", "web", "-f", "--limit", "1"), strings.NewReader(""), w, &errb)
	w.mu.Lock()
	followed := w.buf.String()
	w.mu.Unlock()
	if code != 0 || !strings.Contains(followed, "tick") {
		t.Fatalf("logs -f: exit %d, stdout %q, stderr %q", code, followed, errb.String())
	}
	check := func(what, out string) (replica string) {
		for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
			m := logLineRE.FindStringSubmatch(line)
			if m == nil {
				t.Errorf("%s: line %q is not <time> <vm> <stream> <text>", what, line)
				continue
			}
			if _, err := time.Parse(time.RFC3339Nano, m[1]); err != nil {
				t.Errorf("%s: line %q: %v", what, line, err)
			}
			replica = m[2]
		}
		return replica
	}
	if a, b := check("logs", backlog), check("logs -f", followed); a != b {
		t.Errorf("logs names VM %q, logs -f %q", a, b)
	}
}
