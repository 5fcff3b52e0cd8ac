//go:build linux

package computer

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/store"
	"github.com/google/go-cmp/cmp"
)

// countingStore is the real store, recording which writing method each
// write went through. Every writing method of package store is one
// transaction, that is one synchronous commit (an fsync).
type countingStore struct {
	*store.Store
	mu     sync.Mutex
	writes []string
}

func (s *countingStore) wrote(name string) {
	s.mu.Lock()
	s.writes = append(s.writes, name)
	s.mu.Unlock()
}

// take returns the writes so far and forgets them.
func (s *countingStore) take() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.writes
	s.writes = nil
	return w
}

func (s *countingStore) CreateComputer(ctx context.Context, c store.Computer, facts ...store.NewComputerFact) (store.Computer, error) {
	s.wrote("CreateComputer")
	return s.Store.CreateComputer(ctx, c, facts...)
}

func (s *countingStore) UpdateComputer(ctx context.Context, id string, fn func(*store.Computer) error) (store.Computer, error) {
	s.wrote("UpdateComputer")
	return s.Store.UpdateComputer(ctx, id, fn)
}

func (s *countingStore) DeleteComputer(ctx context.Context, id string) error {
	s.wrote("DeleteComputer")
	return s.Store.DeleteComputer(ctx, id)
}

func (s *countingStore) ReserveComputerSlot(ctx context.Context, id string, limit store.SlotLimit, fn func(*store.Computer, store.ActiveOn) error, facts ...store.NewComputerFact) (store.SlotReservation, store.Computer, error) {
	s.wrote("ReserveComputerSlot")
	return s.Store.ReserveComputerSlot(ctx, id, limit, fn, facts...)
}

func (s *countingStore) ReleaseComputerSlot(ctx context.Context, id string, fn func(*store.Computer)) (store.Computer, error) {
	s.wrote("ReleaseComputerSlot")
	return s.Store.ReleaseComputerSlot(ctx, id, fn)
}

func (s *countingStore) EnqueueComputer(ctx context.Context, id string, fn func(*store.Computer)) (int, store.Computer, error) {
	s.wrote("EnqueueComputer")
	return s.Store.EnqueueComputer(ctx, id, fn)
}

func (s *countingStore) PutComputerHost(ctx context.Context, hostID string, h store.ComputerHost) error {
	s.wrote("PutComputerHost")
	return s.Store.PutComputerHost(ctx, hostID, h)
}

func (s *countingStore) OpenUsage(ctx context.Context, u store.UsageInterval) error {
	s.wrote("OpenUsage")
	return s.Store.OpenUsage(ctx, u)
}

func (s *countingStore) OpenComputerRuntime(ctx context.Context, u store.UsageInterval, fn func(*store.Computer) error, facts ...store.NewComputerFact) (store.Computer, error) {
	s.wrote("OpenComputerRuntime")
	return s.Store.OpenComputerRuntime(ctx, u, fn, facts...)
}

func (s *countingStore) EndUsage(ctx context.Context, runtimeID string, endedAt int64) error {
	s.wrote("EndUsage")
	return s.Store.EndUsage(ctx, runtimeID, endedAt)
}

func (s *countingStore) PendingUsage(ctx context.Context, now int64, checkpoint time.Duration, limit int) ([]store.UsageInterval, error) {
	s.wrote("PendingUsage")
	return s.Store.PendingUsage(ctx, now, checkpoint, limit)
}

func (s *countingStore) AcknowledgeUsage(ctx context.Context, acks []store.UsageAck) error {
	s.wrote("AcknowledgeUsage")
	return s.Store.AcknowledgeUsage(ctx, acks)
}

func (s *countingStore) RequestRecycle(ctx context.Context, r store.Recycle) error {
	s.wrote("RequestRecycle")
	return s.Store.RequestRecycle(ctx, r)
}

