-- 0003: Computer grants (package grant): the grants the host issued, so
-- they can be listed and revoked by id.
--
-- A grant's token is never stored: it is the payload plus an HMAC under a
-- key kept outside the database (grant.key in the data directory), so a
-- copy of this table cannot be turned into a working credential. The
-- payload is the grant as issued (contract fields plus gid and iat).

CREATE TABLE computer_grants (
	id          TEXT    NOT NULL PRIMARY KEY, -- the grant id (gid)
	computer_id TEXT    NOT NULL,
	payload     TEXT    NOT NULL,             -- the grant's JSON, as signed
	expires_at  INTEGER NOT NULL,             -- Unix milliseconds, as in the contract
	issued_at   TEXT    NOT NULL,
	revoked_at  TEXT    NOT NULL              -- '' while the grant stands
) STRICT;

CREATE INDEX computer_grants_by_computer ON computer_grants (computer_id);
