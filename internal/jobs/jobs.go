package jobs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/store"
)

// The history bounds of app-lb.md §1.3.
const (
	DefaultPerDeployment = 20
	DefaultTotal         = 2000
	DefaultLogLines      = 400
	// maxLine bounds one log line: a command printing a megabyte without a
	// newline must not become one record field of that size.
	maxLine = 4096
)

// Store is where the manager keeps jobs (*store.Store).
type Store interface {
	Jobs(ctx context.Context, deployment string) ([]store.Job, error)
	Job(ctx context.Context, id string) (store.Job, error)
	InsertJob(ctx context.Context, j store.Job, perDeployment, total int) error
	UpdateJob(ctx context.Context, id, status string, record []byte) error
}

// Deployment is what a kind knows of the deployment its job runs for, as
// it was when the job started.
type Deployment struct {
	ID        string
	Namespace string // never empty: "default" when the spec names none
	Kind      apitype.DeploymentKind
	Spec      apitype.DeploymentSpec
}

// Request is one start of a job.
type Request struct {
	Deployment Deployment
	// Body is the start route's JSON body, empty when it sent none; the
	// kind decodes it.
	Body []byte
	// Fleet says the caller covers the whole fleet (not confined to a
	// namespace or a list of deployments); Caller names it, for logs.
	Fleet  bool
	Caller string
}

// Kind prepares a job of one kind: it checks req and returns what runs in
// the background. An error refuses the start and records no job; a
// *Error sets the HTTP status the start route answers, any other error
// is a 400.
type Kind func(ctx context.Context, req Request) (Run, error)

// Run is a prepared job. It returns nil when the job succeeded, or the
// error it failed with (its message, redacted, becomes the record's error).
type Run func(ctx context.Context, j *Job) error

// Error is an error with the HTTP status the admin API answers it with.
type Error struct {
	Status int
	Msg    string
	Err    error // a sentinel it is (errors.Is), or nil
}

func (e *Error) Error() string { return e.Msg }
func (e *Error) Unwrap() error { return e.Err }

// Errorf returns an *Error with status.
func Errorf(status int, format string, args ...any) *Error {
	return &Error{Status: status, Msg: fmt.Sprintf(format, args...)}
}

// Sentinels a start can fail with, each inside an *Error with its status.
var (
	ErrBusy        = errors.New("jobs: a job for the deployment is already running") // 409
	ErrUnknownKind = errors.New("jobs: no such job kind on this server")             // 501
	ErrPersist     = errors.New("jobs: the job could not be recorded")               // 503
	ErrClosed      = errors.New("jobs: the manager is shutting down")                // 503
	ErrNotFound    = errors.New("jobs: no such job")                                 // 404
)

// Causes of a job's cancellation, which become its error.
var (
	errShutdown = errors.New("berth shut down while the job ran")
	errDeleted  = errors.New("the deployment was deleted while the job ran")
)

// Options configure a Manager; zero fields take the defaults.
type Options struct {
	Store         Store
	Log           *slog.Logger
	Now           func() time.Time
	PerDeployment int // history kept per deployment (20)
	Total         int // history kept in all (2,000)
	LogLines      int // log lines kept per job (400)
	// OnLog, when set, is handed every line a job logs, redacted, after
	// the job's own log has it (the telemetry store's job output). It
	// must not block.
	OnLog func(namespace, deployment, jobID, line string)
}

// Manager runs jobs, one per deployment at a time.
type Manager struct {
	o Options

	mu      sync.Mutex
	kinds   map[apitype.JobKind]Kind
	busy    map[string]*Job            // by deployment; nil value: a start being prepared
	idle    map[string][]chan struct{} // by deployment: closed when busy is cleared (Idle)
	byID    map[string]*Job            // running jobs
	closed  bool
	closing chan struct{} // closed by Close
	wg      sync.WaitGroup
}

