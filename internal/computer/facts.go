package computer

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/berth-dev/berth/internal/store"
)

// Fact kinds (computerFactSchema).
const (
	FactProcessExited = "process.exited"
	FactFilesWritten  = "files.written"
	FactEgress        = "egress"
	FactLifecycle     = "lifecycle"
	FactInterval      = "interval"
)

// Fact is an observation about a Computer. Its JSON is exactly the
// contract's computerFactSchema: an object discriminated by kind, with only
// the fields of that kind (camelCase; exitCode and cpuTimeMs are null when
// unknown, never a made-up zero). Which fields count depends on Kind.
type Fact struct {
	Kind       string
	ComputerID string
	Provenance Provenance

	// process.exited: RequestID names the process (or request) that ran;
	// ExitCode is nil when the process was killed without a status;
	// CPUTimeMs is nil when not measured.
	RequestID  string
	ExitCode   *int
	CPUTimeMs  *int64
	WallTimeMs int64

	// files.written
	Path  string
	Bytes int64

	// egress (package egress's proxy): Host is the destination host only;
	// Method is the HTTP method, or "CONNECT" for an HTTPS tunnel, whose
	// Status is the proxy's answer to the CONNECT (berth does not
	// intercept TLS, so the method and status inside are unknown).
	Host   string
	Method string
	Status int

	// lifecycle (ObservedAt, State) and interval (ObservedAt and the rest),
	// times in Unix milliseconds.
	ObservedAt int64
	State      State
	RuntimeID  string
	Backing    Backing
	StartedAt  int64
	Ended      bool
}

// FactRecord is a stored fact and its sequence number, which increases by
// one per fact of the Computer and is the resume cursor of Facts.
type FactRecord struct {
	Seq  int64 `json:"seq"`
	Fact Fact  `json:"fact"`
}

// MarshalJSON writes the fields of f's kind, in the contract's order.
func (f Fact) MarshalJSON() ([]byte, error) {
	var v any
	switch f.Kind {
	case FactProcessExited:
		v = struct {
			Kind       string     `json:"kind"`
			RequestID  string     `json:"requestId"`
			ExitCode   *int       `json:"exitCode"`
			CPUTimeMs  *int64     `json:"cpuTimeMs"`
			WallTimeMs int64      `json:"wallTimeMs"`
			ComputerID string     `json:"computerId"`
			Provenance Provenance `json:"provenance"`
		}{f.Kind, f.RequestID, f.ExitCode, f.CPUTimeMs, f.WallTimeMs, f.ComputerID, f.Provenance}
	case FactFilesWritten:
		v = struct {
			Kind       string     `json:"kind"`
			Path       string     `json:"path"`
			Bytes      int64      `json:"bytes"`
			ComputerID string     `json:"computerId"`
			Provenance Provenance `json:"provenance"`
		}{f.Kind, f.Path, f.Bytes, f.ComputerID, f.Provenance}
	case FactEgress:
		v = struct {
			Kind       string     `json:"kind"`
			Host       string     `json:"host"`
			Method     string     `json:"method"`
			Status     int        `json:"status"`
			ComputerID string     `json:"computerId"`
			Provenance Provenance `json:"provenance"`
		}{f.Kind, f.Host, f.Method, f.Status, f.ComputerID, f.Provenance}
	case FactLifecycle:
		v = struct {
			Kind       string     `json:"kind"`
			ObservedAt int64      `json:"observedAt"`
			State      State      `json:"state"`
			ComputerID string     `json:"computerId"`
			Provenance Provenance `json:"provenance"`
		}{f.Kind, f.ObservedAt, f.State, f.ComputerID, f.Provenance}
	case FactInterval:
		v = struct {
			RuntimeID  string     `json:"runtimeId"`
			Backing    Backing    `json:"backing"`
			StartedAt  int64      `json:"startedAt"`
			ObservedAt int64      `json:"observedAt"`
			Ended      bool       `json:"ended"`
			Kind       string     `json:"kind"`
			ComputerID string     `json:"computerId"`
			Provenance Provenance `json:"provenance"`
		}{f.RuntimeID, f.Backing, f.StartedAt, f.ObservedAt, f.Ended, f.Kind, f.ComputerID, f.Provenance}
	default:
		return nil, fmt.Errorf("computer: fact of unknown kind %q", f.Kind)
	}
	return json.Marshal(v)
}

