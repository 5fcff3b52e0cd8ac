package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/berth-dev/berth/client"
	"github.com/berth-dev/berth/internal/agent"
	"github.com/berth-dev/berth/internal/server"
)

// agentRole makes this test binary the in-sandbox agent of the Computers
// the live server runs. It is an init, not TestMain, so that it runs
// before anything else and needs no change to the package's TestMain.
const agentRole = "BERTH_CLI_TEST_ROLE"

func init() {
	if os.Getenv(agentRole) == "agent" {
		os.Exit(agent.Main(context.Background(), os.Args[1:], os.Stderr))
	}
}

// computerServer is a real, gated berth on loopback that runs Computers
// with the process driver.
func computerServer(t *testing.T) string {
	t.Helper()
	// An interactive bash may take seconds to start on a busy machine;
	// the shell's protocol is what is under test.
	t.Setenv("SHELL", "/bin/sh")
	dir, err := os.MkdirTemp("", "bcli") // short: agent socket paths are limited
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return runServer(t, server.Options{
		DataDir: dir, BaseDomain: "berth.test",
		AgentCommand: []string{os.Args[0]}, AgentEnv: []string{agentRole + "=agent"},
	}, func(url string) {
		// Delete what the test left, so no sandbox outlives it.
		if c, err := client.New(url, client.WithBasicAuth("admin", "opw")); err == nil {
			if cs, err := c.Computers(context.Background(), ""); err == nil {
				for _, cm := range cs {
					c.DeleteComputer(context.Background(), cm.ID)
				}
			}
		}
	})
}

