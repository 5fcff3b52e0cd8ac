package etcdfleet

// Units and their assignments.
//
// Under Options.Prefix, besides the keys of etcdfleet.go:
//
//	units/<unit>        the unit asked for (placement.Request, JSON), on no
//	                    lease: what the scheduler places
//	assign/<unit>       Assignment (JSON): the host that runs the unit,
//	                    written only by the scheduler's leader, in a
//	                    transaction that fails once it is deposed
//	unplaced/<unit>     UnplacedUnit (JSON): why no host runs it
//	scheduler/<lease>   the election of the scheduler's leader
//
// One key per unit names its host: no two hosts can both hold one unit
// at one revision. A host runs a unit only while assign/<unit> names it;
// it watches its assignments (WatchAssignments) and stops the units that
// leave its list, and it can read the key linearizably (Holds) before
// acting on a unit.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/berth-dev/berth/internal/fleet/placement"
)

// Assignment is a unit given to a host.
type Assignment struct {
	Unit  string `json:"unit"`
	Group string `json:"group,omitempty"`
	Host  string `json:"host"`
	// Epoch is the leader's term that wrote it (its election key's
	// creation revision): a later leader's is larger.
	Epoch int64     `json:"epoch"`
	Since time.Time `json:"since"`
	// Revision is the key's modification revision (not stored).
	Revision int64 `json:"-"`
}

// UnplacedUnit is a unit no host runs, and why.
type UnplacedUnit struct {
	Unit   string         `json:"unit"`
	Code   placement.Code `json:"code"`
	Reason string         `json:"reason"`
	Epoch  int64          `json:"epoch"`
	Since  time.Time      `json:"since"`
}

func (m *Member) unitsPrefix() string    { return m.o.Prefix + "units/" }
func (m *Member) assignPrefix() string   { return m.o.Prefix + "assign/" }
func (m *Member) unplacedPrefix() string { return m.o.Prefix + "unplaced/" }
func (m *Member) electionPrefix() string { return m.o.Prefix + "scheduler" } // keys under scheduler/

// ValidUnitID checks a unit id: 1–200 printable characters without
// spaces ("deployment/web/2", "computer/c1").
func ValidUnitID(id string) error {
	if id == "" || len(id) > 200 {
		return fmt.Errorf("etcdfleet: unit %q: want 1 to 200 characters", id)
	}
	for _, c := range id {
		if !unicode.IsPrint(c) || unicode.IsSpace(c) {
			return fmt.Errorf("etcdfleet: unit %q: only printable characters without spaces", id)
		}
	}
	return nil
}

// Submit asks for unit r.Unit (or changes what is asked): the scheduler's
// leader places it. Submitting what is asked already writes nothing.
func (m *Member) Submit(ctx context.Context, r placement.Request) error {
	if err := ValidUnitID(r.Unit); err != nil {
		return err
	}
	switch {
	case r.Driver == "":
		return fmt.Errorf("etcdfleet: unit %s: driver is required", r.Unit)
	case r.CPUMillis < 0:
		return fmt.Errorf("etcdfleet: unit %s: cpu_millis %d is negative", r.Unit, r.CPUMillis)
	case r.MemoryBytes < 0:
		return fmt.Errorf("etcdfleet: unit %s: memory_bytes %d is negative", r.Unit, r.MemoryBytes)
	}
	if r.Host != "" {
		if err := ValidHostID(r.Host); err != nil {
			return fmt.Errorf("etcdfleet: unit %s: pinned host: %w", r.Unit, err)
		}
	}
	body, err := json.Marshal(r)
	if err != nil {
		return err
	}
	ctx, cancel := m.opctx(ctx)
	defer cancel()
	// An unchanged request is not written again: every host of a fleet
	// submits the deployments it holds, and the scheduler places again
	// on every write of a unit.
	k := m.unitsPrefix() + r.Unit
	if _, err := m.cli.Txn(ctx).If(clientv3.Compare(clientv3.Value(k), "=", string(body))).Else(clientv3.OpPut(k, string(body))).Commit(); err != nil {
		return fmt.Errorf("etcdfleet: submitting unit %s: %w", r.Unit, err)
	}
	return nil
}