// factJSON is every field any kind has, for decoding.
type factJSON struct {
	Kind       string      `json:"kind"`
	ComputerID string      `json:"computerId"`
	Provenance *Provenance `json:"provenance"`
	RequestID  string      `json:"requestId"`
	ExitCode   *int        `json:"exitCode"`
	CPUTimeMs  *int64      `json:"cpuTimeMs"`
	WallTimeMs int64       `json:"wallTimeMs"`
	Path       string      `json:"path"`
	Bytes      int64       `json:"bytes"`
	Host       string      `json:"host"`
	Method     string      `json:"method"`
	Status     int         `json:"status"`
	ObservedAt int64       `json:"observedAt"`
	State      State       `json:"state"`
	RuntimeID  string      `json:"runtimeId"`
	Backing    Backing     `json:"backing"`
	StartedAt  int64       `json:"startedAt"`
	Ended      bool        `json:"ended"`
}

// UnmarshalJSON reads a fact of any kind and checks it (see Validate).
func (f *Fact) UnmarshalJSON(b []byte) error {
	var j factJSON
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&j); err != nil {
		return fmt.Errorf("computer: malformed fact: %w", err)
	}
	var prov Provenance
	if j.Provenance != nil {
		prov = *j.Provenance
	}
	*f = Fact{
		Kind: j.Kind, ComputerID: j.ComputerID, Provenance: prov,
		RequestID: j.RequestID, ExitCode: j.ExitCode, CPUTimeMs: j.CPUTimeMs, WallTimeMs: j.WallTimeMs,
		Path: j.Path, Bytes: j.Bytes, Host: j.Host, Method: j.Method, Status: j.Status,
		ObservedAt: j.ObservedAt, State: j.State, RuntimeID: j.RuntimeID, Backing: j.Backing,
		StartedAt: j.StartedAt, Ended: j.Ended,
	}
	return f.Validate()
}

// Validate checks what the schema requires of f's kind.
func (f Fact) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: fact: "+format, append([]any{ErrInvalid}, args...)...)
	}
	if f.ComputerID == "" {
		return bad("computerId is required")
	}
	if f.Provenance.Actor == "" {
		return bad("provenance.actor is required")
	}
	switch f.Kind {
	case FactProcessExited:
		if f.WallTimeMs < 0 || (f.CPUTimeMs != nil && *f.CPUTimeMs < 0) {
			return bad("times must not be negative")
		}
	case FactFilesWritten:
		if f.Path == "" || f.Bytes < 0 {
			return bad("files.written needs a path and bytes ≥ 0")
		}
	case FactEgress:
		if f.Host == "" || f.Method == "" || f.Status < 100 || f.Status > 599 {
			return bad("egress needs a host, a method and a status from 100 to 599")
		}
	case FactLifecycle:
		switch f.State.State {
		case StateRunning, StateSleeping, StateStarting:
			if f.State.Position != nil {
				return bad("state %s has no position", f.State.State)
			}
		case StateQueued:
			if f.State.Position == nil {
				return bad("state queued needs a position")
			}
		default:
			return bad("unknown state %q", f.State.State)
		}
	case FactInterval:
		if f.RuntimeID == "" || f.Backing.Kind == "" || f.ObservedAt < f.StartedAt {
			return bad("interval needs a runtimeId, a backing and observedAt ≥ startedAt")
		}
	default:
		return bad("unknown kind %q", f.Kind)
	}
	return nil
}

// Emit appends a fact to its Computer's log (f.ComputerID must exist) and
// wakes the WaitFacts of that Computer.
func (m *Manager) Emit(ctx context.Context, f Fact) error {
	if err := f.Validate(); err != nil {
		return err
	}
	_, err := m.emit(ctx, f, "", true)
	return err
}

