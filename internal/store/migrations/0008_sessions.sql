-- 0008: sign-in sessions of deployments' auth gates (package sessions).
-- Only the SHA-256 of a session's secret (the cookie's value) is kept;
-- id is the public name the operator API lists and revokes by.
CREATE TABLE sessions (
	id            TEXT PRIMARY KEY,
	secret_sha256 TEXT NOT NULL UNIQUE,
	deployment    TEXT NOT NULL,
	namespace     TEXT NOT NULL,
	fingerprint   TEXT NOT NULL,
	issuer        TEXT NOT NULL DEFAULT '',
	subject       TEXT NOT NULL,
	email         TEXT NOT NULL DEFAULT '',
	name          TEXT NOT NULL DEFAULT '',
	token_id      TEXT NOT NULL DEFAULT '',
	created_at    TEXT NOT NULL,
	expires_at    TEXT NOT NULL,
	last_seen_at  TEXT NOT NULL
);
CREATE INDEX sessions_deployment ON sessions (deployment, subject);
