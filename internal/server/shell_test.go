package server

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/computer"
	"github.com/berth-dev/berth/internal/ptybridge/ptybridgetest"
)

// exitInput types a script that prints a few thousand lines, the last of
// which the terminal's echo of the input does not show, and exits 3.
func exitInput(i int) string { return fmt.Sprintf("seq 1 $((%d+3000)); exit 3\n", i) }

// exitWant is the last line exitInput(i) prints.
func exitWant(i int) string { return fmt.Sprintf("\n%d\r\n", i+3000) }

// TestShellExitStatus: every shell session of a vm deployment that runs
// `exit 3` gets all of its output, then {"type":"exit","code":3}, then a
// normal close (issue 10: most closed 1006 without an exit message).
func TestShellExitStatus(t *testing.T) {
	t.Setenv("SHELL", "/bin/sh")
	h := start(t, "")
	if r := h.json("POST", "/deployments", vmSpec("sh", `,"scaling":{"min_replicas":1,"max_replicas":1}`)); r.code != 201 {
		t.Fatalf("%d %s", r.code, r.body)
	}
	waitFor(t, "a ready VM", func() bool { return h.status("sh").Ready == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	u := "ws" + strings.TrimPrefix(h.admin, "http") + "/deployments/sh/shell"
	ptybridgetest.Sessions(t, ctx, 40, u, nil, exitInput, exitWant, 3)
}

// TestComputerTerminalExitStatus is TestShellExitStatus for a Computer's
// terminal, through the same server.
func TestComputerTerminalExitStatus(t *testing.T) {
	t.Setenv("SHELL", "/bin/sh")
	h := start(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := h.s.computers.Create(ctx, computer.CreateRequest{ID: "desk", Start: true}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.s.computers.Delete(context.Background(), "desk") })
	u := "ws" + strings.TrimPrefix(h.admin, "http") + "/computers/desk/terminal"
	ptybridgetest.Sessions(t, ctx, 40, u, nil, exitInput, exitWant, 3)
}

// TestShellClientLeaves: a client that drops the connection ends the
// shell, instead of leaving it running with the VM held in use (the
// shell's handler used to wait for the shell to exit on its own).
func TestShellClientLeaves(t *testing.T) {
	t.Setenv("SHELL", "/bin/sh")
	h := start(t, "")
	if r := h.json("POST", "/deployments", vmSpec("sh", `,"scaling":{"min_replicas":1,"max_replicas":1}`)); r.code != 201 {
		t.Fatalf("%d %s", r.code, r.body)
	}
	waitFor(t, "a ready VM", func() bool { return h.status("sh").Ready == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(h.admin, "http")+"/deployments/sh/shell", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseNow()
	if _, _, err := conn.Read(ctx); err != nil { // ready
		t.Fatal(err)
	}
	if err := conn.Write(ctx, websocket.MessageBinary, append([]byte{1}, "echo sleep-$((6*7)); exec sleep 12345\n"...)); err != nil {
		t.Fatal(err)
	}
	// The bracket keeps the pattern from matching the count's own grep.
	const count = `for p in /proc/[0-9]*; do tr '\0' ' ' < $p/cmdline 2>/dev/null; echo; done | grep -c 'sleep 1234[5]'`
	running := func() bool {
		r := h.json("POST", "/deployments/sh/exec", `{"command":`+jsonString(count)+`}`)
		var out apitype.ExecOutput
		if r.code != 200 || json.Unmarshal(r.body, &out) != nil {
			t.Fatalf("exec: %d %s", r.code, r.body)
		}
		return strings.TrimSpace(out.Stdout) != "0"
	}
	waitFor(t, "the shell's sleep", running)
	conn.CloseNow()
	waitFor(t, "the shell to end with its client", func() bool { return !running() })
}
