package store

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Environment of the child process TestKill9Durability starts from the
// test binary itself.
const (
	childEnv    = "BERTH_STORE_CHILD"
	childDirEnv = "BERTH_STORE_CHILD_DIR"
)

// TestKill9Durability starts a child process that writes deployments and
// appends Computer facts (which group commit batches) as fast as it can
// and prints each only after its write returned. The
// parent SIGKILLs it once enough ids are acknowledged, then checks that
// every acknowledged write survived and the database is intact. The kill
// lands at an arbitrary point, usually mid-transaction, which is the point.
func TestKill9Durability(t *testing.T) {
	if os.Getenv(childEnv) == "1" {
		runDurabilityChild()
		return
	}
	if testing.Short() {
		t.Skip("starts a child process")
	}

	const wantAcks = 300
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestKill9Durability$", "-test.count=1")
	cmd.Env = append(os.Environ(), childEnv+"=1", childDirEnv+"="+dir)
	cmd.Stderr = os.Stderr
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

	var (
		acked   []string // ids of acknowledged creates
		lastRev int64    // highest acknowledged revision of "counter"
		facts   []string // "<computer> <seq> <body>" of acknowledged fact appends
	)
	sc := bufio.NewScanner(stdout)
	for len(acked) < wantAcks && sc.Scan() {
		line := sc.Text()
		if id, ok := strings.CutPrefix(line, "ack "); ok {
			acked = append(acked, id)
		} else if rev, ok := strings.CutPrefix(line, "rev "); ok {
			n, err := strconv.ParseInt(rev, 10, 64)
			if err != nil {
				t.Fatalf("child printed %q: %v", line, err)
			}
			lastRev = max(lastRev, n)
		} else if f, ok := strings.CutPrefix(line, "fact "); ok {
			facts = append(facts, f)
		}
	}
	if len(acked) < wantAcks {
		t.Fatalf("child stopped after %d acknowledged writes (scan error: %v)", len(acked), sc.Err())
	}
	if err := cmd.Process.Kill(); err != nil { // SIGKILL on Unix
		t.Fatalf("kill child: %v", err)
	}
	killed = true
	cmd.Wait() // reaps the child; its "signal: killed" error is expected

	s, err := Open(dir)
	if err != nil {
		t.Fatalf("reopen after kill -9: %v", err)
	}
	defer s.Close()
	var check string
	if err := s.r.QueryRowContext(t.Context(), "PRAGMA integrity_check").Scan(&check); err != nil {
		t.Fatalf("integrity_check: %v", err)
	}
	if check != "ok" {
		t.Errorf("integrity_check = %q, want ok", check)
	}
	for _, id := range acked {
		d, err := s.Deployment(t.Context(), id)
		if err != nil {
			t.Errorf("acknowledged deployment %s lost: %v", id, err)
			continue
		}
		if want := fmt.Sprintf(`{"id":%q}`, id); string(d.Spec) != want {
			t.Errorf("deployment %s spec = %s, want %s", id, d.Spec, want)
		}
	}
	// The repeatedly replaced deployment must be at least at the revision
	// acknowledged last.
	if lastRev > 0 {
		d, err := s.Deployment(t.Context(), "counter")
		if err != nil || d.Revision < lastRev {
			t.Errorf("counter = revision %d, %v; want at least acknowledged revision %d", d.Revision, err, lastRev)
		}
	}
	// Fact appends share commits (group commit); each acknowledged one
	// must be there, with the sequence number it was acknowledged with.
	for _, line := range facts {
		var comp, body string
		var seq int64
		if _, err := fmt.Sscan(line, &comp, &seq, &body); err != nil {
			t.Fatalf("child printed fact %q: %v", line, err)
		}
		got, err := s.ComputerFacts(t.Context(), comp, seq-1, 1)
		if err != nil || len(got) != 1 || got[0].Seq != seq || string(got[0].Body) != body {
			t.Errorf("acknowledged fact %s #%d %s lost: %+v, %v", comp, seq, body, got, err)
		}
	}
	if len(facts) == 0 {
		t.Error("the child acknowledged no fact append")
	}
	t.Logf("%d acknowledged creates, %d replaces and %d fact appends survived kill -9", len(acked), lastRev, len(facts))
}

// runDurabilityChild is the child side of TestKill9Durability. Several
// goroutines write concurrently (new deployments, plus replaces of one
// deployment) until the parent kills the process. It exits on its own if
// stdout breaks or after a bound, so an orphaned child cannot run forever.
func runDurabilityChild() {
	s, err := Open(os.Getenv(childDirEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child: open:", err)
		os.Exit(2)
	}
	ctx := context.Background()
	var mu sync.Mutex
	ack := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if _, err := fmt.Printf(format+"\n", args...); err != nil {
			os.Exit(3) // parent went away
		}
	}
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(2)
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 100_000 {
				id := fmt.Sprintf("w%d-%06d", w, i)
				if _, err := s.PutDeployment(ctx, Deployment{ID: id, Spec: fmt.Appendf(nil, `{"id":%q}`, id)}, true, 0); err != nil {
					fail(err)
				}
				ack("ack %s", id)
			}
		})
	}
	// Fact appends from several writers at once: they share commits.
	for w := range 4 {
		wg.Go(func() {
			comp := fmt.Sprintf("c%d", w%2)
			for i := range 100_000 {
				body := fmt.Sprintf(`{"w":%d,"i":%d}`, w, i)
				seq, _, err := s.AppendComputerFact(ctx, comp, "", int64(i), []byte(body), false)
				if err != nil {
					fail(err)
				}
				ack("fact %s %d %s", comp, seq, body)
			}
		})
	}
	wg.Go(func() {
		for range 100_000 {
			d, err := s.PutDeployment(ctx, Deployment{ID: "counter", Spec: []byte(`{}`)}, false, 0)
			if err != nil {
				fail(err)
			}
			ack("rev %d", d.Revision)
		}
	})
	wg.Wait()
	os.Exit(4) // the parent should have killed us long before this
}
