// Package store is berth's embedded, durable state: deployments and
// persisted upstream drains, kept in a single SQLite database file
// (dir/berth.db) through the pure-Go modernc.org/sqlite driver, so the
// binary needs no cgo and no external database.
//
// Consumers should not depend on *Store directly but declare the few
// methods they use as an interface of their own; that keeps a later
// server-grade backend a drop-in replacement.
//
// # Schema
//
// The current schema (see migrations/*.sql for the authoritative text):
//
//	deployments(id TEXT PK, namespace TEXT, spec TEXT, revision INTEGER,
//	            created_at TEXT, updated_at TEXT)
//	upstream_drains(deployment TEXT → deployments.id ON DELETE CASCADE,
//	                upstream TEXT, reason TEXT, started_at TEXT,
//	                PK (deployment, upstream))
//	tokens(id TEXT PK, name, admin, namespace, deployments JSON,
//	       secret_sha256, created_at, expires_at, last_used_at, minted_by)
//	secrets(namespace, id, sealed BLOB, updated_at, PK (namespace, id))
//	secret_key_check(one INTEGER PK = 1, sealed BLOB)
//	namespaces(name TEXT PK, description, created_at)
//	auth_providers(namespace, name, spec JSON, created_at,
//	               PK (namespace, name))
//	computers(id PK, namespace, image, size, idle_timeout_ms, backings JSON,
//	          state, active JSON, driver, sandbox, runtime_id, created_at,
//	          updated_at)
//	computer_slots(computer_id PK → computers), computer_queue(seq PK
//	          AUTOINCREMENT, computer_id UNIQUE → computers), computer_hosts,
//	computer_usage(runtime_id PK, ...; Unix ms), computer_recycles,
//	computer_fact_seq, computer_facts(PK (computer_id, seq), dedupe),
//	computer_ports(PK (computer_id, port) → computers)
//	computer_grants(id PK, computer_id, payload JSON, expires_at Unix ms,
//	          issued_at, revoked_at)
//	guard_rules(id PK = content hash, action, client, host, deployment,
//	          path_prefix, path_contains, method, user_agent_contains, note,
//	          created_at, expires_at NULL = permanent, hits, last_hit NULL)
//	security_alerts(id INTEGER PK, rule, severity, deployment, namespace,
//	          last_ts Unix ms, alert JSON), security_alert_seq(one PK = 1,
//	          last_id)
//	rate_limits(deployment TEXT PK → deployments.id ON DELETE CASCADE,
//	          requests_per_sec REAL, burst, concurrent_per_client,
//	          max_clients, updated_at)
//	webhooks(id PK, sealed BLOB, min_severity, note, created_at,
//	         delivered, failed, dead_lettered, last_error, last_delivery_at)
//	jobs(seq INTEGER PK AUTOINCREMENT, id UNIQUE, deployment, namespace,
//	     kind, status, started_at Unix s, record JSON)
//	workflows(id PK, spec JSON, created_at, updated_at)
//	pulls(PK (deployment → deployments.id ON DELETE CASCADE, path),
//	          store, ref, strip_components, digest, tree, pulled_at)
//	disk_records(sandbox_id PK, retain, note, archive_uri, archived_at,
//	          archive_bytes, updated_at), disk_archives(id PK, sandbox_id,
//	          started_at, view JSON)
//	workspaces(deployment TEXT PK → deployments.id ON DELETE CASCADE,
//	          digest, captured_at, captured_from, files, bytes, pushed,
//	          pushed_store, pushed_at)
//
// The Computer tables (package computer) keep its state machine, fleet
// slots (ReserveComputerSlot counts and inserts in one transaction), the
// FIFO start queue, the usage ledger and the facts log; the ledger and the
// facts have no foreign key, so they outlive a deleted Computer.
//
// security_alerts (package siem) keeps the SIEM's findings across restarts,
// trimmed to the newest N; security_alert_seq keeps alert ids increasing
// even past trimmed ones.
// rate_limits (package ratelimit) holds berth's own per-client limits of
// deployments, which app-lb's DeploymentSpec has no room for; a
// deployment's row goes with it (DeleteDeployment, in the same
// transaction).
//
// jobs (package jobs) keeps background jobs' records (already redacted)
// across restarts; InsertJob prunes the history, never a running job.
//
// pulls (packages mountpull, artifactpull) records what each vm.mounts
// entry of a deployment (and, path "", its artifact section) resolved to
// on its last pull; the server stamps the digests
// into the stored spec and mounts the trees from it.
//
// workspaces (package workspace) records, per vm deployment with
// vm.workspace, the snapshot its pool runs from and what its store holds;
// a row names a snapshot only once the file is durably in place.
//
// computer_grants (package grant) lists the grants issued, for listing and
// revocation; a grant's token is never stored, only its signed payload, and
// the signing key lives outside the database.
//
// Tokens hold only the SHA-256 of their secret, and a secret row's sealed
// column is opaque here: package secrets seals and opens it (AES-256-GCM),
// so no credential or secret value is stored in plaintext. A webhook's
// sealed column (package notify: its URL and signing key) is opaque the
// same way.
//
// The deployment spec is stored verbatim as the normalized JSON the API
// layer produced; the store does not interpret it beyond checking that it
// is valid JSON. Revision starts at 1 and is incremented on every write of
// a deployment, which gives the API optimistic concurrency (ifRevision).
// Timestamps are UTC text with nanosecond precision in a fixed-width
// format, so they sort as text and read well in the sqlite3 shell.
//
// # Durability and concurrency
//
// The database runs in WAL mode with synchronous=FULL: every committed
// transaction is fsynced to the WAL before the commit returns, so a write
// that a method has acknowledged (returned nil) survives kill -9 and power
// loss. Every mutating method is atomic: one transaction, or one savepoint
// of a transaction shared with writes that arrived while the previous
// commit was syncing (group commit, commit.go), which returns only once
// that shared commit is durable. foreign_keys is
// on and busy_timeout is set, so another process briefly holding the lock
// (for example a sqlite3 shell or a checkpoint) delays a write instead of
// failing it.
//
// Writes go through a pool of exactly one connection whose transactions
// begin IMMEDIATE, so concurrent writers in this process queue (in the
// group committer) instead of racing for SQLite's write lock and getting
// SQLITE_BUSY. Reads use a separate pool of query-only connections; under
// WAL they see the last committed state and never wait for a writer.
//
// The directory is created with mode 0700 and the database file with mode
// 0600, since later schema versions hold tokens and secrets. SQLite gives
// the -wal and -shm files the mode of the database file. An existing
// directory or file keeps the mode it has.
//
// # Migrations
//
// Schema changes are numbered, append-only SQL files embedded from
// migrations/. File NNNN_name.sql is schema version NNNN; versions must run
// 1, 2, 3, … with no gaps. Open applies every migration newer than the
// database's PRAGMA user_version, each in its own transaction that also
// sets user_version, so a crash mid-upgrade leaves the database at the
// previous version rather than half-migrated. Open refuses (ErrSchemaTooNew)
// a database whose version is newer than this binary knows, because an old
// binary writing a newer schema could corrupt data it does not understand.
//
// To add a migration, add one file, e.g. migrations/0002_tokens.sql, and
// nothing else. Never edit or renumber a migration that has shipped:
// databases in the field have already applied it. foreign_keys cannot be
// toggled inside a transaction, so a migration that rebuilds a table must
// follow SQLite's "create new table, copy, drop, rename" procedure with
// foreign keys left on, and must keep the referenced keys intact.
package store
