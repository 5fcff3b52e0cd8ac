package telemetry

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"time"
)

// bucketKey names one deployment's metric bucket.
type bucketKey struct {
	ns, dep string
	t       int64 // start, epoch ms
}

type bucket struct {
	requests, errors, lines, errLines int64
	latSum                            float64
	h                                 hist
	samples, usageSamples             int
	cpu, mem, inFlight, ready         float64
	pending, draining                 float64
}

// row is a log line ready to insert.
type row struct {
	ts                                               int64
	ns, dep, level, source, msg, backend, host, flds string
}

// rowBudget is one deployment's access rows stored in the current second
// (Options.AccessRows), apart for those at level error.
type rowBudget struct {
	sec         int64 // epoch seconds
	rows, error int
}

// writer is the state of the writer goroutine.
type writer struct {
	s      *Store
	batch  []row
	open   map[bucketKey]*bucket
	budget map[[2]string]*rowBudget // by namespace and deployment
	// interned holds one copy of each namespace and deployment name, by
	// deployment then namespace (writer.names).
	interned map[string]map[string][2]string
	// nextID is the next log row's id; 0 until read from the file.
	nextID int64
}

func (s *Store) run() {
	defer close(s.done)
	w := &writer{s: s, open: map[bucketKey]*bucket{}, budget: map[[2]string]*rowBudget{}, interned: map[string]map[string][2]string{}}
	flush := time.NewTicker(s.o.FlushEvery)
	defer flush.Stop()
	sample := time.NewTicker(Step)
	defer sample.Stop()
	sweep := time.NewTicker(SweepEvery)
	defer sweep.Stop()
	s.sweepLogged()
	// The queue is drained on a tick, not as each record arrives: a
	// writer waiting on the queue would be woken by every request, and
	// waking a goroutine costs the request path several times what
	// copying its record does. A queue half full wakes it early (enqueue).
	tick := time.NewTicker(drainEvery)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			w.drain()
		case <-s.wake:
			w.drain()
		case <-flush.C:
			w.commit(false)
		case <-sample.C:
			w.sample()
		case <-sweep.C:
			s.sweepLogged()
		case done := <-s.kick:
			w.drain()
			w.commit(true)
			close(done)
		case <-s.stop:
			w.drain()
			w.commit(true)
			return
		}
	}
}

// drainEvery is how often the writer takes what is queued.
const drainEvery = 100 * time.Millisecond

func (w *writer) drain() {
	for {
		select {
		case e := <-w.s.q:
			w.add(e)
		default:
			return
		}
	}
}

// levelOf is an access record's level: error for a 5xx (or no answer),
// warn for a 4xx.
func levelOf(status int) string {
	switch {
	case status >= 500 || status == 0:
		return "error"
	case status >= 400:
		return "warn"
	}
	return "info"
}

type accessFields struct {
	Method     string  `json:"method"`
	Path       string  `json:"path"`
	Status     int     `json:"status"`
	DurationMs float64 `json:"duration_ms"`
	Bytes      int64   `json:"bytes"`
	Host       string  `json:"host"`
	Client     string  `json:"client,omitempty"`
	Backend    string  `json:"backend,omitempty"`
	Unrouted   bool    `json:"unrouted,omitempty"`
}

