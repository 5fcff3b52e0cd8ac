package workspace_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/berth-dev/berth/internal/workspace"
)

// memRecords is an in-memory Records, so the benchmarks time the
// snapshots, not SQLite.
type memRecords struct {
	mu sync.Mutex
	m  map[string]workspace.Record
}

func (r *memRecords) Workspace(_ context.Context, id string) (workspace.Record, bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	w, ok := r.m[id]
	return w, ok, nil
}

func (r *memRecords) PutWorkspace(_ context.Context, id string, w workspace.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.m[id] = w
	return nil
}

const benchFiles, benchBytes = 1000, 100 << 20

// benchWorkspace is a workspace with a replica r0 whose directory holds
// 100 MiB of random bytes in 1,000 files (10 directories of 100).
func benchWorkspace(b *testing.B) (*workspace.Deployment, string) {
	recs := &memRecords{m: map[string]workspace.Record{"app": {}}}
	d, err := workspace.Open(workspace.Options{
		ID: "app", Dir: filepath.Join(b.TempDir(), "ws"), Records: recs,
		Open:  func(context.Context, workspace.Spec) (workspace.Remote, error) { return nil, fmt.Errorf("none") },
		Alive: func(context.Context, string) workspace.Liveness { return workspace.Gone },
	}, workspace.Spec{Store: "test"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(d.Close)
	dir, err := d.Seed(context.Background(), "r0")
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, benchBytes/benchFiles)
	for i := range benchFiles {
		rand.Read(buf)
		p := filepath.Join(dir, fmt.Sprintf("d%d/f%04d", i%10, i))
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, buf, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	return d, dir
}

// BenchmarkWorkspaceCapture: one capture of 100 MiB in 1,000 files —
// deterministic tar, sha256, fsync, rename, record — of a suspended
// replica (its directory kept, so each iteration captures the same tree).
func BenchmarkWorkspaceCapture(b *testing.B) {
	d, _ := benchWorkspace(b)
	ctx := context.Background()
	b.SetBytes(benchBytes)
	b.ResetTimer()
	for b.Loop() {
		if err := d.Suspended(ctx, "r0"); err != nil {
			b.Fatal(err)
		}
	}
	if st := d.Status(); st.Files != benchFiles {
		b.Fatalf("captured %d files", st.Files)
	}
}

// BenchmarkWorkspaceRestore: one seed of a new replica from that
// snapshot — read, verify the digest, unpack 1,000 files — and the
// retire that removes its directory (an unchanged tree: the capture finds
// the same digest).
func BenchmarkWorkspaceRestore(b *testing.B) {
	d, _ := benchWorkspace(b)
	ctx := context.Background()
	if err := d.Retired(ctx, "r0"); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(benchBytes)
	b.ResetTimer()
	i := 0
	for b.Loop() {
		i++
		id := fmt.Sprintf("r%d", i)
		if _, err := d.Seed(ctx, id); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		os.RemoveAll(d.Dir(id))
		b.StartTimer()
	}
}