// emit appends f unless dedupe (when set) was appended before.
func (m *Manager) emit(ctx context.Context, f Fact, dedupe string, mustExist bool) (bool, error) {
	body, err := json.Marshal(f)
	if err != nil {
		return false, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	_, appended, err := m.st.AppendComputerFact(ctx, f.ComputerID, dedupe, m.now().UnixMilli(), body, mustExist)
	if err != nil {
		return false, m.storeErr(err)
	}
	if appended {
		m.notifyFacts(f.ComputerID)
	}
	return appended, nil
}

// emitLifecycle records a state change the manager made; failures are
// logged, not returned: the change itself has happened.
func (m *Manager) emitLifecycle(ctx context.Context, id string, st State, via string) {
	if _, err := m.emit(context.WithoutCancel(ctx), lifecycleFact(id, m.now().UnixMilli(), st, via), "", false); err != nil {
		m.log.Warn("computer: recording a lifecycle fact", "computer", id, "err", err)
	}
}

func lifecycleFact(id string, at int64, st State, via string) Fact {
	return Fact{Kind: FactLifecycle, ComputerID: id, ObservedAt: at, State: st, Provenance: Provenance{Actor: Actor, Via: via}}
}

// lifecycleFacts is a lifecycle fact for the store to append in the same
// transaction as the state change it reports, which saves a commit; the
// caller wakes the fact's readers (notifyFacts) once that write returned.
// A fact that does not encode (it cannot: the manager made it) is logged
// and left out, like a failed emitLifecycle, rather than failing the
// change.
func (m *Manager) lifecycleFacts(id string, st State, via string) []store.NewComputerFact {
	at := m.now().UnixMilli()
	body, err := json.Marshal(lifecycleFact(id, at, st, via))
	if err != nil {
		m.log.Warn("computer: recording a lifecycle fact", "computer", id, "err", err)
		return nil
	}
	return []store.NewComputerFact{{At: at, Body: body}}
}

// Actor is the provenance actor of facts the manager records itself.
const Actor = "berth"

// DefaultFactsLimit and MaxFactsLimit bound a page of Facts.
const (
	DefaultFactsLimit = 100
	MaxFactsLimit     = 1000
)

// Facts returns the facts of Computer id after sequence number after, in
// order, at most limit (DefaultFactsLimit when ≤ 0, at most MaxFactsLimit).
// Facts older than the retention period are gone; a cursor pointing before
// them just continues with the oldest kept.
func (m *Manager) Facts(ctx context.Context, id string, after int64, limit int) ([]FactRecord, error) {
	if limit <= 0 {
		limit = DefaultFactsLimit
	}
	limit = min(limit, MaxFactsLimit)
	rows, err := m.st.ComputerFacts(ctx, id, after, limit)
	if err != nil {
		return nil, m.storeErr(err)
	}
	out := make([]FactRecord, 0, len(rows))
	for _, r := range rows {
		var f Fact
		if err := json.Unmarshal(r.Body, &f); err != nil {
			return nil, fmt.Errorf("computer: stored fact %d of %s: %w", r.Seq, id, err)
		}
		out = append(out, FactRecord{Seq: r.Seq, Fact: f})
	}
	return out, nil
}

// WaitFacts returns a channel that is closed once Computer id has a fact
// with a sequence number above after (at once if it has one already). It
// serves server-sent-event streams: wait, read Facts, repeat; select on
// ctx too, the channel is not closed when ctx ends.
func (m *Manager) WaitFacts(ctx context.Context, id string, after int64) <-chan struct{} {
	m.factMu.Lock()
	ch, ok := m.factCh[id]
	if !ok {
		ch = make(chan struct{})
		m.factCh[id] = ch
	}
	m.factMu.Unlock()
	// Read after taking the channel: a fact appended in between closes it.
	if last, err := m.st.LastComputerFactSeq(ctx, id); err != nil || last > after {
		// On a store error the caller's next Facts reports it.
		closed := make(chan struct{})
		close(closed)
		return closed
	}
	return ch
}

func (m *Manager) notifyFacts(id string) {
	m.factMu.Lock()
	if ch, ok := m.factCh[id]; ok {
		close(ch)
		delete(m.factCh, id)
	}
	m.factMu.Unlock()
}

// expireFacts deletes facts past the retention period.
func (m *Manager) expireFacts(ctx context.Context) {
	if m.o.FactRetention < 0 {
		return
	}
	cut := m.now().Add(-m.o.FactRetention).UnixMilli()
	if _, err := m.st.DeleteComputerFactsBefore(ctx, cut); err != nil {
		m.log.Warn("computer: expiring facts", "err", err)
	}
}
