-- 0006: remember which tokens were minted or last changed while the admin
-- API had no operator password. Anyone on the host could mint (or widen)
-- a token then, so once berth runs with a password such tokens are
-- refused (package auth) until replaced.
--
-- Tokens an ungated caller minted before this column existed are marked
-- too; tokens minted or patched by other callers on an open admin were not
-- recorded as such and cannot be told apart.

ALTER TABLE tokens ADD COLUMN open_admin INTEGER NOT NULL DEFAULT 0 CHECK (open_admin IN (0, 1));

UPDATE tokens SET open_admin = 1 WHERE minted_by = 'ungated';
