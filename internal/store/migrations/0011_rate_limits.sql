-- 0011: deployments' per-client rate limits (package ratelimit; berth's
-- own, not in app-lb's contract). One row per deployment, gone with it.
-- requests_per_sec 0 is no rate limit, concurrent_per_client 0 no
-- concurrency limit; burst is 0 exactly when requests_per_sec is.
CREATE TABLE rate_limits (
	deployment            TEXT    NOT NULL PRIMARY KEY REFERENCES deployments (id) ON DELETE CASCADE,
	requests_per_sec      REAL    NOT NULL CHECK (requests_per_sec >= 0),
	burst                 INTEGER NOT NULL CHECK (burst >= 0),
	concurrent_per_client INTEGER NOT NULL CHECK (concurrent_per_client >= 0),
	max_clients           INTEGER NOT NULL CHECK (max_clients >= 1),
	updated_at            TEXT    NOT NULL
) STRICT;
