-- 0014: durable background jobs (package jobs) and registered CI workflows.
-- A job's record is its JobRecord wire JSON, opaque here (already redacted:
-- no secret value is ever written to it); deployment, namespace, status
-- and started_at are copies kept as columns for listing, walls and pruning.
-- seq orders jobs by start (started_at is whole seconds, so it ties).
-- namespace is the deployment's when the job started: a confined caller's
-- wall is checked against it, also after the deployment is gone.
CREATE TABLE jobs (
	seq        INTEGER PRIMARY KEY AUTOINCREMENT,
	id         TEXT NOT NULL UNIQUE,
	deployment TEXT NOT NULL,
	namespace  TEXT NOT NULL,
	kind       TEXT NOT NULL,
	status     TEXT NOT NULL,
	started_at INTEGER NOT NULL,
	record     TEXT NOT NULL
) STRICT;
CREATE INDEX jobs_by_deployment ON jobs (deployment, seq);

-- Workflows: spec is the WorkflowSpec wire JSON; its auth is a SecretRef,
-- never a credential value.
CREATE TABLE workflows (
	id         TEXT NOT NULL PRIMARY KEY,
	spec       TEXT NOT NULL,
	created_at TEXT NOT NULL,
	updated_at TEXT NOT NULL
) STRICT;
