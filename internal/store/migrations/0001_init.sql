-- 0001: deployments and persisted static-upstream drains (app-lb.md §2.3).
--
-- Timestamps are UTC text in the fixed-width form
-- 2006-01-02T15:04:05.000000000Z, so they sort lexicographically and read
-- well in the sqlite3 shell. STRICT makes SQLite reject a value of the wrong
-- type instead of silently storing it.

CREATE TABLE deployments (
	id         TEXT    NOT NULL PRIMARY KEY,
	namespace  TEXT    NOT NULL,
	spec       TEXT    NOT NULL, -- normalized DeploymentSpec JSON, verbatim
	revision   INTEGER NOT NULL CHECK (revision >= 1),
	created_at TEXT    NOT NULL,
	updated_at TEXT    NOT NULL
) STRICT;

CREATE TABLE upstream_drains (
	deployment TEXT NOT NULL REFERENCES deployments (id) ON DELETE CASCADE,
	upstream   TEXT NOT NULL,
	reason     TEXT NOT NULL,
	started_at TEXT NOT NULL,
	PRIMARY KEY (deployment, upstream)
) STRICT;
