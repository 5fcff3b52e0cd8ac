package store_test

import (
	"testing"

	"github.com/berth-dev/berth/internal/store/storetest"
)

// The benchmarks package etcdstore runs too, under the same names, each
// on a fresh SQLite store with its real settings (WAL,
// synchronous=FULL); their bodies are in package storetest. The group
// commit's own, BenchmarkAppendFactParallel, is in commit_test.go.

func BenchmarkPutDeployment(b *testing.B) { storetest.BenchPutDeployment(b, openSQLite(b)) }

func BenchmarkPutDeploymentParallel(b *testing.B) {
	storetest.BenchPutDeploymentParallel(b, openSQLite(b))
}

func BenchmarkInsertJob(b *testing.B) { storetest.BenchInsertJob(b, openSQLite(b)) }

func BenchmarkPutRollout(b *testing.B) { storetest.BenchPutRollout(b, openSQLite(b)) }

func BenchmarkAddWebhookCounts(b *testing.B) { storetest.BenchAddWebhookCounts(b, openSQLite(b)) }

func BenchmarkPutSecurityAlerts(b *testing.B) { storetest.BenchPutSecurityAlerts(b, openSQLite(b)) }

func BenchmarkTouchSessions(b *testing.B) { storetest.BenchTouchSessions(b, openSQLite(b)) }

// BenchmarkComputerSlot is beside etcdfleet's BenchmarkReserveRelease
// (the fleet's slots, in etcd) as well.
func BenchmarkComputerSlot(b *testing.B) { storetest.BenchComputerSlot(b, openSQLite(b)) }