// Withdraw stops asking for unit: the leader deletes its assignment.
func (m *Member) Withdraw(ctx context.Context, unit string) error {
	if err := ValidUnitID(unit); err != nil {
		return err
	}
	ctx, cancel := m.opctx(ctx)
	defer cancel()
	if _, err := m.cli.Delete(ctx, m.unitsPrefix()+unit); err != nil {
		return fmt.Errorf("etcdfleet: withdrawing unit %s: %w", unit, err)
	}
	return nil
}

// Assignments lists every assignment, by unit.
func (m *Member) Assignments(ctx context.Context) ([]Assignment, error) {
	ctx, cancel := m.opctx(ctx)
	defer cancel()
	g, err := m.cli.Get(ctx, m.assignPrefix(), clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("etcdfleet: listing the assignments: %w", err)
	}
	var out []Assignment
	for _, kv := range g.Kvs {
		if a, ok := m.decodeAssignment(kv.Key, kv.Value, kv.ModRevision); ok {
			out = append(out, a)
		}
	}
	return out, nil
}

// Unplaced lists the units no host runs, by unit, with their reasons.
func (m *Member) Unplaced(ctx context.Context) ([]UnplacedUnit, error) {
	ctx, cancel := m.opctx(ctx)
	defer cancel()
	g, err := m.cli.Get(ctx, m.unplacedPrefix(), clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("etcdfleet: listing the unplaced units: %w", err)
	}
	var out []UnplacedUnit
	for _, kv := range g.Kvs {
		var u UnplacedUnit
		if err := json.Unmarshal(kv.Value, &u); err != nil {
			m.o.Log.Warn("fleet: unreadable unplaced record", "key", string(kv.Key), "err", err)
			continue
		}
		out = append(out, u)
	}
	return out, nil
}

// Holds says whether assign/<unit> names hostID, read linearizably, and
// the key's modification revision (0 when the unit has no assignment): a
// host's own write can be fenced on it with
// Compare(ModRevision(key), "=", revision).
func (m *Member) Holds(ctx context.Context, unit, hostID string) (bool, int64, error) {
	if err := ValidUnitID(unit); err != nil {
		return false, 0, err
	}
	ctx, cancel := m.opctx(ctx)
	defer cancel()
	g, err := m.cli.Get(ctx, m.assignPrefix()+unit)
	if err != nil {
		return false, 0, fmt.Errorf("etcdfleet: reading unit %s's assignment: %w", unit, err)
	}
	if len(g.Kvs) == 0 {
		return false, 0, nil
	}
	a, ok := m.decodeAssignment(g.Kvs[0].Key, g.Kvs[0].Value, g.Kvs[0].ModRevision)
	if !ok {
		return false, g.Kvs[0].ModRevision, fmt.Errorf("etcdfleet: unit %s's assignment is unreadable", unit)
	}
	return a.Host == hostID, a.Revision, nil
}

// AssignmentKey is the key of unit's assignment, for a host's fenced
// writes.
func (m *Member) AssignmentKey(unit string) string { return m.assignPrefix() + unit }

func (m *Member) decodeAssignment(key, value []byte, rev int64) (Assignment, bool) {
	var a Assignment
	if err := json.Unmarshal(value, &a); err != nil {
		m.o.Log.Warn("fleet: unreadable assignment", "key", string(key), "err", err)
		return a, false
	}
	a.Unit = strings.TrimPrefix(string(key), m.assignPrefix())
	a.Revision = rev
	return a, true
}

// WatchAssignments sends hostID's assignments, by unit, at once and then
// whenever they change (a unit given to it, or taken away: moved to
// another host or withdrawn), the latest only when the reader falls
// behind, until ctx ends; the channel is then closed. A host stops every
// unit that leaves its list. When the watch fails (etcd compacted the
// revisions it needed, a partition) it lists again and carries on: a
// host that comes back from a partition gets the list as it is now.
func (m *Member) WatchAssignments(ctx context.Context, hostID string) <-chan []Assignment {
	return m.watchAssignments(ctx, hostID, func(a Assignment) bool { return a.Host == hostID })
}

