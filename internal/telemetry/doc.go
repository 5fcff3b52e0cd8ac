// Package telemetry is berth's embedded telemetry store: the data plane's
// access records, replica and job output, gate and SIEM events, and
// per-deployment metrics downsampled into time buckets, kept in a SQLite
// file of its own (<data>/telemetry.db) apart from the main store.
//
// Telemetry is lossy by design. The request path hands a record to
// Store.Access or Store.Line, which copies it into a bounded queue and
// returns: with the queue full the record is dropped and counted, and
// nothing ever waits on the disk. One writer drains the queue in batches,
// each in one transaction. Rows older than the retention are deleted, and
// when the file's used pages pass the size cap the oldest logs go first.
//
// Log lines are indexed with SQLite FTS5 (a contentless table, with
// contentless_delete so retention can drop rows): a search's words are
// matched as token prefixes through the index, newest first, and the
// whole query is then checked as a case-insensitive substring of each
// candidate. A query with no indexable word (only punctuation) falls back
// to a substring scan of the window.
//
// Metrics are aggregated in memory per deployment into 10 s buckets
// (requests, 5xx errors, a latency histogram, and gauges sampled every
// bucket: CPU, memory, in-flight, ready, pending, draining) and written
// once a bucket closes; queries merge them into coarser steps.
package telemetry