// TestComputerCLI walks the README's Computers story against a real
// server: the operator creates a Computer and grants an agent access; the
// agent runs commands, copies and edits files, opens a shell; the
// Computer sleeps and wakes with its workspace; the facts log tells who
// did what; revocation and deletion end it.
func TestComputerCLI(t *testing.T) {
	srv := computerServer(t)
	op := func(args ...string) []string {
		return append([]string{"--server", srv, "--user", "admin", "--password", "opw"}, args...)
	}

	if out := mustRun(t, "", op("computer", "create", "desk", "--idle-timeout", "10m")...); !strings.Contains(out, "computer/desk created") {
		t.Errorf("create: %q", out)
	}
	var created map[string]any
	json.Unmarshal([]byte(mustRun(t, "", op("computer", "get", "desk", "-o", "json")...)), &created)
	if created["id"] != "desk" || created["idleTimeoutSecs"] != float64(600) {
		t.Errorf("get -o json: %v", created)
	}
	if out := mustRun(t, "", op("computer", "list")...); !strings.Contains(out, "desk") || !strings.Contains(out, "NAMESPACE") {
		t.Errorf("list: %q", out)
	}

	token := strings.TrimSpace(mustRun(t, "", op("computer", "grant", "desk", "--actions", "exec,bash,files.*,terminal,start,processStart,processList,processKill", "--expires-in", "1h", "--actor", "agent-1", "--via", "cli-test")...))
	if !strings.HasPrefix(token, "bcg_") {
		t.Fatalf("grant printed %q, want a bcg_ token", token)
	}
	agentRun := func(args ...string) []string { return append([]string{"--server", srv, "--token", token}, args...) }

	// exec: argv as given, output streamed, the exit code passed through.
	code, out, errs := berth(t, "", agentRun("computer", "exec", "desk", "--", "sh", "-c", "echo out; echo err >&2; exit 3")...)
	if code != 3 || out != "out\n" || errs != "err\n" {
		t.Errorf("exec: exit %d, stdout %q, stderr %q; want 3, out, err", code, out, errs)
	}
	if out := mustRun(t, "", agentRun("computer", "exec", "desk", "-e", "N=6", "-c", "echo $((N*7))")...); out != "42\n" {
		t.Errorf("exec -c: %q", out)
	}

	// cp both ways, through stdin/stdout and files.
	local := filepath.Join(t.TempDir(), "notes.txt")
	os.WriteFile(local, []byte("first line\nsecond line\n"), 0o640)
	mustRun(t, "", agentRun("computer", "cp", local, "desk:src/")...)
	mustRun(t, "piped\n", agentRun("computer", "cp", "-", "desk:src/piped.txt")...)
	if out := mustRun(t, "", agentRun("computer", "cp", "desk:src/notes.txt", "-")...); out != "first line\nsecond line\n" {
		t.Errorf("cp to stdout: %q", out)
	}
	back := filepath.Join(t.TempDir(), "back.txt")
	mustRun(t, "", agentRun("computer", "cp", "desk:src/piped.txt", back)...)
	if b, _ := os.ReadFile(back); string(b) != "piped\n" {
		t.Errorf("cp to a file: %q", b)
	}
	if code, _, errs := berth(t, "", agentRun("computer", "cp", "desk:../../etc/passwd", "-")...); code != 1 || !strings.Contains(errs, "outside") {
		t.Errorf("cp of a path outside the workspace: exit %d, %q", code, errs)
	}

	// edit and patch: exact, all or nothing.
	if out := mustRun(t, "", agentRun("computer", "edit", "desk", "src/notes.txt", "--old", "first", "--new", "1st")...); !strings.Contains(out, "1 replacement") {
		t.Errorf("edit: %q", out)
	}
	if code, _, errs := berth(t, "", agentRun("computer", "edit", "desk", "src/notes.txt", "--old", "line", "--new", "row")...); code != 1 || !strings.Contains(errs, "line") {
		t.Errorf("ambiguous edit: exit %d, %q", code, errs)
	}
	diff := "--- a/src/notes.txt\n+++ b/src/notes.txt\n@@ -1,2 +1,2 @@\n 1st line\n-second line\n+2nd line\n--- /dev/null\n+++ b/src/new.txt\n@@ -0,0 +1 @@\n+new\n"
	if out := mustRun(t, diff, agentRun("computer", "patch", "desk", "-")...); out != "patched /src/notes.txt\ncreated /src/new.txt\n" {
		t.Errorf("patch: %q", out)
	}
	if code, _, _ := berth(t, diff, agentRun("computer", "patch", "desk", "-")...); code != 1 {
		t.Errorf("re-applying the patch: exit %d, want 1", code)
	}
	if out := mustRun(t, "", agentRun("computer", "cp", "desk:src/notes.txt", "-")...); out != "1st line\n2nd line\n" {
		t.Errorf("after edit and patch: %q", out)
	}

	// Background processes.
	pid := strings.TrimSpace(mustRun(t, "", agentRun("computer", "exec", "desk", "--detach", "-c", "echo bg-started; exec sleep 60")...))
	if out := mustRun(t, "", agentRun("computer", "ps", "desk")...); !strings.Contains(out, pid) || !strings.Contains(out, "running") || !strings.Contains(out, "agent-1") {
		t.Errorf("ps: %q", out)
	}
	for {
		if out := mustRun(t, "", agentRun("computer", "logs", "desk", pid)...); out == "bg-started\n" {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	mustRun(t, "", agentRun("computer", "kill", "desk", pid, "--signal", "KILL")...)

	// A shell with piped input.
	code, out, _ = berth(t, "cd src && echo in-$(cat piped.txt)\nexit 4\n", agentRun("computer", "shell", "desk")...)
	if code != 4 || !strings.Contains(out, "in-piped") {
		t.Errorf("shell: exit %d, output %q", code, out)
	}

	// The grant does not reach delete, nor another caller's routes.
	if code, _, errs := berth(t, "", agentRun("computer", "delete", "desk")...); code != 1 || !strings.Contains(errs, "does not include") {
		t.Errorf("delete with the grant: exit %d, %q", code, errs)
	}
	if code, _, _ := berth(t, "", agentRun("computer", "list")...); code != 1 {
		t.Errorf("list with a grant: exit %d, want 1", code)
	}

	// Sleep, then wake at the next use with the workspace intact.
	if out := mustRun(t, "", op("computer", "stop", "desk")...); !strings.Contains(out, "sleeping") {
		t.Errorf("stop: %q", out)
	}
	if out := mustRun(t, "", agentRun("computer", "exec", "desk", "--", "cat", "src/notes.txt")...); out != "1st line\n2nd line\n" {
		t.Errorf("after sleep: %q", out)
	}

	// Ports.
	if out := mustRun(t, "", op("computer", "expose", "desk", "8080")...); strings.TrimSpace(out) != "http://8080-desk.berth.test/" {
		t.Errorf("expose: %q", out)
	}
	if out := mustRun(t, "", op("computer", "ports", "desk")...); !strings.Contains(out, "8080") {
		t.Errorf("ports: %q", out)
	}
	mustRun(t, "", op("computer", "unexpose", "desk", "8080")...)

	// The facts log: who wrote what, who ran what.
	facts := mustRun(t, "", op("computer", "facts", "desk")...)
	for _, want := range []string{"files.written", "/src/notes.txt", "process.exited", "agent-1 via cli-test", "exit 3", "lifecycle"} {
		if !strings.Contains(facts, want) {
			t.Errorf("facts lack %q:\n%s", want, facts)
		}
	}
	var entries []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(mustRun(t, "", op("computer", "facts", "desk", "-o", "json")...)), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("facts -o json line %q: %v", line, err)
		}
		entries = append(entries, m)
	}
	if len(entries) < 5 {
		t.Fatalf("facts -o json: %d entries", len(entries))
	}

	// facts -f: the log so far, then what happens next.
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan int, 1)
	last := entries[len(entries)-1]["seq"].(float64)
	go func() {
		done <- Run(ctx, op("computer", "facts", "desk", "-f", "--after", strings.TrimSuffix(jsonNumber(last), ".0")), strings.NewReader(""), pw, io.Discard)
		pw.Close()
	}()
	mustRun(t, "", agentRun("computer", "exec", "desk", "--", "touch", "followed")...)
	sc := bufio.NewScanner(pr)
	if !sc.Scan() || !strings.Contains(sc.Text(), "process.exited") {
		t.Errorf("facts -f first line %q, want the new process.exited", sc.Text())
	}
	cancel()
	go io.Copy(io.Discard, pr)
	if code := <-done; code != 0 {
		t.Errorf("facts -f ended with %d", code)
	}

	// Revocation takes effect at once.
	var grants []struct {
		ID string `json:"id"`
	}
	json.Unmarshal([]byte(mustRun(t, "", op("computer", "grants", "desk", "-o", "json")...)), &grants)
	if len(grants) != 1 {
		t.Fatalf("grants: %+v", grants)
	}
	mustRun(t, "", op("computer", "revoke", "desk", grants[0].ID)...)
	if code, _, errs := berth(t, "", agentRun("computer", "exec", "desk", "--", "true")...); code != 1 || !strings.Contains(errs, "revoked") {
		t.Errorf("exec with a revoked grant: exit %d, %q", code, errs)
	}

	mustRun(t, "", op("computer", "delete", "desk")...)
	if code, _, errs := berth(t, "", op("computer", "get", "desk")...); code != 1 || !strings.Contains(errs, "no Computer") {
		t.Errorf("get after delete: exit %d, %q", code, errs)
	}
}

