-- 0004: Computers (package computer): persistent sandboxes, their fleet
-- slots and start queue, the host capacity registry, the runtime usage
-- ledger, recycle requests, the facts log and exposed ports.
--
-- Times that the contract carries (usage intervals, facts) are Unix
-- milliseconds; bookkeeping times are text like everywhere else. The
-- ledger and the facts have no foreign key to computers on purpose: a
-- deleted Computer's last interval must still reach the billing host, and
-- its facts stay until their retention ends.

CREATE TABLE computers (
	id              TEXT    NOT NULL PRIMARY KEY,
	namespace       TEXT    NOT NULL,
	image           TEXT    NOT NULL,
	size            TEXT    NOT NULL,
	idle_timeout_ms INTEGER NOT NULL,
	backings        TEXT    NOT NULL, -- JSON array, fallback order
	state           TEXT    NOT NULL, -- sleeping | starting | running | queued
	active          TEXT    NOT NULL, -- JSON backing it runs on; '' when none
	driver          TEXT    NOT NULL, -- vm driver of the sandbox; '' when none
	sandbox         TEXT    NOT NULL, -- vm replica name; '' when none
	runtime_id      TEXT    NOT NULL, -- usage interval of the sandbox; ''
	created_at      TEXT    NOT NULL,
	updated_at      TEXT    NOT NULL
) STRICT;

CREATE INDEX computers_by_namespace ON computers (namespace, id);

-- A row per Computer that holds a fleet slot (starting or running).
CREATE TABLE computer_slots (
	computer_id TEXT NOT NULL PRIMARY KEY REFERENCES computers (id) ON DELETE CASCADE,
	reserved_at TEXT NOT NULL
) STRICT;

-- Starts waiting for a slot, first in first out by seq.
CREATE TABLE computer_queue (
	seq         INTEGER PRIMARY KEY AUTOINCREMENT,
	computer_id TEXT    NOT NULL UNIQUE REFERENCES computers (id) ON DELETE CASCADE,
	queued_at   TEXT    NOT NULL
) STRICT;

CREATE TABLE computer_hosts (
	host_id           TEXT    NOT NULL PRIMARY KEY,
	max_active        INTEGER NOT NULL,
	reserved_headroom INTEGER NOT NULL
) STRICT;

-- One row per runtime (sandbox lifetime): ComputerRuntimeUsage.
CREATE TABLE computer_usage (
	runtime_id  TEXT    NOT NULL PRIMARY KEY,
	computer_id TEXT    NOT NULL,
	backing     TEXT    NOT NULL, -- JSON
	started_at  INTEGER NOT NULL, -- Unix ms
	observed_at INTEGER NOT NULL, -- the checkpoint (or the end), Unix ms
	ended       INTEGER NOT NULL, -- 0 | 1
	acked_at    INTEGER NOT NULL  -- observed_at of the last acknowledged delivery; -1 none
) STRICT;

CREATE TABLE computer_recycles (
	runtime_id   TEXT    NOT NULL PRIMARY KEY,
	computer_id  TEXT    NOT NULL,
	backing      TEXT    NOT NULL, -- JSON
	requested_at INTEGER NOT NULL  -- Unix ms
) STRICT;

-- The last fact seq handed out per Computer: seqs never go back, even when
-- retention has deleted every fact.
CREATE TABLE computer_fact_seq (
	computer_id TEXT    NOT NULL PRIMARY KEY,
	last_seq    INTEGER NOT NULL
) STRICT;

CREATE TABLE computer_facts (
	computer_id TEXT    NOT NULL,
	seq         INTEGER NOT NULL,
	at          INTEGER NOT NULL, -- Unix ms, for retention
	dedupe      TEXT,             -- NULL, or a key appended at most once
	body        TEXT    NOT NULL, -- the fact's JSON (computerFactSchema)
	PRIMARY KEY (computer_id, seq)
) STRICT;

CREATE UNIQUE INDEX computer_facts_dedupe ON computer_facts (computer_id, dedupe) WHERE dedupe IS NOT NULL;
CREATE INDEX computer_facts_by_time ON computer_facts (at);

CREATE TABLE computer_ports (
	computer_id TEXT    NOT NULL REFERENCES computers (id) ON DELETE CASCADE,
	port        INTEGER NOT NULL,
	public      INTEGER NOT NULL, -- 0 | 1
	created_at  TEXT    NOT NULL,
	PRIMARY KEY (computer_id, port)
) STRICT;