func (s *countingStore) FinishRecycle(ctx context.Context, runtimeID string) error {
	s.wrote("FinishRecycle")
	return s.Store.FinishRecycle(ctx, runtimeID)
}

func (s *countingStore) AppendComputerFact(ctx context.Context, computerID, dedupe string, at int64, body []byte, mustExist bool) (int64, bool, error) {
	s.wrote("AppendComputerFact")
	return s.Store.AppendComputerFact(ctx, computerID, dedupe, at, body, mustExist)
}

func (s *countingStore) DeleteComputerFactsBefore(ctx context.Context, at int64) (int64, error) {
	s.wrote("DeleteComputerFactsBefore")
	return s.Store.DeleteComputerFactsBefore(ctx, at)
}

func (s *countingStore) PutComputerPort(ctx context.Context, computerID string, p store.ComputerPort) (store.ComputerPort, error) {
	s.wrote("PutComputerPort")
	return s.Store.PutComputerPort(ctx, computerID, p)
}

func (s *countingStore) DeleteComputerPort(ctx context.Context, computerID string, port int) error {
	s.wrote("DeleteComputerPort")
	return s.Store.DeleteComputerPort(ctx, computerID, port)
}

// isClosed reports whether ch is closed now.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestCreateFirstExecCommits pins the writes (synchronous commits) from
// Create to a first exec at three: the record with its create fact, the
// slot with the starting fact, the runtime (usage interval, state running)
// with the running fact. Facts keep their order and numbers, and each
// write wakes the Computer's fact waiters before it returns.
func TestCreateFirstExecCommits(t *testing.T) {
	for _, start := range []bool{false, true} {
		name := map[bool]string{false: "create then use", true: "create with start"}[start]
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			cs := &countingStore{Store: e.st}
			m := e.manager(func(o *Options) { o.Store = cs })
			ctx := context.Background()
			cs.take() // New's reconciliation

			created := m.WaitFacts(ctx, "box", 0)
			c, err := m.Create(ctx, CreateRequest{ID: "box", Start: start})
			if err != nil {
				t.Fatal(err)
			}
			if !isClosed(created) {
				t.Error("Create returned without waking the fact waiters")
			}
			via := "start"
			if !start {
				if c.State.State != StateSleeping {
					t.Errorf("state after Create = %q, want sleeping", c.State.State)
				}
				via = "use"
			}
			running := m.WaitFacts(ctx, "box", 2)
			if out := exec(t, m, "box", "echo hi"); out != "hi\n" {
				t.Errorf("exec = %q, want hi", out)
			}
			if !isClosed(running) {
				t.Error("the start returned without waking the fact waiters")
			}

			want := []string{"CreateComputer", "ReserveComputerSlot", "OpenComputerRuntime"}
			if diff := cmp.Diff(want, cs.take()); diff != "" {
				t.Errorf("writes from Create to the first exec (-want +got):\n%s", diff)
			}

			recs, err := m.Facts(ctx, "box", 0, MaxFactsLimit)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for i, r := range recs {
				if r.Seq != int64(i+1) {
					t.Errorf("fact %d has seq %d", i, r.Seq)
				}
				got = append(got, lifecycle([]Fact{r.Fact})...)
			}
			wantLife := []string{"sleeping/create", "starting/" + via, "running/" + via}
			if diff := cmp.Diff(wantLife, got); diff != "" {
				t.Errorf("lifecycle facts (-want +got):\n%s", diff)
			}

			rec, err := e.st.Computer(ctx, "box")
			if err != nil || rec.State != StateRunning {
				t.Fatalf("stored record = %+v, %v; want running", rec, err)
			}
			open, err := e.st.OpenUsages(ctx)
			if err != nil || len(open) != 1 || open[0].RuntimeID != rec.RuntimeID || open[0].ComputerID != "box" {
				t.Errorf("open intervals = %+v, %v; want one for runtime %s", open, err, rec.RuntimeID)
			}
		})
	}
}
