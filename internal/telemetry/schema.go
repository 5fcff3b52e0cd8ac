package telemetry

import (
	"database/sql"
	"fmt"
)

// schemaVersion is the file's user_version. Telemetry is lossy: a file of
// another version is emptied and recreated rather than migrated.
const schemaVersion = 2

var schema = []string{
	`PRAGMA auto_vacuum = INCREMENTAL`,
	// Ids are in time order as far as the writer's batches go (a batch is
	// sorted by ts): retention walks them oldest first, and a search
	// newest first, with no index on ts of their own.
	`CREATE TABLE IF NOT EXISTS logs (
		id      INTEGER PRIMARY KEY,
		ts      INTEGER NOT NULL, -- epoch ms
		ns      TEXT NOT NULL,
		dep     TEXT NOT NULL,
		level   TEXT NOT NULL,    -- '' for none
		source  TEXT NOT NULL,
		message TEXT NOT NULL,
		backend TEXT NOT NULL,
		host    TEXT NOT NULL,
		fields  TEXT NOT NULL
	)`,
	`CREATE INDEX IF NOT EXISTS logs_dep_ts ON logs (ns, dep, ts)`,
	// k is the deployment's key token (depKey), so one MATCH finds a
	// deployment's lines with the words, newest rowid first.
	`CREATE VIRTUAL TABLE IF NOT EXISTS logs_fts USING fts5 (k, message, content='', contentless_delete=1)`,
	`CREATE TABLE IF NOT EXISTS metrics (
		t         INTEGER NOT NULL, -- bucket start, epoch ms
		ns        TEXT NOT NULL,
		dep       TEXT NOT NULL,
		requests  INTEGER NOT NULL,
		lines     INTEGER NOT NULL, -- log lines, access records included
		err_lines INTEGER NOT NULL, -- of which at level error
		errors    INTEGER NOT NULL,
		lat_sum   REAL NOT NULL,    -- ms
		hist      BLOB,
		samples   INTEGER NOT NULL, -- gauge samples summed below
		usage_samples INTEGER NOT NULL, -- of which cpu and mem were sampled
		cpu       REAL, mem REAL, in_flight REAL, ready REAL, pending REAL, draining REAL
	)`,
	`CREATE INDEX IF NOT EXISTS metrics_dep_t ON metrics (ns, dep, t)`,
	`CREATE INDEX IF NOT EXISTS metrics_t ON metrics (t)`,
	`CREATE TABLE IF NOT EXISTS backends (
		ns TEXT NOT NULL, dep TEXT NOT NULL, backend TEXT NOT NULL,
		last_ts INTEGER NOT NULL,
		PRIMARY KEY (ns, dep, backend)
	) WITHOUT ROWID`,
}

func migrate(db *sql.DB) error {
	var v int
	if err := db.QueryRow(`PRAGMA user_version`).Scan(&v); err != nil {
		return err
	}
	if v != 0 && v != schemaVersion {
		for _, t := range []string{"logs_fts", "logs", "metrics", "backends"} {
			if _, err := db.Exec(`DROP TABLE IF EXISTS ` + t); err != nil {
				return err
			}
		}
	}
	for _, q := range schema {
		if _, err := db.Exec(q); err != nil {
			return fmt.Errorf("schema: %w", err)
		}
	}
	_, err := db.Exec(fmt.Sprintf(`PRAGMA user_version = %d`, schemaVersion))
	return err
}
