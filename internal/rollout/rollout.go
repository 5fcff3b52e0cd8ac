// Package rollout keeps the durable record of vm deployments' candidate-first
// rollouts (app-lb's RolloutOperation): every spec write that changes a
// deployment's replica template (or lands while a rollout runs) goes
// through Manager.Write, which stores the spec through the registry and
// records an operation; the fleet's pools run the rollout and report its
// steps (fleet.RolloutEvent), which the manager stores. A failed rollout is
// settled with a compensating write: the deployment's stored spec goes back
// to the revision the pool fell back to, so GET, the ETag and the pool
// agree. At start-up, before the registry loads, Settle ends the operations
// a killed berth left running.
package rollout

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/fleet"
	"github.com/berth-dev/berth/internal/registry"
	"github.com/berth-dev/berth/internal/spec"
	"github.com/berth-dev/berth/internal/store"
	"github.com/berth-dev/berth/internal/web"
)

// Keep is how many operations (and so previous specs, for undo) berth
// keeps per deployment; running ones are never dropped.
const Keep = 20

// Store is the persistence the manager needs (implemented by *store.Store).
type Store interface {
	PutRollout(ctx context.Context, r store.Rollout, keep int) (store.Rollout, error)
	UpdateRollout(ctx context.Context, r store.Rollout) error
	Rollout(ctx context.Context, deployment, operation string) (store.Rollout, error)
	Rollouts(ctx context.Context, deployment string, limit int) ([]store.Rollout, error)
	RunningRollouts(ctx context.Context) ([]store.Rollout, error)
	Deployment(ctx context.Context, id string) (store.Deployment, error)
	PutDeployment(ctx context.Context, d store.Deployment, createOnly bool, ifRevision int64) (store.Deployment, error)
}

// Manager records rollouts. Safe for concurrent use.
type Manager struct {
	st  Store
	log *slog.Logger
	reg *registry.Registry // set by SetRegistry, before the first write

	// mu serialises the writes that may start a rollout with the
	// handling of the pools' events, so an event is never handled before
	// its operation is recorded.
	mu      sync.Mutex
	running map[string]*store.Rollout // by deployment + "\x00" + target revision

	qmu   sync.Mutex
	queue []fleet.RolloutEvent
	wake  chan struct{}
}

// New returns a manager; call Run to handle the pools' events.
func New(st Store, log *slog.Logger) *Manager {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Manager{st: st, log: log, running: map[string]*store.Rollout{}, wake: make(chan struct{}, 1)}
}

// SetRegistry hands the manager the registry it writes through.
func (m *Manager) SetRegistry(r *registry.Registry) { m.reg = r }

func key(dep, rev string) string { return dep + "\x00" + rev }

// Event is fleet.Options.OnRollout: it queues the event for Run and
// returns at once.
func (m *Manager) Event(ev fleet.RolloutEvent) {
	m.qmu.Lock()
	m.queue = append(m.queue, ev)
	m.qmu.Unlock()
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// Run handles the queued events, in order, until ctx ends.
func (m *Manager) Run(ctx context.Context) error {
	for {
		m.qmu.Lock()
		q := m.queue
		m.queue = nil
		m.qmu.Unlock()
		for _, ev := range q {
			m.handle(ctx, ev)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-m.wake:
		}
	}
}

// Settlement is a failed operation's failure_settlement.
type Settlement struct {
	// CandidatesStopped are the candidate replicas stopped.
	CandidatesStopped []string `json:"candidates_stopped"`
	// SpecRevertedTo is the rollout_revision the stored spec went back
	// to; "" when it was not reverted (a newer write had replaced it).
	SpecRevertedTo string `json:"spec_reverted_to,omitempty"`
	// Reason says how the operation was settled.
	Reason string `json:"reason"`
}

func (m *Manager) handle(ctx context.Context, ev fleet.RolloutEvent) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := key(ev.Deployment, ev.Revision)
	op := m.running[k]
	if op == nil {
		return // a write that started no operation (a create, say)
	}
	op.Phase = ev.Phase
	op.ReadinessVerified = op.ReadinessVerified || ev.ReadinessVerified
	op.PreviousStopped = ev.PreviousStopped
	switch ev.Status {
	case fleet.RolloutRunning:
	case fleet.RolloutSucceeded:
		op.Status = "succeeded"
		delete(m.running, k)
	case fleet.RolloutSuperseded:
		op.Status, op.Error = "failed", ev.Error
		op.FailureSettlement, _ = json.Marshal(Settlement{CandidatesStopped: []string{}, Reason: "superseded: the newer rollout replaces this one's candidates"})
		delete(m.running, k)
	case fleet.RolloutFailed:
		op.Status, op.Error = "failed", ev.Error
		settle := Settlement{CandidatesStopped: ev.Stopped, Reason: "a candidate failed readiness; the previous revision kept serving"}
		if settle.CandidatesStopped == nil {
			settle.CandidatesStopped = []string{}
		}
		rev, err := m.revert(ctx, op)
		switch {
		case err != nil:
			m.log.Error("could not revert the spec of a failed rollout", "deployment", op.Deployment, "operation", op.OperationID, "err", err)
			op.Status = "reconciliation_required"
			op.Error = ev.Error + "; reverting the stored spec failed: " + err.Error()
		case rev != "" && rev != op.FallbackRevision:
			// What the server stamps into a spec (a mount's pulled
			// digest) made the revert come out as another revision.
			op.Status = "reconciliation_required"
			op.Error = ev.Error + "; the stored spec could not be put back to revision " + op.FallbackRevision + " (it came out as " + rev + ")"
			settle.SpecRevertedTo = rev
		default:
			settle.SpecRevertedTo = rev
		}
		op.FailureSettlement, _ = json.Marshal(settle)
		delete(m.running, k)
	}
	if err := m.st.UpdateRollout(ctx, *op); err != nil && !errors.Is(err, store.ErrNotFound) {
		m.log.Error("could not record a rollout step", "deployment", op.Deployment, "operation", op.OperationID, "err", err)
	}
}

