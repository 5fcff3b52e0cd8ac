package guard

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/store"
)

// Environment of the child process TestKill9 starts from the test binary
// itself (the pattern of package store's TestKill9Durability).
const (
	childEnv    = "BERTH_GUARD_CHILD"
	childDirEnv = "BERTH_GUARD_CHILD_DIR"
)

// TestKill9: a child adds rules (and deletes some) as fast as it can,
// printing each only after the call returned; the parent SIGKILLs it
// mid-stream, and every acknowledged rule is back in force after reopening,
// every acknowledged delete stays deleted.
func TestKill9(t *testing.T) {
	if os.Getenv(childEnv) == "1" {
		runChild()
		return
	}
	if testing.Short() {
		t.Skip("starts a child process")
	}
	const wantAcks = 60
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestKill9$", "-test.count=1")
	cmd.Env = append(os.Environ(), childEnv+"=1", childDirEnv+"="+dir)
	cmd.Stderr = os.Stderr
	// The child waits on its stdin to be killed: a pipe that ends if the
	// parent goes away first, so no child outlives the test.
	if _, err := cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	defer func() {
		if !killed {
			cmd.Process.Kill()
			cmd.Wait()
		}
	}()
	added, deleted := map[string]bool{}, map[string]bool{}
	sc := bufio.NewScanner(stdout)
	for len(added) < wantAcks && sc.Scan() {
		if id, ok := strings.CutPrefix(sc.Text(), "add "); ok {
			added[id] = true
		} else if id, ok := strings.CutPrefix(sc.Text(), "del "); ok {
			delete(added, id)
			deleted[id] = true
		}
	}
	if len(added) < wantAcks {
		t.Fatalf("child stopped after %d acknowledged rules (scan error: %v)", len(added), sc.Err())
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatalf("kill child: %v", err)
	}
	killed = true
	cmd.Wait()

	st, err := store.Open(dir)
	if err != nil {
		t.Fatalf("reopen after kill -9: %v", err)
	}
	defer st.Close()
	g, err := New(t.Context(), Options{Store: st, Enforce: true})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	inForce := map[string]bool{}
	for _, v := range g.Views(false) {
		inForce[v.ID] = true
	}
	for id := range added {
		if !inForce[id] {
			t.Errorf("acknowledged rule %s lost", id)
		}
	}
	for id := range deleted {
		if inForce[id] {
			t.Errorf("acknowledged delete of %s undone", id)
		}
	}
	t.Logf("%d acknowledged rules and %d deletes survived kill -9 (%d in force)", len(added), len(deleted), len(inForce))
}

// runChild is TestKill9's child: it adds up to MaxRules rules, deleting
// every third one it added, until the parent kills it.
func runChild() {
	st, err := store.Open(os.Getenv(childDirEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(2)
	}
	ctx := context.Background()
	g, err := New(ctx, Options{Store: st, Enforce: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(2)
	}
	ack := func(format string, args ...any) {
		if _, err := fmt.Printf(format+"\n", args...); err != nil {
			os.Exit(3) // the parent went away
		}
	}
	for i := range MaxRules {
		v, err := g.Add(ctx, apitype.RuleSpec{Match: apitype.RuleMatch{Client: fmt.Sprintf("10.0.%d.0/24", i)}, Note: "kill -9"})
		if err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(2)
		}
		ack("add %s", v.ID)
		if i%3 == 2 {
			if err := g.Delete(ctx, v.ID); err != nil {
				fmt.Fprintln(os.Stderr, "child:", err)
				os.Exit(2)
			}
			ack("del %s", v.ID)
		}
	}
	io.Copy(io.Discard, os.Stdin) // until the parent kills us, or goes away
	os.Exit(4)
}
