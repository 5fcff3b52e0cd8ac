package etcdstore

import (
	"context"
	"testing"

	"github.com/berth-dev/berth/internal/fleet/etcdtest"
	"github.com/berth-dev/berth/internal/store"
	"github.com/berth-dev/berth/internal/store/storetest"
)

// The benchmarks package store runs too, under the same names, each on a
// fresh store on one embedded etcd member that fsyncs; their bodies are
// in package storetest. A write here is a read and a guarded transaction
// where SQLite's is one transaction.

func benchStore(b *testing.B) *Store {
	c := etcdtest.Start(b, 1, etcdtest.Options{Fsync: true})
	s, err := Open(context.Background(), c.Client(b), "", "h1")
	if err != nil {
		b.Fatal(err)
	}
	return s
}

func BenchmarkPutDeployment(b *testing.B) { storetest.BenchPutDeployment(b, benchStore(b)) }

func BenchmarkPutDeploymentParallel(b *testing.B) {
	storetest.BenchPutDeploymentParallel(b, benchStore(b))
}

func BenchmarkInsertJob(b *testing.B) { storetest.BenchInsertJob(b, benchStore(b)) }

func BenchmarkPutRollout(b *testing.B) { storetest.BenchPutRollout(b, benchStore(b)) }

func BenchmarkAddWebhookCounts(b *testing.B) { storetest.BenchAddWebhookCounts(b, benchStore(b)) }

func BenchmarkPutSecurityAlerts(b *testing.B) { storetest.BenchPutSecurityAlerts(b, benchStore(b)) }

func BenchmarkTouchSessions(b *testing.B) { storetest.BenchTouchSessions(b, benchStore(b)) }

func BenchmarkComputerSlot(b *testing.B) { storetest.BenchComputerSlot(b, benchStore(b)) }

// BenchmarkAppendComputerFact is one fact append (the counter's read and
// the guarded transaction), one writer at a time.
func BenchmarkAppendComputerFact(b *testing.B) {
	s := benchStore(b)
	ctx := context.Background()
	if _, err := s.CreateComputer(ctx, store.Computer{ID: "c", Backings: "[]", State: "sleeping"}); err != nil {
		b.Fatal(err)
	}
	body := []byte(`{"type":"lifecycle","state":"running"}`)
	for b.Loop() {
		if _, ok, err := s.AppendComputerFact(ctx, "c", "", 1, body, true); err != nil || !ok {
			b.Fatal(ok, err)
		}
	}
}
