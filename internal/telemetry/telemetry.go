package telemetry

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	_ "modernc.org/sqlite" // the database/sql driver "sqlite"
)

// FileName is the telemetry database's name in the data directory.
const FileName = "telemetry.db"

// Defaults of Options.
const (
	DefaultRetention  = 7 * 24 * time.Hour
	DefaultMaxBytes   = 1 << 30 // 1 GiB
	DefaultQueueSize  = 8192
	DefaultBatch      = 1000
	DefaultFlushEvery = time.Second
	// DefaultAccessRows is how many access records of one deployment are
	// stored as log rows per second, by default (Options.AccessRows).
	DefaultAccessRows = 50
	// Step is the finest metric bucket.
	Step = 10 * time.Second
	// SweepEvery is how often retention and the size cap are enforced.
	SweepEvery = 10 * time.Minute
)

// Unrouted is the deployment unrouted requests are recorded under (with
// no namespace), as app-lb's APP_LB_OBS_DEPLOYMENT default.
const Unrouted = "_lb"

// Options configure a Store. Dir is required; the zero value of every
// other field is its default.
type Options struct {
	Dir        string        // the data directory; the file is Dir/telemetry.db
	Retention  time.Duration // rows older than this are deleted; default 7 days
	MaxBytes   int64         // the file's used pages are kept under this; default 1 GiB
	QueueSize  int           // records waiting for the writer; default 8192
	Batch      int           // records per transaction at most; default 1000
	FlushEvery time.Duration // the writer's idle flush; default 1 s
	// AccessRows bounds the access records of one deployment stored as log
	// rows in each second (default DefaultAccessRows; negative: every one),
	// and, apart, its access records at level error (5xx, or no answer).
	// The metrics count every request whatever the bound: storing and
	// indexing a row costs the writer about 10 µs of CPU, several times
	// what the proxy spends on the request itself, so a deployment
	// serving thousands of requests a second would otherwise cost more in
	// telemetry than in traffic. Records past the bound are counted
	// (Stats.Sampled).
	AccessRows int
	// Sample, when set, is called once per Step for the deployments'
	// gauges (CPU, memory, in-flight, ready, pending, draining).
	Sample func() []Gauge
	Now    func() time.Time // default time.Now
	Log    *slog.Logger
}

// Gauge is one deployment's sampled gauges. A negative CPUPercent or
// MemoryBytes was not sampled (both are null in its bucket then).
type Gauge struct {
	Namespace, Deployment string
	CPUPercent            float64
	MemoryBytes           float64
	InFlight              float64
	Ready                 float64
	Pending               float64
	Draining              float64
}

// Access is one finished data-plane request. Its strings may be the
// request's own: Store.Access copies them.
type Access struct {
	Time       time.Time
	Method     string
	Path       string // without the query
	Status     int
	Duration   time.Duration
	Bytes      int64
	Host       string
	Client     netip.Addr
	Backend    string // the upstream address or sandbox that served it
	Deployment string
	Namespace  string
	Unrouted   bool
}

// Line is one log line: replica output, job output, an event.
type Line struct {
	Time       time.Time
	Namespace  string
	Deployment string
	Source     string // stdout, stderr, job, gate, security, …
	Level      string // "" for none; else debug, info, warn or error
	Message    string
	Backend    string
	Host       string
	Fields     string // a JSON object, or ""
}

// Stats are the store's counters (cumulative since Open).
type Stats struct {
	Queued   int64 // records accepted into the queue
	Dropped  int64 // records dropped because the queue was full
	Written  int64 // records committed to the file
	Sampled  int64 // access records counted in the metrics but not stored as rows (Options.AccessRows)
	Failed   int64 // records lost with a batch that did not commit
	Buffered int   // records accepted but not yet queryable
	Healthy  bool  // the last write committed
}

// entry is a queued record: an Access (line false) or a Line.
type entry struct {
	line bool
	a    Access
	l    Line
	// An Access's strings, one after another (method, host, backend,
	// deployment, namespace, path), and their lengths.
	text [accessText]byte
	lens [6]uint16
}

// accessText is the room for an access record's strings in its queued
// entry: a path that does not fit is cut.
const accessText = 256

// Store is the telemetry store. Safe for concurrent use.
type Store struct {
	o    Options
	w, r *sql.DB
	q    chan entry
	kick chan chan struct{} // Flush's requests
	wake chan struct{}      // the queue is half full: drain it now
	stop chan struct{}
	done chan struct{}
	once sync.Once
	// started: the writer runs (Open; the package's tests open some
	// without one).
	started bool

	queued, dropped, written, failed, sampled atomic.Int64
	pending                                   atomic.Int64 // taken from the queue, not yet committed
	unhealthy                                 atomic.Bool
}

// Open opens (creating) Dir/telemetry.db and starts the writer.
func Open(o Options) (*Store, error) {
	s, err := open(o)
	if err != nil {
		return nil, err
	}
	s.started = true
	go s.run()
	return s, nil
}

