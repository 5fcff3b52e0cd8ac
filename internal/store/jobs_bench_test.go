package store_test

import (
	"testing"

	"github.com/berth-dev/berth/internal/store/storetest"
)

// BenchmarkInsertJob is a job insert's latency in SQLite at a full
// history (the insert prunes one), beside etcdstore's BenchmarkInsertJob.
func BenchmarkInsertJob(b *testing.B) {
	storetest.BenchInsertJob(b, openJobsSQLite(b))
}

// BenchmarkPutRollout is a rollout insert's latency in SQLite at a full
// history (the insert trims one), beside etcdstore's BenchmarkPutRollout.
func BenchmarkPutRollout(b *testing.B) {
	storetest.BenchPutRollout(b, openJobsSQLite(b))
}