func jsonNumber(f float64) string {
	b, _ := json.Marshal(f)
	return string(b)
}

func TestComputerUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"computer"}, "missing subcommand"},
		{[]string{"computer", "frob"}, `unknown subcommand "frob"`},
		{[]string{"computer", "get"}, "missing Computer ID"},
		{[]string{"computer", "get", "a", "b"}, `unexpected argument "b"`},
		{[]string{"computer", "exec", "a"}, "missing command"},
		{[]string{"computer", "exec", "a", "-c", "x", "--", "y"}, "not both"},
		{[]string{"computer", "cp", "a", "b"}, "exactly one of SRC and DST"},
		{[]string{"computer", "cp", "a:x", "b:y"}, "exactly one of SRC and DST"},
		{[]string{"computer", "cp", "a:", "-"}, "needs a path"},
		{[]string{"computer", "grant", "a", "--expires-in", "1h"}, "--actions is required"},
		{[]string{"computer", "grant", "a", "--actions", "exec"}, "--expires-in is required"},
		{[]string{"computer", "grant", "a", "--actions", "nope.*", "--expires-in", "1h"}, "matches no action"},
		{[]string{"computer", "grant", "a", "--actions", "exec", "--expires-in", "soon"}, "invalid duration"},
		{[]string{"computer", "expose", "a", "http"}, "PORT must be a number"},
		{[]string{"computer", "shell", "a", "-o", "json"}, "prints text"},
	} {
		code, _, errs := berth(t, "", tc.args...)
		if code != exitUsage || !strings.Contains(errs, tc.want) {
			t.Errorf("berth %s: exit %d, %q; want 2 and %q", strings.Join(tc.args, " "), code, errs, tc.want)
		}
	}
	// Parsing leaves the caller's arguments as given.
	args := []string{"--server", "http://127.0.0.1:1", "computer", "frob", "x"}
	berth(t, "", args...)
	if got := strings.Join(args, " "); got != "--server http://127.0.0.1:1 computer frob x" {
		t.Errorf("Run changed its arguments to %q", got)
	}
	if code, out, _ := berth(t, "", "computer", "help"); code != 0 || !strings.Contains(out, "berth computer <subcommand>") {
		t.Errorf("computer help: %d %q", code, out)
	}
}

