-- 0010: the SIEM's alerts (package siem), so that findings survive a
-- restart. alert is the wire form (apitype.SecurityAlert) as JSON; the
-- other columns are copies of its fields for filtering and trimming.
-- last_ts is Unix milliseconds. security_alert_seq holds the last id handed
-- out, so ids keep increasing even when every alert has been trimmed.
CREATE TABLE security_alerts (
	id         INTEGER PRIMARY KEY,
	rule       TEXT NOT NULL,
	severity   TEXT NOT NULL,
	deployment TEXT NOT NULL DEFAULT '',
	namespace  TEXT NOT NULL DEFAULT '',
	last_ts    INTEGER NOT NULL,
	alert      TEXT NOT NULL
);
CREATE INDEX security_alerts_rule ON security_alerts (rule, id);
CREATE INDEX security_alerts_deployment ON security_alerts (deployment, id);
CREATE INDEX security_alerts_namespace ON security_alerts (namespace, id);
CREATE INDEX security_alerts_last_ts ON security_alerts (last_ts);
CREATE TABLE security_alert_seq (
	one     INTEGER PRIMARY KEY CHECK (one = 1),
	last_id INTEGER NOT NULL
);
