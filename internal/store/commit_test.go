package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"
)

// holdFirstBatch makes the next batch of s wait until n writes queue
// behind it, so that they must share the following commit. It returns a
// function that reports the sizes of the batches run since.
func holdFirstBatch(t *testing.T, s *Store, n int) func() []int {
	t.Helper()
	var (
		mu    sync.Mutex
		sizes []int
		once  sync.Once
	)
	s.gc.beforeBatch = func(size int) {
		once.Do(func() {
			for s.gc.queued() < n {
				runtime.Gosched()
			}
		})
		mu.Lock()
		sizes = append(sizes, size)
		mu.Unlock()
	}
	t.Cleanup(func() { s.gc.beforeBatch = nil })
	return func() []int {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(sizes)
	}
}

// TestGroupCommitSharesCommits: N concurrent fact appends commit in fewer
// than N transactions (here exactly two: the first alone, the rest queued
// behind it together), each gets its own sequence number, and every
// acknowledged fact is there after a reopen.
func TestGroupCommitSharesCommits(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	const n = 16
	sizes := holdFirstBatch(t, s, n-1)
	before := s.gc.commits.Load()
	seqs := make([]int64, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			seqs[i], _, errs[i] = s.AppendComputerFact(context.Background(), "c1", "", int64(i), fmt.Appendf(nil, `{"i":%d}`, i), false)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}
	commits := s.gc.commits.Load() - before
	if commits >= n {
		t.Errorf("%d appends took %d commits, want fewer", n, commits)
	}
	if got := sizes(); !slices.Equal(got, []int{1, n - 1}) {
		t.Errorf("batch sizes = %v, want [1 %d]", got, n-1)
	}
	sorted := slices.Clone(seqs)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	for i, seq := range sorted {
		if seq != int64(i+1) {
			t.Fatalf("sequence numbers %v, want 1..%d once each", sorted, n)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	facts, err := s.ComputerFacts(context.Background(), "c1", 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(facts) != n {
		t.Fatalf("after reopen: %d facts, want %d", len(facts), n)
	}
	for i, seq := range seqs {
		f := facts[seq-1]
		if want := fmt.Sprintf(`{"i":%d}`, i); f.Seq != seq || string(f.Body) != want {
			t.Errorf("fact %d after reopen = %d %s, want %d %s", i, f.Seq, f.Body, seq, want)
		}
	}
}

// TestGroupCommitIsolatesFailures: in a shared commit, a write that fails
// (an append to an unknown Computer with mustExist, a write whose
// function errs, one that panics) gets its own error or panic and leaves
// nothing behind, and the others commit.
func TestGroupCommitIsolatesFailures(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	if _, err := s.CreateComputer(ctx, Computer{ID: "c1", Backings: "[]", State: "sleeping"}); err != nil {
		t.Fatal(err)
	}
	const good = 6
	sizes := holdFirstBatch(t, s, good+3)
	var wg sync.WaitGroup
	var goodErrs [good]error
	var missingErr, fnErr error
	var panicked any
	errBoom := errors.New("boom")
	// The first write leads and runs alone; the rest queue behind it.
	first := make(chan struct{})
	wg.Go(func() {
		defer close(first)
		s.AppendComputerFact(ctx, "c1", "", 0, []byte(`{"first":true}`), true)
	})
	for !s.gc.busyNow() {
		runtime.Gosched()
	}
	for i := range good {
		wg.Go(func() {
			_, _, goodErrs[i] = s.AppendComputerFact(ctx, "c1", "", 0, fmt.Appendf(nil, `{"good":%d}`, i), true)
		})
	}
	wg.Go(func() {
		_, _, missingErr = s.AppendComputerFact(ctx, "nobody", "", 0, []byte(`{}`), true)
	})
	wg.Go(func() {
		fnErr = s.write(ctx, func(tx *sql.Tx) error {
			if _, _, err := s.appendFact(ctx, tx, "c1", NewComputerFact{Body: []byte(`{"undone":true}`)}); err != nil {
				return err
			}
			return errBoom
		})
	})
	wg.Go(func() {
		defer func() { panicked = recover() }()
		s.write(ctx, func(tx *sql.Tx) error {
			s.appendFact(ctx, tx, "c1", NewComputerFact{Body: []byte(`{"panicked":true}`)})
			panic("write panicked")
		})
	})
	wg.Wait()
	<-first
	for i, err := range goodErrs {
		if err != nil {
			t.Errorf("good append %d: %v", i, err)
		}
	}
	if !errors.Is(missingErr, ErrNotFound) {
		t.Errorf("append to unknown Computer: %v, want ErrNotFound", missingErr)
	}
	if !errors.Is(fnErr, errBoom) {
		t.Errorf("failing write: %v, want boom", fnErr)
	}
	if panicked != "write panicked" {
		t.Errorf("panicking write: recovered %v", panicked)
	}
	if got := sizes(); len(got) != 2 || got[1] != good+3 {
		t.Errorf("batch sizes = %v, want [1 %d]", got, good+3)
	}
	facts, err := s.ComputerFacts(ctx, "c1", 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(facts) != 1+good {
		t.Errorf("facts = %d, want %d (the first and the good ones, nothing of the failed)", len(facts), 1+good)
	}
	for _, f := range facts {
		if string(f.Body) == `{"undone":true}` || string(f.Body) == `{"panicked":true}` {
			t.Errorf("a failed write left fact %s", f.Body)
		}
	}
}

// TestGroupCommitFallsBack: when a batch cannot go on (here a write ends
// the shared transaction under the others), it is rolled back whole and
// every write is retried in a transaction of its own: the others still
// commit.
func TestGroupCommitFallsBack(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	const good = 5
	holdFirstBatch(t, s, good+1)
	before := s.gc.commits.Load()
	var wg sync.WaitGroup
	wg.Go(func() { s.AppendComputerFact(ctx, "c1", "", 0, []byte(`{"first":true}`), false) })
	for !s.gc.busyNow() {
		runtime.Gosched()
	}
	var goodErrs [good]error
	for i := range good {
		wg.Go(func() {
			_, _, goodErrs[i] = s.AppendComputerFact(ctx, "c1", "", 0, fmt.Appendf(nil, `{"good":%d}`, i), false)
		})
	}
	var badErr error
	wg.Go(func() {
		badErr = s.write(ctx, func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, "ROLLBACK"); err != nil {
				return err
			}
			return errors.New("ended the transaction")
		})
	})
	wg.Wait()
	for i, err := range goodErrs {
		if err != nil {
			t.Errorf("good append %d: %v", i, err)
		}
	}
	if badErr == nil {
		t.Error("the write that ended the transaction succeeded")
	}
	facts, err := s.ComputerFacts(ctx, "c1", 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(facts) != 1+good {
		t.Errorf("facts = %d, want %d", len(facts), 1+good)
	}
	// The first alone, then each good write alone after the fallback.
	if got := s.gc.commits.Load() - before; got != 1+good {
		t.Errorf("commits = %d, want %d", got, 1+good)
	}
	// The store is still usable.
	if _, _, err := s.AppendComputerFact(ctx, "c1", "", 0, []byte(`{}`), false); err != nil {
		t.Errorf("append after the fallback: %v", err)
	}
}

// TestGroupCommitCancelledWriter: a queued write whose context ends
// before its batch runs fails with the context's error and does not
// hold the others back.
func TestGroupCommitCancelledWriter(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	holdFirstBatch(t, s, 2)
	var wg sync.WaitGroup
	wg.Go(func() { s.AppendComputerFact(ctx, "c1", "", 0, []byte(`{}`), false) })
	for !s.gc.busyNow() {
		runtime.Gosched()
	}
	cctx, cancel := context.WithCancel(ctx)
	var cancelledErr, okErr error
	wg.Go(func() {
		_, _, cancelledErr = s.AppendComputerFact(cctx, "c1", "", 0, []byte(`{"cancelled":true}`), false)
	})
	for s.gc.queued() < 1 {
		runtime.Gosched()
	}
	cancel()
	wg.Go(func() { _, _, okErr = s.AppendComputerFact(ctx, "c1", "", 0, []byte(`{"ok":true}`), false) })
	wg.Wait()
	if !errors.Is(cancelledErr, context.Canceled) {
		t.Errorf("cancelled write: %v, want context.Canceled", cancelledErr)
	}
	if okErr != nil {
		t.Errorf("other write: %v", okErr)
	}
	if n, _ := s.LastComputerFactSeq(ctx, "c1"); n != 2 {
		t.Errorf("last seq = %d, want 2", n)
	}
}

// BenchmarkAppendFactParallel: fact appends from 16 concurrent writers,
// with group commit and with every write committing alone; commits/op
// is the share of a commit each append paid.
func BenchmarkAppendFactParallel(b *testing.B) {
	for _, mode := range []struct {
		name string
		off  bool
	}{{"grouped", false}, {"alone", true}} {
		b.Run(mode.name, func(b *testing.B) {
			s, err := Open(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			s.SetGroupCommit(!mode.off)
			ctx := context.Background()
			var (
				mu  sync.Mutex
				lat []time.Duration
			)
			before := s.gc.commits.Load()
			b.SetParallelism(8) // 16 writers on 2 CPUs
			b.RunParallel(func(pb *testing.PB) {
				var mine []time.Duration
				for pb.Next() {
					t0 := time.Now()
					if _, _, err := s.AppendComputerFact(ctx, "c1", "", 0, []byte(`{"kind":"process.exited"}`), false); err != nil {
						b.Error(err)
						return
					}
					mine = append(mine, time.Since(t0))
				}
				mu.Lock()
				lat = append(lat, mine...)
				mu.Unlock()
			})
			b.ReportMetric(float64(s.gc.commits.Load()-before)/float64(b.N), "commits/op")
			slices.Sort(lat)
			if len(lat) > 0 {
				b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
				b.ReportMetric(float64(lat[len(lat)*9/10].Microseconds())/1000, "p90-ms")
			}
		})
	}
}