func (w *writer) add(e entry) {
	w.s.pending.Add(1)
	var r row
	if e.line {
		l := &e.l
		r = row{ts: l.Time.UnixMilli(), ns: l.Namespace, dep: l.Deployment, level: l.Level, source: l.Source,
			msg: l.Message, backend: l.Backend, host: l.Host, flds: l.Fields}
	} else {
		// Only a record kept as a row is made strings of: one that is
		// only counted allocates nothing.
		a := &e.a
		ns, dep := w.names(&e)
		if a.Unrouted || dep == "" {
			dep = Unrouted
		}
		ms := float64(a.Duration) / float64(time.Millisecond)
		ts := a.Time.UnixMilli()
		b := w.bucket(ns, dep, ts)
		b.requests++
		if a.Status >= 500 || a.Status == 0 {
			b.errors++
		}
		b.latSum += ms
		b.h.add(ms)
		if !w.keep(ns, dep, ts, a.Status >= 500 || a.Status == 0) {
			// Counted as a line of its bucket all the same: the log
			// volume is what happened, not what was kept.
			b.lines++
			if levelOf(a.Status) == "error" {
				b.errLines++
			}
			w.s.pending.Add(-1)
			w.s.sampled.Add(1)
			return
		}
		e.unpack()
		f := accessFields{Method: a.Method, Path: a.Path, Status: a.Status, DurationMs: ms, Bytes: a.Bytes,
			Host: a.Host, Backend: a.Backend, Unrouted: a.Unrouted}
		if a.Client.IsValid() {
			f.Client = a.Client.String()
		}
		fj, _ := json.Marshal(f)
		msg := make([]byte, 0, len(a.Method)+len(a.Path)+32)
		msg = append(msg, a.Method...)
		msg = append(msg, ' ')
		msg = append(msg, a.Path...)
		msg = append(msg, ' ')
		msg = strconv.AppendInt(msg, int64(a.Status), 10)
		msg = append(msg, ' ')
		msg = strconv.AppendFloat(msg, ms, 'f', 1, 64)
		msg = append(msg, "ms"...)
		r = row{ts: ts, ns: ns, dep: dep, level: levelOf(a.Status), source: "access",
			msg: string(msg), backend: a.Backend, host: a.Host, flds: string(fj)}
	}
	b := w.bucket(r.ns, r.dep, r.ts)
	b.lines++
	if r.level == "error" {
		b.errLines++
	}
	w.batch = append(w.batch, r)
	if len(w.batch) >= w.s.o.Batch {
		w.commit(false)
	}
}

// names is the writer's one copy of an access record's namespace and
// deployment names: a lookup by their bytes makes no string.
func (w *writer) names(e *entry) (ns, dep string) {
	depB, nsB := e.field(3), e.field(4)
	byNS := w.interned[string(depB)]
	if byNS == nil {
		if len(w.interned) >= 4096 {
			clear(w.interned) // bounded; names are made again when needed
		}
		byNS = make(map[string][2]string, 1)
		w.interned[string(depB)] = byNS
	}
	p, ok := byNS[string(nsB)]
	if !ok {
		if len(byNS) >= 4096 {
			clear(byNS)
		}
		p = [2]string{string(nsB), string(depB)}
		byNS[p[0]] = p
	}
	return p[0], p[1]
}

// keep reports whether an access record of deployment dep at ts (epoch
// ms; isErr: at level error) is stored as a row: within
// Options.AccessRows of its second.
func (w *writer) keep(ns, dep string, ts int64, isErr bool) bool {
	limit := w.s.o.AccessRows
	if limit < 0 {
		return true
	}
	k := [2]string{ns, dep}
	rb := w.budget[k]
	if rb == nil {
		if len(w.budget) >= 4096 {
			clear(w.budget) // bounded; a second's counts are all it keeps
		}
		rb = new(rowBudget)
		w.budget[k] = rb
	}
	if sec := ts / 1000; sec != rb.sec {
		*rb = rowBudget{sec: sec}
	}
	n := &rb.rows
	if isErr {
		n = &rb.error
	}
	if *n >= limit {
		return false
	}
	*n++
	return true
}

func (w *writer) bucket(ns, dep string, ts int64) *bucket {
	step := Step.Milliseconds()
	k := bucketKey{ns, dep, ts - ts%step}
	b := w.open[k]
	if b == nil {
		b = new(bucket)
		w.open[k] = b
	}
	return b
}

func (w *writer) sample() {
	if w.s.o.Sample == nil {
		return
	}
	now := w.s.o.Now().UnixMilli()
	for _, g := range w.s.o.Sample() {
		b := w.bucket(g.Namespace, g.Deployment, now)
		b.samples++
		if g.CPUPercent >= 0 && g.MemoryBytes >= 0 {
			b.usageSamples++
			b.cpu += g.CPUPercent
			b.mem += g.MemoryBytes
		}
		b.inFlight += g.InFlight
		b.ready += g.Ready
		b.pending += g.Pending
		b.draining += g.Draining
	}
}

// commit writes the batch and the closed metric buckets (every open one
// when all) in one transaction.
func (w *writer) commit(all bool) {
	now := w.s.o.Now().UnixMilli()
	step := Step.Milliseconds()
	var closed []bucketKey
	for k := range w.open {
		if all || k.t+step <= now {
			closed = append(closed, k)
		}
	}
	if len(w.batch) == 0 && len(closed) == 0 {
		return
	}
	n := int64(len(w.batch))
	err := w.write(closed)
	w.s.pending.Add(-n)
	if err != nil {
		w.nextID = 0 // read again: the batch's ids were not taken
		w.s.failed.Add(n)
		if !w.s.unhealthy.Swap(true) {
			w.s.o.Log.Warn("telemetry: a batch was not written (dropped)", "records", n, "err", err)
		}
	} else {
		w.s.written.Add(n)
		w.s.unhealthy.Store(false)
	}
	w.batch = w.batch[:0]
	for _, k := range closed {
		delete(w.open, k)
	}
}

