package telemetry

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// clock is a settable Now.
type clock struct{ ms atomic.Int64 }

func (c *clock) now() time.Time   { return time.UnixMilli(c.ms.Load()) }
func (c *clock) set(t time.Time)  { c.ms.Store(t.UnixMilli()) }
func newClock(t time.Time) *clock { c := new(clock); c.set(t); return c }
func base() time.Time             { return time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC) }
func openT(t *testing.T, o Options) *Store {
	t.Helper()
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	s, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestAccessInLogsAndSeries(t *testing.T) {
	c := newClock(base())
	s := openT(t, Options{Now: c.now})
	ctx := context.Background()
	path := []byte("/api/items")
	for i := range 10 {
		status := 200
		if i%5 == 0 {
			status = 503
		}
		a := Access{Time: base().Add(time.Duration(i) * time.Second), Method: "GET", Path: string(path), Status: status,
			Duration: time.Duration(i+1) * time.Millisecond, Bytes: 10, Host: "web.example", Client: netip.MustParseAddr("192.0.2.1"),
			Backend: "127.0.0.1:8080", Deployment: "web", Namespace: "team-a"}
		s.Access(&a)
	}
	s.Line(Line{Time: base().Add(3 * time.Second), Namespace: "team-a", Deployment: "web", Source: "stderr", Level: "error", Message: "connection refused by db"})
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	rows, next, err := s.Logs(ctx, LogQuery{Namespace: "team-a", Deployment: "web", From: 0, To: base().Add(time.Hour).UnixMilli(), Limit: 5})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 5 || next == nil {
		t.Fatalf("got %d rows, next %v; want 5 and a next page", len(rows), next)
	}
	if rows[0].Ts < rows[4].Ts {
		t.Errorf("not newest first: %d .. %d", rows[0].Ts, rows[4].Ts)
	}
	if rows[0].Source != "access" || !strings.HasPrefix(rows[0].Message, "GET /api/items 200") || rows[0].Backend == nil || *rows[0].Backend != "127.0.0.1:8080" {
		t.Errorf("row 0 = %+v", rows[0])
	}
	// Other namespaces see nothing of it.
	if rows, _, _ := s.Logs(ctx, LogQuery{Namespace: "team-b", Deployment: "web", From: 0, To: base().Add(time.Hour).UnixMilli(), Limit: 5}); len(rows) != 0 {
		t.Errorf("team-b sees %d rows of team-a's web", len(rows))
	}
	for _, q := range []string{"refused", "Connection REF", "by db"} {
		rows, _, err := s.Logs(ctx, LogQuery{Namespace: "team-a", Deployment: "web", From: 0, To: base().Add(time.Hour).UnixMilli(), Q: q, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) != 1 || rows[0].Source != "stderr" {
			t.Errorf("q=%q: %d rows %+v", q, len(rows), rows)
		}
	}
	if rows, _, _ := s.Logs(ctx, LogQuery{Namespace: "team-a", Deployment: "web", From: 0, To: base().Add(time.Hour).UnixMilli(), Level: "error", Limit: 10}); len(rows) != 3 {
		t.Errorf("level=error: %d rows, want 3 (two 503s and a line)", len(rows))
	}
	ser, err := s.Series(ctx, "team-a", "web", base(), base().Add(59*time.Second), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(ser.Buckets) != 1 {
		t.Fatalf("%d buckets", len(ser.Buckets))
	}
	b := ser.Buckets[0]
	if *b.RequestsPerSec != 10.0/60 || *b.ErrorsPerSec != 2.0/60 || b.P50Ms == nil || *b.P99Ms < *b.P50Ms {
		t.Errorf("bucket %+v", b)
	}
	if ser.LogLines != 11 || ser.ErrorLogs != 3 {
		t.Errorf("log lines %d errors %d, want 11 and 3", ser.LogLines, ser.ErrorLogs)
	}
	bs, _ := s.Backends(ctx, "team-a", "web", base())
	if len(bs) != 1 || bs[0] != "127.0.0.1:8080" {
		t.Errorf("backends %v", bs)
	}
	if st := s.Stats(); st.Queued != 11 || st.Written != 11 || st.Dropped != 0 || !st.Healthy {
		t.Errorf("stats %+v", st)
	}
}

// TestFullQueueDrops: with nothing draining the queue, what does not fit
// is dropped and counted, and the caller is not held.
func TestFullQueueDrops(t *testing.T) {
	s, err := open(Options{Dir: t.TempDir(), QueueSize: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for range 5 {
		s.Access(&Access{Time: base(), Method: "GET", Path: "/", Status: 200, Deployment: "web", Namespace: "default"})
	}
	s.Line(Line{Message: "x"})
	if st := s.Stats(); st.Queued != 3 || st.Dropped != 3 || st.Buffered != 3 {
		t.Errorf("stats %+v, want 3 queued, 3 dropped, 3 buffered", st)
	}
}

func TestRetentionDeletesOldRows(t *testing.T) {
	c := newClock(base())
	s := openT(t, Options{Now: c.now, Retention: 24 * time.Hour})
	ctx := context.Background()
	old, recent := base().Add(-48*time.Hour), base().Add(-time.Hour)
	for _, ts := range []time.Time{old, recent} {
		s.Access(&Access{Time: ts, Method: "GET", Path: "/old-or-new", Status: 200, Deployment: "web", Namespace: "default"})
		s.Line(Line{Time: ts, Namespace: "default", Deployment: "web", Source: "stdout", Message: "hello " + ts.String()})
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	rows, _, err := s.Logs(ctx, LogQuery{Namespace: "default", Deployment: "web", From: 0, To: base().UnixMilli(), Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 {
		t.Fatalf("%d rows after the sweep, want the 2 recent ones", len(rows))
	}
	for _, r := range rows {
		if r.Ts != recent.UnixMilli() {
			t.Errorf("row at %d survived", r.Ts)
		}
	}
	// The index lost them too.
	if rows, _, _ := s.Logs(ctx, LogQuery{Namespace: "default", Deployment: "web", From: 0, To: base().UnixMilli(), Q: "hello", Limit: 100}); len(rows) != 1 {
		t.Errorf("search finds %d rows, want 1", len(rows))
	}
	ser, _ := s.Series(ctx, "default", "web", old, base(), time.Hour)
	if ser.LogLines != 2 {
		t.Errorf("metrics keep %d lines, want the recent 2", ser.LogLines)
	}
}

func TestSizeCapDeletesOldestLogs(t *testing.T) {
	c := newClock(base())
	s := openT(t, Options{Now: c.now, MaxBytes: 256 << 10})
	ctx := context.Background()
	msg := strings.Repeat("x", 500)
	for i := range 3000 {
		s.Line(Line{Time: base().Add(time.Duration(i) * time.Millisecond), Namespace: "default", Deployment: "web", Source: "stdout", Message: fmt.Sprint(i, msg)})
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	used, _ := s.usedBytes(ctx)
	if used > 256<<10 {
		t.Errorf("used %d bytes after the sweep, cap %d", used, 256<<10)
	}
	rows, _, _ := s.Logs(ctx, LogQuery{Namespace: "default", Deployment: "web", From: 0, To: base().Add(time.Hour).UnixMilli(), Limit: 1})
	if len(rows) != 1 || !strings.HasPrefix(rows[0].Message, "2999") {
		t.Errorf("the newest line is gone: %+v", rows)
	}
}

// TestAccessRowsBound: past Options.AccessRows in one second, a
// deployment's access records are counted in its metrics (and its log
// volume) but not stored as rows; records at level error have a bound of
// their own, so an error is kept beside a flood of successes; the next
// second stores again, another deployment has its own bound, and a
// negative bound stores every record.
func TestAccessRowsBound(t *testing.T) {
	ctx := context.Background()
	send := func(s *Store, dep string, sec, n, status int) {
		for i := range n {
			a := Access{Time: base().Add(time.Duration(sec)*time.Second + time.Duration(i)*time.Millisecond), Method: "GET", Path: "/",
				Status: status, Duration: time.Millisecond, Host: "web.example", Deployment: dep, Namespace: "team-a"}
			s.Access(&a)
		}
	}
	count := func(s *Store, dep string) (rows int, errs int) {
		t.Helper()
		got, _, err := s.Logs(ctx, LogQuery{Namespace: "team-a", Deployment: dep, From: 0, To: base().Add(time.Hour).UnixMilli(), Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range got {
			if r.Level != nil && *r.Level == "error" {
				errs++
			}
		}
		return len(got), errs
	}
	c := newClock(base().Add(time.Hour))
	s := openT(t, Options{Now: c.now, AccessRows: 3})
	send(s, "web", 0, 10, 200)
	send(s, "web", 0, 5, 503)
	send(s, "web", 1, 10, 200)
	send(s, "api", 0, 4, 200)
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if rows, errs := count(s, "web"); rows != 3+3+3 || errs != 3 {
		t.Errorf("web: %d rows (%d errors), want 9 (3 successes and 3 errors in second 0, 3 in second 1)", rows, errs)
	}
	if rows, _ := count(s, "api"); rows != 3 {
		t.Errorf("api: %d rows, want its own 3", rows)
	}
	ser, err := s.Series(ctx, "team-a", "web", base(), base().Add(59*time.Second), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(ser.Buckets) != 1 || *ser.Buckets[0].RequestsPerSec != 25.0/60 || *ser.Buckets[0].ErrorsPerSec != 5.0/60 {
		t.Errorf("web's metrics %+v, want every one of its 25 requests and 5 errors", ser.Buckets)
	}
	if ser.LogLines != 25 || ser.ErrorLogs != 5 {
		t.Errorf("web's log volume %d lines, %d errors; want 25 and 5", ser.LogLines, ser.ErrorLogs)
	}
	if st := s.Stats(); st.Sampled != 29-12 || st.Written != 12 {
		t.Errorf("stats %+v, want 17 sampled and 12 written", st)
	}

	all := openT(t, Options{Now: c.now, AccessRows: -1})
	send(all, "web", 0, 50, 200)
	if err := all.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if rows, _ := count(all, "web"); rows != 50 {
		t.Errorf("unbounded: %d rows, want 50", rows)
	}
}

// TestCountedAccessAllocatesNothing pins the writer's cost for an access
// record over its second's row budget: it is counted in its bucket and
// makes no string (at full request rate most records are only counted).
func TestCountedAccessAllocatesNothing(t *testing.T) {
	s := &Store{o: Options{AccessRows: 1}}
	w := &writer{s: s, open: map[bucketKey]*bucket{}, budget: map[[2]string]*rowBudget{}, interned: map[string]map[string][2]string{}}
	s.o.Batch = 1 << 30
	a := Access{Time: base(), Method: "GET", Path: "/x", Status: 200, Duration: time.Millisecond, Host: "web.example", Deployment: "web", Namespace: "team-a"}
	var e entry
	pack := func() entry {
		s2 := &Store{q: make(chan entry, 1)}
		s2.Access(&a)
		return <-s2.q
	}
	e = pack()
	w.add(e) // the second's one row, and the names interned
	allocs := testing.AllocsPerRun(100, func() { w.add(e) })
	if allocs != 0 {
		t.Errorf("%v allocations per counted access record, want 0", allocs)
	}
	b := w.open[bucketKey{"team-a", "web", base().UnixMilli()}]
	if b == nil || b.requests != 102 || b.lines != 102 {
		t.Fatalf("bucket %+v, want 102 requests and lines counted", b)
	}
	if len(w.batch) != 1 || w.batch[0].ns != "team-a" || w.batch[0].dep != "web" || !strings.Contains(w.batch[0].msg, "GET /x 200") {
		t.Errorf("batch %+v, want the one kept row of team-a/web", w.batch)
	}
}
