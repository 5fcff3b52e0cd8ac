-- 0019: the operator's decisions about VM disks (package disks): a disk
-- kept from the sweeper (retain) with a note, and where it was last
-- archived. Only non-default rows exist: a disk nobody decided about has
-- none. sandbox_id is the disk's id (a replica id, or a Computer's id);
-- the row outlives the disk until the disk is removed by berth.
CREATE TABLE disk_records (
	sandbox_id    TEXT NOT NULL PRIMARY KEY,
	retain        INTEGER NOT NULL DEFAULT 0,
	note          TEXT NOT NULL DEFAULT '',
	archive_uri   TEXT NOT NULL DEFAULT '',
	archived_at   INTEGER NOT NULL DEFAULT 0, -- Unix seconds; 0: never
	archive_bytes INTEGER NOT NULL DEFAULT 0,
	updated_at    INTEGER NOT NULL            -- Unix seconds
) STRICT;

-- Every archive of a disk, running or finished: view is its ArchiveView
-- wire JSON; the other columns are copies of it kept for ordering.
CREATE TABLE disk_archives (
	id         TEXT NOT NULL PRIMARY KEY,
	sandbox_id TEXT NOT NULL,
	started_at INTEGER NOT NULL, -- Unix seconds
	view       TEXT NOT NULL
) STRICT;
CREATE INDEX disk_archives_by_start ON disk_archives (started_at);
