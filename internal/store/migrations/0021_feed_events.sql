-- 0021: the namespaces' event feeds (package feed): each namespace's ring
-- of lifecycle events and folded issues, so that a feed survives a
-- restart. ts and last_ts are Unix seconds; fold is the key a repeat of the
-- same issue folds into this row by ('' once the entry is closed: a
-- lifecycle event of its deployment came after it, or it is no issue).
-- seq orders a namespace's entries by their last activity (an entry's
-- last fold or its creation), oldest first: what the ring drops first.
CREATE TABLE feed_events (
	id         INTEGER NOT NULL PRIMARY KEY,
	namespace  TEXT NOT NULL,
	deployment TEXT NOT NULL,
	kind       TEXT NOT NULL,
	title      TEXT NOT NULL,
	detail     TEXT NOT NULL,
	ts         INTEGER NOT NULL,
	last_ts    INTEGER NOT NULL,
	count      INTEGER NOT NULL,
	fold       TEXT NOT NULL DEFAULT '',
	seq        INTEGER NOT NULL
) STRICT;