func open(o Options) (*Store, error) {
	if o.Dir == "" {
		return nil, errors.New("telemetry: a data directory is required")
	}
	if o.Retention <= 0 {
		o.Retention = DefaultRetention
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.QueueSize <= 0 {
		o.QueueSize = DefaultQueueSize
	}
	if o.Batch <= 0 {
		o.Batch = DefaultBatch
	}
	if o.FlushEvery <= 0 {
		o.FlushEvery = DefaultFlushEvery
	}
	if o.AccessRows == 0 {
		o.AccessRows = DefaultAccessRows
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("telemetry: %w", err)
	}
	path := filepath.Join(o.Dir, FileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("telemetry: %w", err)
	}
	f.Close()
	u := url.URL{Scheme: "file", OmitHost: true, Path: path}
	w, err := sql.Open("sqlite", u.String()+"?"+url.Values{
		"_txlock": {"immediate"}, "_busy_timeout": {"10000"}, "_journal_mode": {"WAL"}, "_synchronous": {"NORMAL"},
	}.Encode())
	if err != nil {
		return nil, fmt.Errorf("telemetry: %w", err)
	}
	w.SetMaxOpenConns(1)
	if err := migrate(w); err != nil {
		w.Close()
		return nil, fmt.Errorf("telemetry: %s: %w", path, err)
	}
	r, err := sql.Open("sqlite", u.String()+"?"+url.Values{"_busy_timeout": {"10000"}, "_query_only": {"1"}}.Encode())
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("telemetry: %w", err)
	}
	r.SetMaxOpenConns(4)
	return &Store{o: o, w: w, r: r, q: make(chan entry, o.QueueSize), kick: make(chan chan struct{}), wake: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{})}, nil
}

// Retention is the store's retention.
func (s *Store) Retention() time.Duration { return s.o.Retention }

// FlushEvery is how long a record may wait in the queue at most.
func (s *Store) FlushEvery() time.Duration { return s.o.FlushEvery }

// Access queues a copy of a. It never blocks: with the queue full the
// record is dropped and counted. It allocates nothing: the strings are
// copied into the queued entry's own array (accessText bytes; a longer
// path is cut there), made strings again by the writer.
func (s *Store) Access(a *Access) {
	e := entry{a: *a}
	n := 0
	for i, p := range [...]string{a.Method, a.Host, a.Backend, a.Deployment, a.Namespace, a.Path} {
		c := copy(e.text[n:], p)
		e.lens[i] = uint16(c)
		n += c
	}
	e.a.Method, e.a.Host, e.a.Backend, e.a.Deployment, e.a.Namespace, e.a.Path = "", "", "", "", "", ""
	s.enqueue(e)
}

// unpack gives e's Access its strings back from e.text (Access).
// field is the bytes of an access record's i'th string (in the order
// of text), without making a string of them.
func (e *entry) field(i int) []byte {
	n := 0
	for _, l := range e.lens[:i] {
		n += int(l)
	}
	return e.text[n : n+int(e.lens[i])]
}

func (e *entry) unpack() {
	n := 0
	for i, p := range [...]*string{&e.a.Method, &e.a.Host, &e.a.Backend, &e.a.Deployment, &e.a.Namespace, &e.a.Path} {
		l := int(e.lens[i])
		*p = string(e.text[n : n+l])
		n += l
	}
}

// Line queues a copy of l; like Access it never blocks.
func (s *Store) Line(l Line) {
	for _, p := range [...]*string{&l.Namespace, &l.Deployment, &l.Source, &l.Level, &l.Message, &l.Backend, &l.Host, &l.Fields} {
		*p = strings.Clone(*p)
	}
	if l.Time.IsZero() {
		l.Time = s.o.Now()
	}
	s.enqueue(entry{line: true, l: l})
}

func (s *Store) enqueue(e entry) {
	select {
	case s.q <- e:
		s.queued.Add(1)
		if len(s.q) >= cap(s.q)/2 {
			select {
			case s.wake <- struct{}{}:
			default:
			}
		}
	default:
		s.dropped.Add(1)
	}
}

// Stats returns the counters.
func (s *Store) Stats() Stats {
	return Stats{
		Queued: s.queued.Load(), Dropped: s.dropped.Load(), Written: s.written.Load(), Failed: s.failed.Load(), Sampled: s.sampled.Load(),
		Buffered: len(s.q) + int(s.pending.Load()), Healthy: !s.unhealthy.Load(),
	}
}

// Flush writes everything queued before it was called, the open metric
// buckets included, and returns once it is queryable.
func (s *Store) Flush(ctx context.Context) error {
	done := make(chan struct{})
	select {
	case s.kick <- done:
	case <-s.done:
		return errors.New("telemetry: the store is closed")
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close stops the writer, writing what is queued, and closes the file.
func (s *Store) Close() error {
	s.once.Do(func() {
		close(s.stop)
		if !s.started {
			close(s.done)
		}
	})
	<-s.done
	return errors.Join(s.r.Close(), s.w.Close())
}
