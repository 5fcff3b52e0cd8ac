package computer

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/berth-dev/berth/apitype/computertype"

	"github.com/berth-dev/berth/internal/store"
)

// Fact kinds (computerFactSchema).
const (
	FactProcessExited = computertype.FactProcessExited
	FactFilesWritten  = computertype.FactFilesWritten
	FactEgress        = computertype.FactEgress
	FactLifecycle     = computertype.FactLifecycle
	FactInterval      = computertype.FactInterval
)

// Fact is an observation about a Computer: the contract's
// computerFactSchema, whose JSON (one object per kind) and rules
// (Validate) are the wire package's.
type Fact = computertype.ComputerFact

// FactRecord is a stored fact and its sequence number, which increases by
// one per fact of the Computer and is the resume cursor of Facts.
type FactRecord = computertype.FactRecord

// Emit appends a fact to its Computer's log (f.ComputerID must exist) and
// wakes the WaitFacts of that Computer.
func (m *Manager) Emit(ctx context.Context, f Fact) error {
	if err := f.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
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
