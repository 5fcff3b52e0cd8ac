-- 0002: access control (app-lb.md §2.1, §7, §8): app-tokens, sealed
-- secrets, declared namespaces and the auth providers declared on them.
--
-- Nothing in these tables is a credential or a secret value in plaintext:
-- tokens keep only the SHA-256 of their secret part, and each secret row is
-- an AES-256-GCM blob sealed by package secrets (key names included). The
-- secret_key_check row is a known plaintext sealed with the same key, so a
-- restart with a different key is refused before anything is read or
-- written, even when no secret exists yet.

CREATE TABLE tokens (
	id            TEXT NOT NULL PRIMARY KEY, -- 12 lowercase hex
	name          TEXT NOT NULL,
	admin         TEXT NOT NULL,             -- none | view | admin
	namespace     TEXT NOT NULL,             -- '' when unconfined
	deployments   TEXT NOT NULL,             -- JSON array of ids or ["*"]
	secret_sha256 TEXT NOT NULL,             -- hex SHA-256 of the secret part
	created_at    TEXT NOT NULL,
	expires_at    TEXT NOT NULL,             -- '' when it never expires
	last_used_at  TEXT NOT NULL,             -- '' when never (or not yet flushed)
	minted_by     TEXT NOT NULL              -- token:<id> | user:<name> | ungated
) STRICT;

CREATE TABLE secrets (
	namespace  TEXT NOT NULL,
	id         TEXT NOT NULL,
	sealed     BLOB NOT NULL, -- version byte, 12-byte nonce, ciphertext and tag
	updated_at TEXT NOT NULL,
	PRIMARY KEY (namespace, id)
) STRICT;

CREATE TABLE secret_key_check (
	one    INTEGER NOT NULL PRIMARY KEY CHECK (one = 1),
	sealed BLOB    NOT NULL
) STRICT;

CREATE TABLE namespaces (
	name        TEXT NOT NULL PRIMARY KEY,
	description TEXT NOT NULL,
	created_at  TEXT NOT NULL
) STRICT;

CREATE TABLE auth_providers (
	namespace  TEXT NOT NULL,
	name       TEXT NOT NULL,
	spec       TEXT NOT NULL, -- AuthProviderView JSON as validated by the API
	created_at TEXT NOT NULL,
	PRIMARY KEY (namespace, name)
) STRICT;