func TestExpandActions(t *testing.T) {
	got, err := expandActions("exec, files.* ,exec")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"exec", "files.read", "files.readBytes", "files.write", "files.writeBytes", "files.list", "files.glob", "files.grep", "files.edit", "files.patch"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("expandActions (-want +got):\n%s", diff)
	}
	all, _ := expandActions("all")
	if len(all) != len(computerActions) {
		t.Errorf("all = %d actions, want %d", len(all), len(computerActions))
	}
	if _, err := expandActions(" , "); err == nil {
		t.Error("no actions accepted")
	}
	for _, tc := range []struct{ in, id, path string }{
		{"desk:src/a", "desk", "src/a"},
		{"./desk:a", "", ""},
		{"/abs:x", "", ""},
		{"dir/file:x", "", ""},
		{"plain", "", ""},
	} {
		id, path, _ := remotePath(tc.in)
		if id != tc.id || path != tc.path {
			t.Errorf("remotePath(%q) = %q, %q; want %q, %q", tc.in, id, path, tc.id, tc.path)
		}
	}
}

// TestComputerCreateStartFailureLeavesNothing: `computer create --start`
// whose start fails (a VM backing on a host this server does not have)
// exits 1 with the start's error and deletes the Computer it created, so
// a failed command leaves nothing behind.
func TestComputerCreateStartFailureLeavesNothing(t *testing.T) {
	srv := computerServer(t)
	op := func(args ...string) []string {
		return append([]string{"--server", srv, "--user", "admin", "--password", "opw"}, args...)
	}
	code, out, errs := berth(t, "", op("computer", "create", "bad", "--backing", "on-box-vm:nohost", "--start")...)
	if code != exitFailed || !strings.Contains(errs, "\nerror: ") {
		t.Errorf("create --start with a bad backing: exit %d, stdout %q, stderr %q; want 1 and the error", code, out, errs)
	}
	if !strings.Contains(errs, "computer/bad deleted") || !strings.Contains(errs, `host "nohost" is not this host`) {
		t.Errorf("stderr %q: want the cleanup said and the start's error", errs)
	}
	if code, _, errs := berth(t, "", op("computer", "get", "bad")...); code != exitFailed || !strings.Contains(errs, "no Computer") {
		t.Errorf("get after the failed create: exit %d, %q; want the Computer gone", code, errs)
	}
	// The ID is free again: a good create with it succeeds.
	if out := mustRun(t, "", op("computer", "create", "bad", "--start")...); !strings.Contains(out, "computer/bad created (running)") {
		t.Errorf("create --start after the cleanup: %q", out)
	}
}
