-- 0009: guard rules (app-lb.md §6.3; package guard): literal conditions on
-- data-plane requests, each refusing (block) or exempting (allow) what it
-- matches. id is the content hash of the action and the normalized match,
-- so re-posting the same conditions replaces the row. Empty match columns
-- are absent conditions. hits and last_hit are written in batches by
-- package guard, so they may trail the live counters by one batch.
CREATE TABLE guard_rules (
	id                  TEXT NOT NULL PRIMARY KEY, -- 12 lowercase hex
	action              TEXT NOT NULL,             -- block | allow
	client              TEXT NOT NULL DEFAULT '',  -- address or CIDR
	host                TEXT NOT NULL DEFAULT '',
	deployment          TEXT NOT NULL DEFAULT '',
	path_prefix         TEXT NOT NULL DEFAULT '',
	path_contains       TEXT NOT NULL DEFAULT '',
	method              TEXT NOT NULL DEFAULT '',
	user_agent_contains TEXT NOT NULL DEFAULT '',
	note                TEXT NOT NULL DEFAULT '',
	created_at          TEXT NOT NULL,
	expires_at          TEXT,                      -- NULL: permanent
	hits                INTEGER NOT NULL DEFAULT 0,
	last_hit            TEXT                       -- NULL: never
) STRICT;
