package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// The statements of the hot paths (an exec's Computer lookups and its
// process.exited fact) are prepared once at Open: SQLite parsing them on
// every call was a measurable share of the store's time per exec.
const (
	qComputer       = `SELECT ` + computerColumns + ` FROM computers WHERE id = ?`
	qComputerExists = `SELECT 1 FROM computers WHERE id = ?`
	qFactDedupe     = `SELECT 1 FROM computer_facts WHERE computer_id = ? AND dedupe = ?`
	qFactNextSeq    = `INSERT INTO computer_fact_seq (computer_id, last_seq) VALUES (?, 1)
		ON CONFLICT (computer_id) DO UPDATE SET last_seq = last_seq + 1 RETURNING last_seq`
	qFactInsert  = `INSERT INTO computer_facts (computer_id, seq, at, dedupe, body) VALUES (?, ?, ?, ?, ?)`
	qSavepoint   = `SAVEPOINT w`
	qRelease     = `RELEASE w`
	qRollbackTo  = `ROLLBACK TO w`
	qLastFactSeq = `SELECT last_seq FROM computer_fact_seq WHERE computer_id = ?`
)

// writeQueries are prepared on the writer, readQueries on the readers.
var (
	writeQueries = []string{qComputer, qComputerExists, qFactDedupe, qFactNextSeq, qFactInsert, qSavepoint, qRelease, qRollbackTo}
	readQueries  = []string{qComputer, qLastFactSeq}
)

// prepare prepares qs on db. The writer's must be prepared before any
// transaction holds its one connection.
func prepare(ctx context.Context, db *sql.DB, qs []string) (map[string]*sql.Stmt, error) {
	m := make(map[string]*sql.Stmt, len(qs))
	for _, q := range qs {
		st, err := db.PrepareContext(ctx, q)
		if err != nil {
			closeStmts(m)
			return nil, fmt.Errorf("prepare %q: %w", q, err)
		}
		m[q] = st
	}
	return m, nil
}

func closeStmts(m map[string]*sql.Stmt) error {
	var errs []error
	for _, st := range m {
		errs = append(errs, st.Close())
	}
	return errors.Join(errs...)
}

// txStmt returns the prepared statement q bound to tx (q must be one of
// writeQueries).
func (s *Store) txStmt(ctx context.Context, tx *sql.Tx, q string) *sql.Stmt {
	return tx.StmtContext(ctx, s.ws[q])
}