// New returns a manager over o.Store and marks the jobs it finds running
// as failed: no job runs before New, so such a record is one whose berth
// stopped without finishing it (a crash, kill -9, power loss).
func New(ctx context.Context, o Options) (*Manager, error) {
	if o.Store == nil {
		return nil, errors.New("jobs: a store is required")
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.PerDeployment <= 0 {
		o.PerDeployment = DefaultPerDeployment
	}
	if o.Total <= 0 {
		o.Total = DefaultTotal
	}
	if o.LogLines <= 0 {
		o.LogLines = DefaultLogLines
	}
	m := &Manager{o: o, kinds: map[apitype.JobKind]Kind{}, busy: map[string]*Job{}, idle: map[string][]chan struct{}{}, byID: map[string]*Job{}, closing: make(chan struct{})}
	rows, err := o.Store.Jobs(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("jobs: %w", err)
	}
	for _, row := range rows {
		if row.Status != string(apitype.JobRunning) {
			continue
		}
		var rec apitype.JobRecord
		if err := json.Unmarshal(row.Record, &rec); err != nil {
			rec = apitype.JobRecord{ID: row.ID, Deployment: row.Deployment, Kind: apitype.JobKind(row.Kind), StartedAt: row.StartedAt}
		}
		end := o.Now().Unix()
		msg := "berth restarted while the job ran: it was interrupted and did not finish"
		rec.Status, rec.FinishedAt, rec.Error = apitype.JobFailed, &end, &msg
		rec.Log = appendCapped(rec.Log, o.LogLines, "[berth] "+msg)
		b, _ := json.Marshal(rec)
		if err := o.Store.UpdateJob(ctx, row.ID, string(apitype.JobFailed), b); err != nil {
			return nil, fmt.Errorf("jobs: mark interrupted job %s failed: %w", row.ID, err)
		}
		o.Log.Warn("a job was interrupted by a restart", "job", row.ID, "deployment", row.Deployment, "kind", row.Kind)
	}
	return m, nil
}

// Register makes kind startable. Registering a kind again replaces it.
func (m *Manager) Register(kind apitype.JobKind, k Kind) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.kinds[kind] = k
}

// Registered reports whether kind can be started.
func (m *Manager) Registered(kind apitype.JobKind) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.kinds[kind] != nil
}

// Start starts a job of kind for req.Deployment and returns its record as
// stored. It fails with an *Error: ErrUnknownKind (501) for a kind not
// registered, ErrBusy (409) while the deployment's previous job runs,
// ErrPersist or ErrClosed (503), or the kind's own refusal.
func (m *Manager) Start(ctx context.Context, kind apitype.JobKind, req Request) (apitype.JobRecord, error) {
	id := req.Deployment.ID
	m.mu.Lock()
	k := m.kinds[kind]
	switch _, busy := m.busy[id]; {
	case m.closed:
		m.mu.Unlock()
		return apitype.JobRecord{}, &Error{Status: http.StatusServiceUnavailable, Msg: "berth is shutting down; start the job again once it is back", Err: ErrClosed}
	case k == nil:
		m.mu.Unlock()
		return apitype.JobRecord{}, &Error{Status: http.StatusNotImplemented, Msg: fmt.Sprintf("berth does not run %s jobs yet", kind), Err: ErrUnknownKind}
	case busy:
		m.mu.Unlock()
		return apitype.JobRecord{}, busyError(id)
	}
	m.busy[id] = nil // reserved while the kind prepares, so a second start is refused
	m.mu.Unlock()
	release := func() {
		m.mu.Lock()
		m.freeLocked(id)
		m.mu.Unlock()
	}

	run, err := safePrepare(ctx, kind, k, req)
	if err != nil {
		release()
		return apitype.JobRecord{}, err
	}
	jctx, cancel := context.WithCancelCause(context.Background())
	j := &Job{
		m: m, id: newID(), ns: req.Deployment.Namespace, cancel: cancel,
		changed: make(chan struct{}), dirty: make(chan struct{}, 1), stop: make(chan struct{}), stopped: make(chan struct{}),
		rec: apitype.JobRecord{Deployment: id, Kind: kind, Status: apitype.JobRunning, StartedAt: m.o.Now().Unix(), Log: []string{}},
	}
	j.rec.ID = j.id
	rec := j.rec
	b, _ := json.Marshal(rec)
	// Not cancelled with the request: a start whose client went away
	// mid-write must not leave a record the caller cannot know about.
	if err := m.o.Store.InsertJob(context.WithoutCancel(ctx), store.Job{
		ID: rec.ID, Deployment: id, Namespace: j.ns, Kind: string(kind), Status: string(rec.Status), StartedAt: rec.StartedAt, Record: b,
	}, m.o.PerDeployment, m.o.Total); err != nil {
		cancel(nil)
		release()
		return apitype.JobRecord{}, &Error{Status: http.StatusServiceUnavailable, Msg: "the job was not recorded, so it did not start: " + err.Error(), Err: ErrPersist}
	}
	m.mu.Lock()
	if m.closed {
		// Close ran while the record was written and waits for no one
		// started after it: the job ends here, before it ran.
		m.mu.Unlock()
		cancel(nil)
		release()
		end := m.o.Now().Unix()
		msg := errShutdown.Error()
		rec.Status, rec.FinishedAt, rec.Error = apitype.JobFailed, &end, &msg
		b, _ := json.Marshal(rec)
		m.o.Store.UpdateJob(context.WithoutCancel(ctx), rec.ID, string(rec.Status), b)
		return apitype.JobRecord{}, &Error{Status: http.StatusServiceUnavailable, Msg: "berth is shutting down; start the job again once it is back", Err: ErrClosed}
	}
	m.busy[id], m.byID[rec.ID] = j, j
	m.wg.Add(1)
	m.mu.Unlock()
	go j.writer()
	go j.run(jctx, run, req.Caller)
	return rec, nil
}