// revert is a failed rollout's compensating write: the deployment's spec
// goes back to the operation's fallback, if it is still the target (a
// newer write wins). It returns the revision written, "" for none.
func (m *Manager) revert(ctx context.Context, op *store.Rollout) (string, error) {
	e, ok := m.reg.Get(op.Deployment)
	if !ok || e.RolloutRevision() != op.TargetRevision {
		return "", nil
	}
	var s apitype.DeploymentSpec
	if err := json.Unmarshal(op.FallbackSpec, &s); err != nil {
		return "", err
	}
	ne, _, err := m.reg.Put(ctx, s, registry.PutOptions{MustExist: true, IfMatch: e.ETag})
	if err != nil {
		return "", err
	}
	return ne.RolloutRevision(), nil
}

// Request is one rollout request: POST /deployments/{id}/rollouts, or a
// spec write (OperationID "" for a generated one).
type Request struct {
	OperationID string
	// ExpectedRevision, when set, is the rollout_revision the deployment
	// must have.
	ExpectedRevision string
	Spec             apitype.DeploymentSpec
	// Always records an operation even when the template did not change
	// (POST …/rollouts; a plain PUT records one only for a template
	// change).
	Always bool
}

// requestSum is what an idempotent retry is compared by.
func requestSum(s *apitype.DeploymentSpec) string {
	b, err := spec.Canonical(s)
	if err != nil {
		b, _ = json.Marshal(s)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Write stores req.Spec through the registry with o and records a rollout
// operation when the write changes a vm deployment's replica template, a
// rollout is running, or req.Always. It returns the entry and the
// operation (nil when none was recorded). A retried request (same
// operation id and spec) returns the operation it recorded, with a nil
// entry; the same id with another spec is a 409.
func (m *Manager) Write(ctx context.Context, req Request, o registry.PutOptions) (*registry.Entry, *apitype.RolloutOperation, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	sum := requestSum(&req.Spec)
	id := req.Spec.ID
	if req.OperationID != "" {
		prev, err := m.st.Rollout(ctx, id, req.OperationID)
		switch {
		case err == nil && prev.RequestSHA256 == sum:
			op := Wire(prev)
			return nil, &op, nil
		case err == nil:
			return nil, nil, &web.Error{Status: http.StatusConflict,
				Message: fmt.Sprintf("operation_id: %q was already used for another spec of deployment %q", req.OperationID, id)}
		case !errors.Is(err, store.ErrNotFound):
			return nil, nil, &web.Error{Status: http.StatusInternalServerError, Message: "could not read the rollout", Err: err}
		}
	}
	prev, had := m.reg.Get(id)
	if req.ExpectedRevision != "" {
		if !had {
			return nil, nil, registry.ErrNotFound
		}
		if prev.RolloutRevision() != req.ExpectedRevision {
			return nil, nil, &web.Error{Status: http.StatusConflict,
				Message: fmt.Sprintf("expected_revision: deployment %q is at revision %s, not %s", id, prev.RolloutRevision(), req.ExpectedRevision)}
		}
		o.IfMatch = prev.ETag
	}
	e, _, err := m.reg.Put(ctx, req.Spec, o)
	if err != nil {
		if errors.Is(err, registry.ErrPrecondition) && req.ExpectedRevision != "" {
			return nil, nil, &web.Error{Status: http.StatusConflict,
				Message: fmt.Sprintf("expected_revision: deployment %q changed while the rollout was admitted", id)}
		}
		return nil, nil, err
	}
	vm := had && prev.Kind == apitype.KindVM && e.Kind == apitype.KindVM
	if o.DryRun || !had || !vm && !req.Always {
		return e, nil, nil
	}
	var running *store.Rollout
	for _, r := range m.running {
		if r.Deployment == id {
			running = r
		}
	}
	if !req.Always && running == nil && registry.TemplateKey(&prev.Spec) == registry.TemplateKey(&e.Spec) {
		return e, nil, nil
	}
	source, _ := json.Marshal(&prev.Spec)
	r := store.Rollout{
		Deployment: id, OperationID: req.OperationID, RequestSHA256: sum,
		SourceRevision: prev.RolloutRevision(), TargetRevision: e.RolloutRevision(),
		Status: "running", Phase: fleet.PhaseCandidates, SourceSpec: source,
		FallbackRevision: prev.RolloutRevision(), FallbackSpec: source,
	}
	if r.OperationID == "" {
		r.OperationID = newID()
	}
	if running != nil {
		// It supersedes the running one, and falls back where it would
		// have (fleet: a superseding rollout keeps the settled template).
		r.FallbackRevision, r.FallbackSpec = running.FallbackRevision, running.FallbackSpec
	}
	if r.TargetRevision == r.SourceRevision {
		r.Status, r.Phase, r.ReadinessVerified, r.PreviousStopped = "succeeded", fleet.PhaseDone, true, true
	}
	if (!vm || e.VMPool == nil) && r.Status == "running" {
		// Not a pool (a static or site deployment, or one becoming or
		// leaving vm), or none yet (its image or mounts are being
		// pulled): the spec is in effect, with nothing to verify.
		r.Status, r.Phase, r.PreviousStopped = "succeeded", fleet.PhaseSwitched, true
	}
	if p := e.VMPool; p != nil && r.Status == "running" {
		if _, ok := p.Rollout(); !ok && registry.TemplateKey(&prev.Spec) == registry.TemplateKey(&e.Spec) {
			// Nothing for the pool to roll: the write is in effect.
			r.Status, r.Phase, r.PreviousStopped = "succeeded", fleet.PhaseDone, true
		}
	}
	stored, err := m.st.PutRollout(ctx, r, Keep)
	if err != nil {
		m.log.Error("could not record a rollout; the spec was written", "deployment", id, "err", err)
		return e, nil, nil
	}
	if stored.Status == "running" {
		m.running[key(id, stored.TargetRevision)] = &stored
	}
	op := Wire(stored)
	return e, &op, nil
}

func newID() string {
	var b [8]byte
	rand.Read(b[:])
	return "op-" + time.Now().UTC().Format("20060102T150405") + "-" + hex.EncodeToString(b[:])
}

// Get returns one operation of a deployment.
func (m *Manager) Get(ctx context.Context, dep, op string) (apitype.RolloutOperation, error) {
	r, err := m.st.Rollout(ctx, dep, op)
	if errors.Is(err, store.ErrNotFound) {
		return apitype.RolloutOperation{}, web.Errorf(http.StatusNotFound, "rollout not found")
	}
	if err != nil {
		return apitype.RolloutOperation{}, &web.Error{Status: http.StatusInternalServerError, Message: "could not read the rollout", Err: err}
	}
	m.mu.Lock()
	if cur := m.running[key(dep, r.TargetRevision)]; cur != nil && cur.OperationID == op {
		r = *cur
	}
	m.mu.Unlock()
	return Wire(r), nil
}

// History returns a deployment's operations, newest first.
func (m *Manager) History(ctx context.Context, dep string, limit int) ([]apitype.RolloutOperation, error) {
	rs, err := m.st.Rollouts(ctx, dep, limit)
	if err != nil {
		return nil, &web.Error{Status: http.StatusInternalServerError, Message: "could not read the rollouts", Err: err}
	}
	out := make([]apitype.RolloutOperation, 0, len(rs))
	for _, r := range rs {
		out = append(out, Wire(r))
	}
	return out, nil
}

// Previous is the spec `rollout undo` re-applies: the source spec of the
// newest operation that brought the deployment to its current revision
// and succeeded.
func (m *Manager) Previous(ctx context.Context, dep, current string) (apitype.DeploymentSpec, bool, error) {
	var s apitype.DeploymentSpec
	rs, err := m.st.Rollouts(ctx, dep, Keep)
	if err != nil {
		return s, false, &web.Error{Status: http.StatusInternalServerError, Message: "could not read the rollouts", Err: err}
	}
	for _, r := range rs {
		if r.Status == "succeeded" && r.TargetRevision == current && r.SourceRevision != current {
			if err := json.Unmarshal(r.SourceSpec, &s); err != nil {
				return s, false, err
			}
			return s, true, nil
		}
	}
	return s, false, nil
}

// Wire is the contract's RolloutOperation of a stored operation.
func Wire(r store.Rollout) apitype.RolloutOperation {
	op := apitype.RolloutOperation{
		OperationID: r.OperationID, Deployment: r.Deployment, SourceRevision: r.SourceRevision,
		TargetSpecSHA256: r.TargetRevision, Status: r.Status, Phase: r.Phase,
		ReadinessVerified: r.ReadinessVerified, PreviousStopped: r.PreviousStopped,
		FailureSettlement: r.FailureSettlement,
	}
	if r.Error != "" {
		op.Error = &r.Error
	}
	return op
}

// Settle ends the operations a previous berth left running; call it
// before the registry loads. An operation whose candidates had all been
// ready (phase draining_previous) succeeded: the pool adopts the
// candidates and stops the previous replicas. Any other fails, and the
// stored spec goes back to its fallback, so the pool adopts the previous
// replicas and stops the candidates (fleet adopts by recorded template).
func (m *Manager) Settle(ctx context.Context) error {
	rs, err := m.st.RunningRollouts(ctx)
	if err != nil {
		return err
	}
	for _, r := range rs {
		d, err := m.st.Deployment(ctx, r.Deployment)
		if err != nil {
			continue // gone with its deployment
		}
		cur := revisionOf(d.Spec)
		why := fmt.Sprintf("berth stopped during the rollout (phase %s)", r.Phase)
		switch {
		case cur == r.TargetRevision && r.Phase == fleet.PhaseDraining:
			r.Status, r.ReadinessVerified, r.PreviousStopped, r.Phase = "succeeded", true, true, fleet.PhaseDone
		case cur == r.TargetRevision:
			settle := Settlement{CandidatesStopped: []string{}, Reason: why + "; the previous revision was restored and its candidates are stopped when the replicas are adopted"}
			if _, err := m.st.PutDeployment(ctx, store.Deployment{ID: d.ID, Namespace: d.Namespace, Spec: r.FallbackSpec}, false, d.Revision); err != nil {
				r.Status, r.Error = "reconciliation_required", why+"; restoring the previous spec failed: "+err.Error()
			} else {
				settle.SpecRevertedTo = r.FallbackRevision
				r.Status, r.Error, r.Phase = "failed", why, fleet.PhaseReverted
			}
			r.FailureSettlement, _ = json.Marshal(settle)
		default:
			r.Status, r.Error = "failed", why+"; a newer spec had replaced it"
			r.FailureSettlement, _ = json.Marshal(Settlement{CandidatesStopped: []string{}, Reason: "superseded"})
		}
		m.log.Info("settled a rollout left running", "deployment", r.Deployment, "operation", r.OperationID, "status", r.Status)
		if err := m.st.UpdateRollout(ctx, r); err != nil {
			return err
		}
	}
	return nil
}

// revisionOf is the rollout_revision of a stored spec.
func revisionOf(raw []byte) string {
	var s apitype.DeploymentSpec
	if err := json.Unmarshal(raw, &s); err != nil {
		return ""
	}
	tag, err := spec.ETag(&s)
	if err != nil {
		return ""
	}
	return strings.Trim(tag, `"`)
}

// ValidOperationID checks a client's operation_id.
func ValidOperationID(id string) error {
	if id == "" {
		return web.Invalid("operation_id", "is required")
	}
	if len(id) > 128 {
		return web.Invalid("operation_id", "must be at most 128 bytes, got %d", len(id))
	}
	for _, c := range []byte(id) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || bytes.IndexByte([]byte("._:-"), c) >= 0) {
			return web.Invalid("operation_id", "%q has a character other than letters, digits and . _ : -", id)
		}
	}
	return nil
}
