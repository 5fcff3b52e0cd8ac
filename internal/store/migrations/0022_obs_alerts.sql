-- 0022: the obs plugin's alert rules (package obs): a namespace's
-- deployment, the metric watched over the trailing minute, its threshold,
-- and the webhook to tell. sealed is opaque here: package obs seals the
-- webhook URL (AES-256-GCM under the secret key, bound to the id), since a
-- webhook URL can itself be a credential.
CREATE TABLE obs_alerts (
	id         TEXT NOT NULL PRIMARY KEY,
	namespace  TEXT NOT NULL,
	deployment TEXT NOT NULL,
	metric     TEXT NOT NULL,
	threshold  REAL NOT NULL,
	sealed     BLOB NOT NULL,
	created_at TEXT NOT NULL
) STRICT;
CREATE INDEX obs_alerts_namespace ON obs_alerts (namespace);