// Idle returns a channel that is closed once deployment has no job running
// or being prepared, so a start then is not refused with ErrBusy (unless
// another start came first): at once when it has none.
func (m *Manager) Idle(deployment string) <-chan struct{} {
	ch := make(chan struct{})
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, busy := m.busy[deployment]; !busy {
		close(ch)
		return ch
	}
	m.idle[deployment] = append(m.idle[deployment], ch)
	return ch
}

// freeLocked ends deployment id's turn: another start may run, and Idle's
// waiters are told. Callers hold m.mu.
func (m *Manager) freeLocked(id string) {
	delete(m.busy, id)
	for _, ch := range m.idle[id] {
		close(ch)
	}
	delete(m.idle, id)
}

func busyError(id string) *Error {
	return &Error{Status: http.StatusConflict, Msg: fmt.Sprintf("a job for deployment %q is already running", id), Err: ErrBusy}
}

// Info is a job's record and the namespace its deployment was in when it
// started, against which confined callers' walls are checked.
type Info struct {
	Record    apitype.JobRecord
	Namespace string
}

// Get returns one job, running or stored; a job not found (or pruned) is
// an *Error wrapping ErrNotFound.
func (m *Manager) Get(ctx context.Context, id string) (Info, error) {
	m.mu.Lock()
	j := m.byID[id]
	m.mu.Unlock()
	if j != nil {
		return j.info(), nil
	}
	row, err := m.o.Store.Job(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return Info{}, NotFound(id)
	}
	if err != nil {
		return Info{}, &Error{Status: http.StatusServiceUnavailable, Msg: "the job history could not be read: " + err.Error(), Err: err}
	}
	return decode(row)
}

// NotFound is the answer for a job that does not exist, or that the
// caller may not see: the same words, so there is no existence oracle.
func NotFound(id string) *Error {
	return &Error{Status: http.StatusNotFound, Msg: fmt.Sprintf("no job %q — it may have aged out of the job history", id), Err: ErrNotFound}
}

