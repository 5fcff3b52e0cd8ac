package store

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"sync/atomic"
)

// Group commit. Every write is a transaction on the one writer connection,
// and with synchronous=FULL each commit syncs the WAL: a write's cost is
// mostly that sync, not its statements. So writes that arrive while a
// commit is in flight share the next one instead of queueing for a sync
// each:
//
//   - A writer that finds no commit in progress becomes the leader and
//     commits its own write alone, as before (a quiet store adds nothing).
//   - Writers that arrive meanwhile queue. When the leader's commit is
//     done, it hands leadership to the first of them, which runs the whole
//     queue in one transaction, each write inside a savepoint, and commits
//     once; and so on while writers keep coming.
//   - A write whose function fails is rolled back to its savepoint and gets
//     its error; the others commit. If the batch itself cannot go on (a
//     savepoint that does not roll back, a failed commit), it is rolled
//     back whole and each of its writes is retried in a transaction of its
//     own, so no write fails for another's sake.
//
// A write returns only after the commit that holds it: acknowledged means
// durable, exactly as without batching. There is no timer: a batch is
// whatever queued during the previous commit.
//
// A write's function may run on another writer's goroutine, and before
// the writes ahead of it in its batch have returned to their callers. So
// the callbacks the store's methods take (UpdateComputer's and the like)
// must not wait for anything that a caller of the store holds across a
// write (a lock taken around a store call): that caller's write may be
// the one waiting for this batch. The computer manager's callbacks take
// only its m.mu, which it never holds across a store call.

// pendingWrite is one queued write and, once done, its outcome.
type pendingWrite struct {
	ctx   context.Context
	fn    func(*sql.Tx) error
	err   error
	panic any           // a panic of fn, re-raised in the writer's goroutine
	lead  bool          // set instead of a result: the writer leads the next batch
	done  chan struct{} // closed when err (or lead) is set
}

type committer struct {
	mu      sync.Mutex
	busy    bool // a leader is committing
	queue   []*pendingWrite
	commits atomic.Int64 // transactions committed (tests and benchmarks count them)
	off     atomic.Bool  // batching disabled: every write commits alone (benchmarks)

	// beforeBatch, when set (tests), is called by a leader before it runs
	// a batch of n writes.
	beforeBatch func(n int)
}

// queued returns how many writes wait for the next batch.
func (c *committer) queued() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.queue)
}

// Commits returns how many write transactions the store has committed:
// with group commit, fewer than the writes that returned.
func (s *Store) Commits() int64 { return s.gc.commits.Load() }

// SetGroupCommit turns group commit on (the default) or off, when every
// write commits alone; for benchmarks that compare the two.
func (s *Store) SetGroupCommit(on bool) { s.gc.off.Store(!on) }

// busyNow reports whether a leader is committing.
func (c *committer) busyNow() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.busy
}

// write runs fn in a write transaction, committed with others that arrive
// meanwhile, and returns once that commit is durable (or failed).
func (s *Store) write(ctx context.Context, fn func(*sql.Tx) error) error {
	c := &s.gc
	if c.off.Load() {
		return s.writeAlone(ctx, fn)
	}
	p := &pendingWrite{ctx: ctx, fn: fn, done: make(chan struct{})}
	c.mu.Lock()
	if c.busy {
		c.queue = append(c.queue, p)
		c.mu.Unlock()
		<-p.done
		if !p.lead {
			return p.result()
		}
		// Leadership was handed to us: the batch is the queue, which we
		// head.
		c.mu.Lock()
		batch := c.queue
		c.queue = nil
		c.mu.Unlock()
		s.runBatch(batch)
	} else {
		c.busy = true
		c.mu.Unlock()
		s.runBatch([]*pendingWrite{p})
	}
	c.handOff()
	return p.result()
}

// handOff passes leadership on to the first writer that queued during the
// leader's commit, or stands down.
func (c *committer) handOff() {
	c.mu.Lock()
	if len(c.queue) == 0 {
		c.busy = false
		c.mu.Unlock()
		return
	}
	next := c.queue[0]
	c.mu.Unlock()
	next.lead = true
	close(next.done)
}

func (p *pendingWrite) result() error {
	if p.panic != nil {
		panic(p.panic)
	}
	return p.err
}

// runBatch commits batch and sets every write's outcome; the writes other
// than the caller's own are woken.
func (s *Store) runBatch(batch []*pendingWrite) {
	if h := s.gc.beforeBatch; h != nil {
		h(len(batch))
	}
	if len(batch) == 1 {
		p := batch[0]
		p.err, p.panic = s.writeAloneCatch(p.ctx, p.fn)
	} else if !s.writeBatch(batch) {
		for _, p := range batch {
			p.err, p.panic = s.writeAloneCatch(p.ctx, p.fn)
		}
	}
	// batch[0] is the leader itself, whether it led from the start or
	// was handed the queue it headed.
	for _, p := range batch[1:] {
		close(p.done)
	}
}

// writeBatch runs the writes of batch in one transaction, each in a
// savepoint, and commits. It reports false when the batch as a whole
// failed (nothing of it committed); the outcomes are then unset.
func (s *Store) writeBatch(batch []*pendingWrite) bool {
	// The transaction is no single writer's: none's cancellation may end it.
	ctx := context.Background()
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return false
	}
	for _, p := range batch {
		if err := p.ctx.Err(); err != nil {
			p.err = fmt.Errorf("store: begin: %w", err)
			continue
		}
		if _, err := s.txStmt(ctx, tx, qSavepoint).ExecContext(ctx); err != nil {
			tx.Rollback()
			return false
		}
		p.err, p.panic = catch(p.fn, tx)
		if p.err == nil && p.panic == nil {
			if _, err := s.txStmt(ctx, tx, qRelease).ExecContext(ctx); err != nil {
				tx.Rollback()
				return false
			}
			continue
		}
		// Undo this write only; SQLite may have rolled the whole
		// transaction back already (an I/O error, say), and then the
		// savepoint is gone and the batch is lost.
		if _, err := s.txStmt(ctx, tx, qRollbackTo).ExecContext(ctx); err != nil {
			tx.Rollback()
			return false
		}
		if _, err := s.txStmt(ctx, tx, qRelease).ExecContext(ctx); err != nil {
			tx.Rollback()
			return false
		}
	}
	if err := tx.Commit(); err != nil {
		return false
	}
	s.gc.commits.Add(1)
	return true
}

func catch(fn func(*sql.Tx) error, tx *sql.Tx) (err error, panicked any) {
	defer func() {
		if v := recover(); v != nil {
			panicked = v
		}
	}()
	return fn(tx), nil
}

// writeAloneCatch is writeAlone that returns a panic of fn instead of
// raising it in the leader's goroutine, whose write it is not.
func (s *Store) writeAloneCatch(ctx context.Context, fn func(*sql.Tx) error) (err error, panicked any) {
	defer func() {
		if v := recover(); v != nil {
			panicked = v
		}
	}()
	return s.writeAlone(ctx, fn), nil
}

// writeAlone runs fn in one write transaction of its own and commits it,
// so each mutating method is atomic and, once it returns nil, durable.
func (s *Store) writeAlone(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("store: begin: %w", err)
	}
	defer tx.Rollback() // after a panic of fn too; a no-op once committed
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("store: commit: %w", err)
	}
	s.gc.commits.Add(1)
	return nil
}