func (w *writer) write(closed []bucketKey) (err error) {
	ctx := context.Background()
	tx, err := w.s.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tx.Rollback()
		}
	}()
	// Ids in time order as far as one batch goes: a search walks ids
	// newest first.
	slices.SortStableFunc(w.batch, func(a, b row) int { return int(a.ts - b.ts) })
	if len(w.batch) > 0 {
		if err := w.insertLogs(ctx, tx); err != nil {
			return err
		}
	}
	for _, k := range closed {
		b := w.open[k]
		var h []byte
		if b.requests > 0 {
			h = b.h.encode()
		}
		var g [6]any
		if b.samples > 0 {
			g = [6]any{nil, nil, b.inFlight, b.ready, b.pending, b.draining}
		}
		if b.usageSamples > 0 {
			g[0], g[1] = b.cpu, b.mem
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO metrics (t, ns, dep, requests, lines, err_lines, errors, lat_sum, hist, samples, usage_samples,
			cpu, mem, in_flight, ready, pending, draining) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)`,
			k.t, k.ns, k.dep, b.requests, b.lines, b.errLines, b.errors, b.latSum, h, b.samples, b.usageSamples,
			g[0], g[1], g[2], g[3], g[4], g[5]); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// insertRows is how many log rows one INSERT statement carries: one
// statement per row costs the driver's per-statement work (binding,
// stepping) per row, the larger part of a row's cost.
const insertRows = 64

// insertLogs inserts the batch's rows and their index entries, with ids
// the writer assigns (so the index's rowids are known without asking).
func (w *writer) insertLogs(ctx context.Context, tx *sql.Tx) error {
	if w.nextID == 0 {
		if err := tx.QueryRowContext(ctx, `SELECT coalesce(max(id), 0) + 1 FROM logs`).Scan(&w.nextID); err != nil {
			return err
		}
	}
	id := w.nextID
	type bk struct{ ns, dep, backend string }
	backends := map[bk]int64{}
	var logArgs, ftsArgs []any
	var stmts [2]*sql.Stmt // for a full chunk
	defer func() {
		for _, st := range stmts {
			if st != nil {
				st.Close()
			}
		}
	}()
	for start := 0; start < len(w.batch); start += insertRows {
		chunk := w.batch[start:min(start+insertRows, len(w.batch))]
		logArgs, ftsArgs = logArgs[:0], ftsArgs[:0]
		for _, r := range chunk {
			logArgs = append(logArgs, id, r.ts, r.ns, r.dep, r.level, r.source, r.msg, r.backend, r.host, r.flds)
			ftsArgs = append(ftsArgs, id, depKey(r.ns, r.dep), r.msg)
			id++
			if r.backend != "" {
				k := bk{r.ns, r.dep, r.backend}
				backends[k] = max(backends[k], r.ts)
			}
		}
		logQ := `INSERT INTO logs (id, ts, ns, dep, level, source, message, backend, host, fields) VALUES ` + placeholders(len(chunk), 10)
		ftsQ := `INSERT INTO logs_fts (rowid, k, message) VALUES ` + placeholders(len(chunk), 3)
		for i, q := range [2]string{logQ, ftsQ} {
			args := [2][]any{logArgs, ftsArgs}[i]
			if len(chunk) < insertRows {
				if _, err := tx.ExecContext(ctx, q, args...); err != nil {
					return err
				}
				continue
			}
			if stmts[i] == nil {
				st, err := tx.PrepareContext(ctx, q)
				if err != nil {
					return err
				}
				stmts[i] = st
			}
			if _, err := stmts[i].ExecContext(ctx, args...); err != nil {
				return err
			}
		}
	}
	for k, ts := range backends {
		if _, err := tx.ExecContext(ctx, `INSERT INTO backends (ns, dep, backend, last_ts) VALUES (?,?,?,?)
			ON CONFLICT DO UPDATE SET last_ts = max(last_ts, excluded.last_ts)`, k.ns, k.dep, k.backend, ts); err != nil {
			return err
		}
	}
	w.nextID = id
	return nil
}

// placeholders is "(?,…),(?,…)…": rows groups of cols.
func placeholders(rows, cols int) string {
	var b strings.Builder
	one := "(" + strings.TrimSuffix(strings.Repeat("?,", cols), ",") + ")"
	for i := range rows {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(one)
	}
	return b.String()
}

// depKey is the token a deployment's lines carry in the index's k column.
func depKey(ns, dep string) string {
	h := fnv.New64a()
	h.Write([]byte(ns))
	h.Write([]byte{0})
	h.Write([]byte(dep))
	return "k" + strconv.FormatUint(h.Sum64(), 36)
}

func (s *Store) sweepLogged() {
	if err := s.Sweep(context.Background()); err != nil {
		s.o.Log.Warn("telemetry: retention sweep failed", "err", err)
	}
}

// sweepChunk is how many log rows one sweep transaction deletes.
const sweepChunk = 5000

// Sweep deletes the rows older than the retention, then the oldest logs
// (and at last metrics) while the file's used pages pass the size cap, and
// returns the freed pages to the file system.
func (s *Store) Sweep(ctx context.Context) error {
	cutoff := s.o.Now().Add(-s.o.Retention).UnixMilli()
	// The oldest ids first, a chunk at a time, until a chunk holds none
	// past the retention: ids are in time order but for the skew of
	// batches, so a late row may outlive its retention by that much.
	for {
		n, err := s.deleteLogs(ctx, `SELECT id FROM (SELECT id, ts FROM logs ORDER BY id LIMIT ?) WHERE ts < ?`, sweepChunk, cutoff)
		if err != nil {
			return err
		}
		if n == 0 {
			break
		}
	}
	if _, err := s.w.ExecContext(ctx, `DELETE FROM metrics WHERE t < ?`, cutoff); err != nil {
		return err
	}
	if _, err := s.w.ExecContext(ctx, `DELETE FROM backends WHERE last_ts < ?`, cutoff); err != nil {
		return err
	}
	for {
		used, err := s.usedBytes(ctx)
		if err != nil {
			return err
		}
		if used <= s.o.MaxBytes {
			break
		}
		var count int64
		if err := s.w.QueryRowContext(ctx, `SELECT count(*) FROM logs`).Scan(&count); err != nil {
			return err
		}
		if count > 0 {
			if _, err := s.deleteLogs(ctx, `SELECT id FROM logs ORDER BY id LIMIT ?`, max(count/10, 1)); err != nil {
				return err
			}
		} else {
			res, err := s.w.ExecContext(ctx, `DELETE FROM metrics WHERE rowid IN (SELECT rowid FROM metrics ORDER BY t LIMIT max((SELECT count(*) FROM metrics) / 10, 1))`)
			if err != nil {
				return err
			}
			if n, _ := res.RowsAffected(); n == 0 {
				break // nothing left to delete
			}
		}
		if err := s.vacuum(ctx); err != nil {
			return err
		}
	}
	return s.vacuum(ctx)
}

func (s *Store) vacuum(ctx context.Context) error {
	if _, err := s.w.ExecContext(ctx, `PRAGMA incremental_vacuum`); err != nil {
		return err
	}
	_, err := s.w.ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`)
	return err
}

// deleteLogs deletes the log rows (and their index entries) whose ids
// query selects, in one transaction, and says how many.
func (s *Store) deleteLogs(ctx context.Context, query string, args ...any) (int, error) {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return 0, err
		}
		ids = append(ids, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	for _, q := range []string{`DELETE FROM logs WHERE id = ?`, `DELETE FROM logs_fts WHERE rowid = ?`} {
		st, err := tx.PrepareContext(ctx, q)
		if err != nil {
			return 0, err
		}
		for _, id := range ids {
			if _, err := st.ExecContext(ctx, id); err != nil {
				st.Close()
				return 0, err
			}
		}
		st.Close()
	}
	return len(ids), tx.Commit()
}

// usedBytes is the size of the file's pages in use.
func (s *Store) usedBytes(ctx context.Context) (int64, error) {
	var pages, free, size int64
	for q, p := range map[string]*int64{`PRAGMA page_count`: &pages, `PRAGMA freelist_count`: &free, `PRAGMA page_size`: &size} {
		if err := s.w.QueryRowContext(ctx, q).Scan(p); err != nil {
			return 0, fmt.Errorf("%s: %w", q, err)
		}
	}
	return (pages - free) * size, nil
}