// List returns the jobs of deployment (every deployment's when empty),
// newest first; running jobs show their live record.
func (m *Manager) List(ctx context.Context, deployment string) ([]Info, error) {
	rows, err := m.o.Store.Jobs(ctx, deployment)
	if err != nil {
		return nil, &Error{Status: http.StatusServiceUnavailable, Msg: "the job history could not be read: " + err.Error(), Err: err}
	}
	out := make([]Info, 0, len(rows))
	for _, row := range rows {
		m.mu.Lock()
		j := m.byID[row.ID]
		m.mu.Unlock()
		if j != nil {
			out = append(out, j.info())
			continue
		}
		in, err := decode(row)
		if err != nil {
			m.o.Log.Warn("a stored job record does not decode", "job", row.ID, "err", err)
			continue
		}
		out = append(out, in)
	}
	return out, nil
}

func decode(row store.Job) (Info, error) {
	var rec apitype.JobRecord
	if err := json.Unmarshal(row.Record, &rec); err != nil {
		return Info{}, fmt.Errorf("jobs: job %s: %w", row.ID, err)
	}
	if rec.Log == nil {
		rec.Log = []string{}
	}
	return Info{Record: rec, Namespace: row.Namespace}, nil
}

// Follow calls line with each line of job id's log, in order; with follow,
// it then waits for new lines and calls line with each, until the job
// finishes, ctx ends or the manager closes. It returns the job's record
// as of its last line. An error from line ends it with that error.
func (m *Manager) Follow(ctx context.Context, id string, follow bool, line func(string) error) (apitype.JobRecord, error) {
	m.mu.Lock()
	j := m.byID[id]
	m.mu.Unlock()
	if j == nil {
		in, err := m.Get(ctx, id)
		if err != nil {
			return apitype.JobRecord{}, err
		}
		for _, l := range in.Record.Log {
			if err := line(l); err != nil {
				return in.Record, err
			}
		}
		return in.Record, nil
	}
	sent := 0 // lines of j's whole log passed to line so far
	for {
		j.mu.Lock()
		rec, total, changed, done := j.snapshot(), j.total, j.changed, j.finished
		j.mu.Unlock()
		// The record keeps the last len(rec.Log) of total lines.
		from := max(len(rec.Log)-(total-sent), 0)
		for _, l := range rec.Log[from:] {
			if err := line(l); err != nil {
				return rec, err
			}
		}
		sent = total
		if done || !follow {
			return rec, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return rec, ctx.Err()
		case <-m.closing:
			// Close finishes every job; one more turn sends its end.
			follow = false
			<-j.finishedCh()
		}
	}
}

// Cancel cancels the running job of deployment, if any: it is being
// deleted. The job fails with an error saying so.
func (m *Manager) Cancel(deployment string) {
	m.mu.Lock()
	j := m.busy[deployment]
	m.mu.Unlock()
	if j != nil {
		j.cancel(errDeleted)
	}
}

// Close cancels every running job and waits until each has finished and
// its final record is written. Starts after Close are refused.
func (m *Manager) Close() {
	m.mu.Lock()
	if !m.closed {
		m.closed = true
		close(m.closing)
	}
	js := make([]*Job, 0, len(m.byID))
	for _, j := range m.byID {
		js = append(js, j)
	}
	m.mu.Unlock()
	for _, j := range js {
		j.cancel(errShutdown)
	}
	m.wg.Wait()
}

// Job is the handle of a running job its Run is given: it appends to the
// log and sets outcome fields. It is safe for concurrent use (a kind may
// log a command's stdout and stderr from two goroutines).
type Job struct {
	m      *Manager
	id, ns string
	cancel context.CancelCauseFunc

	mu       sync.Mutex
	rec      apitype.JobRecord
	total    int           // lines ever logged; rec.Log holds the last of them
	secrets  []string      // masked in every line, longest first
	changed  chan struct{} // closed and replaced at every change (followers)
	finished bool
	fin      chan struct{} // closed when finished (lazily made)

	dirty   chan struct{} // (cap 1) the writer has something to write
	stop    chan struct{} // closed: the writer exits
	stopped chan struct{} // closed by the writer on exit
}

// ID is the job's id.
func (j *Job) ID() string { return j.id }

// mask is what a secret value is replaced with in the log.
const mask = "[redacted]"

