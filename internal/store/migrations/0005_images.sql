-- 0005: the local image store (package image). A row names a root
-- filesystem berth holds under <data-dir>/images/sha256/<digest>/; several
-- names may share one digest. The tree itself is on disk, not here.

CREATE TABLE images (
	name       TEXT NOT NULL PRIMARY KEY,
	digest     TEXT NOT NULL,             -- "sha256:<64 hex>" over the canonical walk
	size       INTEGER NOT NULL,          -- bytes of regular file contents
	pinned     INTEGER NOT NULL DEFAULT 0, -- 1: refused by delete until unpinned
	source     TEXT NOT NULL,             -- what it was imported from (a path, "upload")
	created_at TEXT NOT NULL
) STRICT;

CREATE INDEX images_digest ON images (digest);
