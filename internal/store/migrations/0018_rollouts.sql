-- 0018: candidate-first rollouts (app-lb's RolloutOperation) and the
-- template each deployment replica was created from.
--
-- rollouts: one row per operation, by deployment and operation_id (the
-- client's, or generated for a plain PUT that changed the template);
-- berth keeps a bounded history per deployment (package rollout), gone
-- with the deployment. request_sha256 is what an idempotent retry is
-- compared by. source_spec is the spec the operation replaced (what
-- `berth rollout undo` re-applies), fallback_spec the spec a failure
-- reverts to (the source one, or, for a rollout that superseded a running
-- one, that one's fallback). failure_settlement is JSON.
CREATE TABLE rollouts (
	seq                INTEGER PRIMARY KEY,
	deployment         TEXT    NOT NULL REFERENCES deployments (id) ON DELETE CASCADE,
	operation_id       TEXT    NOT NULL,
	request_sha256     TEXT    NOT NULL,
	source_revision    TEXT    NOT NULL,
	target_revision    TEXT    NOT NULL,
	status             TEXT    NOT NULL CHECK (status IN ('running', 'succeeded', 'failed', 'reconciliation_required')),
	phase              TEXT    NOT NULL,
	readiness_verified INTEGER NOT NULL CHECK (readiness_verified IN (0, 1)),
	previous_stopped   INTEGER NOT NULL CHECK (previous_stopped IN (0, 1)),
	error              TEXT,
	failure_settlement TEXT,
	source_spec        BLOB    NOT NULL,
	fallback_revision  TEXT    NOT NULL,
	fallback_spec      BLOB    NOT NULL,
	created_at         TEXT    NOT NULL,
	updated_at         TEXT    NOT NULL,
	UNIQUE (deployment, operation_id)
) STRICT;
CREATE INDEX rollouts_running ON rollouts (status) WHERE status = 'running';

-- replica_templates: the digest of the template (fleet.Config.Key) each
-- deployment replica was created from, recorded before its start and
-- forgotten once it is stopped; a restarted berth adopts only replicas of
-- their deployment's current template.
CREATE TABLE replica_templates (
	replica    TEXT NOT NULL PRIMARY KEY,
	deployment TEXT NOT NULL,
	key_digest TEXT NOT NULL,
	created_at TEXT NOT NULL
) STRICT;
CREATE INDEX replica_templates_deployment ON replica_templates (deployment);