// Redact masks each non-empty value in every later log line and in the
// job's error. Call it with every secret the job holds before logging.
func (j *Job) Redact(values ...string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	add := func(v string) {
		if v != "" && !slices.Contains(j.secrets, v) {
			j.secrets = append(j.secrets, v)
		}
	}
	for _, v := range values {
		add(v)
		// Output reaches the log a line at a time, so each line of a
		// multi-line secret (a PEM key) is masked on its own too.
		if strings.ContainsAny(v, "\r\n") {
			for l := range strings.FieldsFuncSeq(v, func(r rune) bool { return r == '\n' || r == '\r' }) {
				add(l)
			}
		}
	}
	// Longest first, so a secret containing another is masked whole.
	slices.SortFunc(j.secrets, func(a, b string) int { return len(b) - len(a) })
}

func (j *Job) redact(s string) string {
	for _, v := range j.secrets {
		s = strings.ReplaceAll(s, v, mask)
	}
	return s
}

// Log appends text to the job's log, one line per line of text (a
// trailing newline adds none), each redacted and cut at 4 KiB.
func (j *Job) Log(text string) {
	text = strings.TrimSuffix(text, "\n")
	j.mu.Lock()
	text = j.redact(text) // whole first: a secret may span lines
	var lines []string
	for l := range strings.SplitSeq(text, "\n") {
		l = j.redact(strings.TrimSuffix(l, "\r"))
		if len(l) > maxLine {
			l = strings.ToValidUTF8(l[:maxLine], "") + " […]"
		}
		j.rec.Log = appendCapped(j.rec.Log, j.m.o.LogLines, l)
		j.total++
		if j.m.o.OnLog != nil {
			lines = append(lines, l)
		}
	}
	dep := j.rec.Deployment
	j.changedLocked()
	j.mu.Unlock()
	for _, l := range lines {
		j.m.o.OnLog(j.ns, dep, j.id, l)
	}
}

// Logf appends a formatted line (or lines) to the job's log.
func (j *Job) Logf(format string, args ...any) { j.Log(fmt.Sprintf(format, args...)) }

// Set changes the record's outcome fields through fn. The fields the
// manager owns (id, deployment, kind, status, times, error, log) keep
// their values whatever fn does. The record keeps what fn stores: a
// pointer or slice stored must not be changed afterwards (store a fresh
// one each time), since the record is read while the job runs.
func (j *Job) Set(fn func(*apitype.JobRecord)) {
	j.mu.Lock()
	own := j.rec
	fn(&j.rec)
	j.rec.ID, j.rec.Deployment, j.rec.Kind, j.rec.Status = own.ID, own.Deployment, own.Kind, own.Status
	j.rec.StartedAt, j.rec.FinishedAt, j.rec.Error, j.rec.Log = own.StartedAt, own.FinishedAt, own.Error, own.Log
	j.changedLocked()
	j.mu.Unlock()
}

// changedLocked wakes the followers and the writer.
func (j *Job) changedLocked() {
	close(j.changed)
	j.changed = make(chan struct{})
	select {
	case j.dirty <- struct{}{}:
	default:
	}
}

// snapshot copies the record (its slices too); j.mu held.
func (j *Job) snapshot() apitype.JobRecord {
	r := j.rec
	r.Log = slices.Clone(j.rec.Log)
	r.Mounts = slices.Clone(j.rec.Mounts)
	return r
}

func (j *Job) info() Info {
	j.mu.Lock()
	defer j.mu.Unlock()
	return Info{Record: j.snapshot(), Namespace: j.ns}
}

func (j *Job) finishedCh() <-chan struct{} {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.fin == nil {
		j.fin = make(chan struct{})
		if j.finished {
			close(j.fin)
		}
	}
	return j.fin
}

// writeGap is the least time between two writes of a running job's
// record: a chatty build must not fsync the store once per line, and
// every write rewrites the whole record. (The final write does not wait.)
const writeGap = 250 * time.Millisecond

