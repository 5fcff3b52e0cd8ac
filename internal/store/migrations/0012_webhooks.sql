-- 0012: security alert webhooks (package notify), berth's own. sealed is
-- opaque here: package notify seals the webhook's URL and signing key
-- (AES-256-GCM under the secret key, bound to the id), since a webhook URL
-- can itself be a credential (chat services put theirs in the path). The
-- counts are cumulative; last_delivery_at is '' until the first delivery.
CREATE TABLE webhooks (
	id               TEXT NOT NULL PRIMARY KEY,
	sealed           BLOB NOT NULL,
	min_severity     TEXT NOT NULL,
	note             TEXT NOT NULL DEFAULT '',
	created_at       TEXT NOT NULL,
	delivered        INTEGER NOT NULL DEFAULT 0,
	failed           INTEGER NOT NULL DEFAULT 0,
	dead_lettered    INTEGER NOT NULL DEFAULT 0,
	last_error       TEXT NOT NULL DEFAULT '',
	last_delivery_at TEXT NOT NULL DEFAULT ''
) STRICT;
