package jobs_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/jobs"
	"github.com/berth-dev/berth/internal/store"
)

// memStore is a jobs.Store in memory, so the writer's pacing can run in a
// synctest bubble.
type memStore struct {
	mu     sync.Mutex
	jobs   map[string]store.Job
	writes int
}

func (m *memStore) Jobs(ctx context.Context, deployment string) ([]store.Job, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []store.Job
	for _, j := range m.jobs {
		out = append(out, j)
	}
	return out, nil
}

func (m *memStore) Job(ctx context.Context, id string) (store.Job, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	j, ok := m.jobs[id]
	if !ok {
		return j, store.ErrNotFound
	}
	return j, nil
}

func (m *memStore) InsertJob(ctx context.Context, j store.Job, per, total int) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.jobs[j.ID] = j
	return nil
}

func (m *memStore) UpdateJob(ctx context.Context, id, status string, record []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	j := m.jobs[id]
	j.Status, j.Record = status, record
	m.jobs[id] = j
	m.writes++
	return nil
}

func (m *memStore) stored(t *testing.T, id string) (apitype.JobRecord, int) {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	var r apitype.JobRecord
	if err := json.Unmarshal(m.jobs[id].Record, &r); err != nil {
		t.Fatal(err)
	}
	return r, m.writes
}

// TestRunningRecordIsWritten: a running job's lines reach the store while
// it runs, many lines in one write, at most one write per 250 ms.
func TestRunningRecordIsWritten(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &memStore{jobs: map[string]store.Job{}}
		m, err := jobs.New(context.Background(), jobs.Options{Store: st})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		logged, release := make(chan struct{}), make(chan struct{})
		m.Register(apitype.JobHostUpdate, func(ctx context.Context, req jobs.Request) (jobs.Run, error) {
			return func(ctx context.Context, j *jobs.Job) error {
				for range 100 {
					j.Log("a line")
				}
				logged <- struct{}{}
				<-release
				return nil
			}, nil
		})
		rec, err := m.Start(context.Background(), apitype.JobHostUpdate, dep("web"))
		if err != nil {
			t.Fatal(err)
		}
		<-logged
		synctest.Wait()
		if r, w := st.stored(t, rec.ID); len(r.Log) != 0 || w != 0 {
			t.Fatalf("written before the gap: %d lines, %d writes", len(r.Log), w)
		}
		time.Sleep(250 * time.Millisecond)
		synctest.Wait()
		r, w := st.stored(t, rec.ID)
		if len(r.Log) != 100 || w != 1 || r.Status != apitype.JobRunning {
			t.Fatalf("after the gap: %d lines, %d writes, %s", len(r.Log), w, r.Status)
		}
		close(release)
		done, _ := m.Follow(context.Background(), rec.ID, true, func(string) error { return nil })
		if r, _ := st.stored(t, rec.ID); r.Status != apitype.JobSucceeded || done.Status != apitype.JobSucceeded {
			t.Fatalf("final: %s / %s", r.Status, done.Status)
		}
	})
}