// writer writes the record whenever it changed, at most once per
// writeGap, until stop: a write covers every change made since the last.
func (j *Job) writer() {
	defer close(j.stopped)
	warned := false
	for {
		select {
		case <-j.stop:
			return
		case <-j.dirty:
		}
		select {
		case <-j.stop:
			return // the final write has it all
		case <-time.After(writeGap):
		}
		j.mu.Lock()
		b, _ := json.Marshal(j.rec)
		j.mu.Unlock()
		if err := j.m.o.Store.UpdateJob(context.Background(), j.id, string(apitype.JobRunning), b); err != nil && !warned {
			// The final write retries; until then the live record is
			// served from memory.
			warned = true
			j.m.o.Log.Warn("could not write a running job's record", "job", j.id, "err", err)
		}
	}
}

func (j *Job) run(ctx context.Context, run Run, caller string) {
	m := j.m
	defer m.wg.Done()
	j.mu.Lock()
	m.o.Log.Info("job started", "job", j.id, "deployment", j.rec.Deployment, "kind", j.rec.Kind, "by", caller)
	j.mu.Unlock()
	err := safeRun(ctx, run, j)
	if cause := context.Cause(ctx); ctx.Err() != nil && cause != nil && !errors.Is(err, cause) {
		if err != nil {
			err = fmt.Errorf("%w (%v)", cause, err)
		} else {
			err = cause
		}
	}
	j.cancel(nil)
	close(j.stop)
	<-j.stopped

	j.mu.Lock()
	end := m.o.Now().Unix()
	j.rec.FinishedAt = &end
	j.rec.Status = apitype.JobSucceeded
	if err != nil {
		msg := j.redact(err.Error())
		j.rec.Status, j.rec.Error = apitype.JobFailed, &msg
	}
	final := j.rec
	b, _ := json.Marshal(final)
	j.mu.Unlock()

	// The job counts as finished only once this is durable: retried a
	// few times, since its deployment cannot start another until then.
	var werr error
	for i := range 3 {
		if werr = m.o.Store.UpdateJob(context.Background(), final.ID, string(final.Status), b); werr == nil {
			break
		}
		time.Sleep(time.Duration(i+1) * 100 * time.Millisecond)
	}
	if werr != nil {
		// Left "running" in the store: the next start marks it failed.
		m.o.Log.Error("could not write a finished job's record", "job", final.ID, "err", werr)
	}
	m.o.Log.Info("job finished", "job", final.ID, "deployment", final.Deployment, "kind", final.Kind, "status", final.Status)

	m.mu.Lock()
	delete(m.byID, final.ID)
	if m.busy[final.Deployment] == j {
		m.freeLocked(final.Deployment)
	}
	m.mu.Unlock()
	j.mu.Lock()
	j.finished = true
	close(j.changed)
	j.changed = make(chan struct{})
	if j.fin != nil {
		close(j.fin)
	}
	j.mu.Unlock()
}

// safePrepare runs a kind's preparation, a panic becoming a refusal: the
// deployment's reservation must be released whatever the kind does.
func safePrepare(ctx context.Context, kind apitype.JobKind, k Kind, req Request) (run Run, err error) {
	defer func() {
		if p := recover(); p != nil {
			run, err = nil, Errorf(http.StatusInternalServerError, "the job could not be prepared: %v", p)
		}
	}()
	run, err = k(ctx, req)
	if err == nil && run == nil {
		err = Errorf(http.StatusInternalServerError, "the %s kind prepared no job", kind)
	}
	return run, err
}

// safeRun runs run, turning a panic into the job's failure: a kind's bug
// must not take berth down nor leave the deployment busy for ever.
func safeRun(ctx context.Context, run Run, j *Job) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("the job failed unexpectedly: %v", p)
		}
	}()
	return run(ctx, j)
}

func appendCapped(log []string, n int, line string) []string {
	log = append(log, line)
	if len(log) > n {
		log = slices.Delete(log, 0, len(log)-n)
	}
	return log
}

func newID() string {
	var b [8]byte
	rand.Read(b[:])
	return "job-" + hex.EncodeToString(b[:])
}
