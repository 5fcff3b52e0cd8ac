-- 0020: each vm deployment's durable workspace (vm.workspace; package
-- workspace): the snapshot the pool runs from and what the store holds.
-- digest is the snapshot's sha256 (hex), '' for the empty workspace; the
-- snapshot is <data>/workspaces/<deployment>/snapshots/<digest>.tar, written,
-- fsynced and renamed there before this row names it, so a row never names
-- a half-written file. captured_at/captured_from say when and from which
-- replica; files and bytes its regular files and their size. pushed is the
-- digest the store pushed_store is known to hold ('' none), pushed_at when.
-- Gone with the deployment.
CREATE TABLE workspaces (
	deployment    TEXT    NOT NULL PRIMARY KEY REFERENCES deployments (id) ON DELETE CASCADE,
	digest        TEXT    NOT NULL,
	captured_at   TEXT    NOT NULL,
	captured_from TEXT    NOT NULL,
	files         INTEGER NOT NULL CHECK (files >= 0),
	bytes         INTEGER NOT NULL CHECK (bytes >= 0),
	pushed        TEXT    NOT NULL,
	pushed_store  TEXT    NOT NULL,
	pushed_at     TEXT    NOT NULL
) STRICT;