// WatchAllAssignments is WatchAssignments for every host's assignments:
// where each unit runs, by unit, at once and then whenever one changes (a
// unit assigned, moved or withdrawn). A unit absent from a list has no
// host (not placed yet, unplaced, or withdrawn). Hosts that forward to
// the host running a unit follow it with this.
func (m *Member) WatchAllAssignments(ctx context.Context) <-chan []Assignment {
	return m.watchAssignments(ctx, "*", func(Assignment) bool { return true })
}

// watchAssignments sends the assignments keep accepts (what names the
// watcher in its log lines).
func (m *Member) watchAssignments(ctx context.Context, what string, keep func(Assignment) bool) <-chan []Assignment {
	out := make(chan []Assignment, 1)
	go func() {
		defer close(out)
		var last []Assignment
		first := true
		for ctx.Err() == nil {
			err := m.watchAssignmentsOnce(ctx, keep, func(as []Assignment) {
				if first || !sameAssignments(as, last) {
					first = false
					last = as
					sendLatest(out, as)
				}
			})
			if err != nil && ctx.Err() == nil {
				m.o.Log.Warn("fleet: watching the assignments", "host", what, "err", err)
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
			}
		}
	}()
	return out
}

func (m *Member) watchAssignmentsOnce(ctx context.Context, keep func(Assignment) bool, emit func([]Assignment)) error {
	lctx, cancel := m.opctx(ctx)
	g, err := m.cli.Get(lctx, m.assignPrefix(), clientv3.WithPrefix())
	cancel()
	if err != nil {
		return fmt.Errorf("etcdfleet: listing the assignments: %w", err)
	}
	mine := map[string]Assignment{}
	for _, kv := range g.Kvs {
		if a, ok := m.decodeAssignment(kv.Key, kv.Value, kv.ModRevision); ok && keep(a) {
			mine[a.Unit] = a
		}
	}
	emit(sorted(mine))
	if h := testHookAssignWatch; h != nil {
		h(g.Header.Revision)
	}
	wctx, wcancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer wcancel()
	for w := range m.cli.Watch(wctx, m.assignPrefix(), clientv3.WithPrefix(), clientv3.WithRev(g.Header.Revision+1)) {
		if err := w.Err(); err != nil {
			return err
		}
		for _, ev := range w.Events {
			unit := strings.TrimPrefix(string(ev.Kv.Key), m.assignPrefix())
			if ev.Type == clientv3.EventTypeDelete {
				delete(mine, unit)
				continue
			}
			if a, ok := m.decodeAssignment(ev.Kv.Key, ev.Kv.Value, ev.Kv.ModRevision); ok && keep(a) {
				mine[unit] = a
			} else {
				delete(mine, unit)
			}
		}
		emit(sorted(mine))
	}
	if ctx.Err() == nil {
		return errors.New("etcdfleet: the assignment watch ended")
	}
	return ctx.Err()
}

// testHookAssignWatch, when set (by tests), runs between the assignment
// watch's list, at revision rev, and its watch.
var testHookAssignWatch func(rev int64)

func sorted(m map[string]Assignment) []Assignment {
	out := make([]Assignment, 0, len(m))
	for _, a := range m {
		out = append(out, a)
	}
	sortAssignments(out)
	return out
}

func sameAssignments(a, b []Assignment) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Unit != b[i].Unit || a[i].Revision != b[i].Revision {
			return false
		}
	}
	return true
}

// sendLatest puts v on out (capacity 1), replacing what a slow reader
// has not taken: readers want the latest value, not every one.
func sendLatest[T any](out chan T, v T) {
	for {
		select {
		case out <- v:
			return
		default:
			select {
			case <-out:
			default:
			}
		}
	}
}
