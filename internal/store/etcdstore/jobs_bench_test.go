package etcdstore

import (
	"testing"

	"github.com/berth-dev/berth/internal/store/storetest"
)

// BenchmarkInsertJob is a job insert's latency on one embedded etcd
// member that fsyncs, at a full history (the insert prunes one), beside
// package store's BenchmarkInsertJob (SQLite).
func BenchmarkInsertJob(b *testing.B) {
	storetest.BenchInsertJob(b, benchStore(b))
}

// BenchmarkPutRollout is a rollout insert's latency on the same member at
// a full history (the insert trims one), beside package store's
// BenchmarkPutRollout.
func BenchmarkPutRollout(b *testing.B) {
	storetest.BenchPutRollout(b, benchStore(b))
}
