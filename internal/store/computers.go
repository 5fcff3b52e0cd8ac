package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Computer is one stored Computer (package computer owns the meaning of
// the fields; the store keeps backings and the active backing as the JSON
// it is given).
type Computer struct {
	ID          string
	Namespace   string
	Image       string
	Size        string
	IdleTimeout time.Duration
	Backings    string // JSON array
	State       string // sleeping | starting | running | queued
	Active      string // JSON backing, or ""
	Driver      string
	Sandbox     string
	RuntimeID   string
	// CreatedAt and UpdatedAt are set by the store.
	CreatedAt time.Time
	UpdatedAt time.Time
}

const computerColumns = `id, namespace, image, size, idle_timeout_ms, backings, state, active, driver, sandbox, runtime_id, created_at, updated_at`

func scanComputer(sc scanner) (Computer, error) {
	var (
		c                Computer
		idleMS           int64
		created, updated string
	)
	if err := sc.Scan(&c.ID, &c.Namespace, &c.Image, &c.Size, &idleMS, &c.Backings, &c.State, &c.Active,
		&c.Driver, &c.Sandbox, &c.RuntimeID, &created, &updated); err != nil {
		return Computer{}, err
	}
	c.IdleTimeout = time.Duration(idleMS) * time.Millisecond
	var err error
	if c.CreatedAt, err = parseTime("created_at", created); err != nil {
		return Computer{}, err
	}
	if c.UpdatedAt, err = parseTime("updated_at", updated); err != nil {
		return Computer{}, err
	}
	return c, nil
}

type txQueryer interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// getComputer reads Computer id inside tx.
func (s *Store) getComputer(ctx context.Context, tx *sql.Tx, id string) (Computer, error) {
	return computerRow(s.txStmt(ctx, tx, qComputer).QueryRowContext(ctx, id), id)
}

func computerRow(row *sql.Row, id string) (Computer, error) {
	c, err := scanComputer(row)
	if errors.Is(err, sql.ErrNoRows) {
		return Computer{}, fmt.Errorf("%w: computer %q", ErrNotFound, id)
	}
	if err != nil {
		return Computer{}, fmt.Errorf("store: read computer %q: %w", id, err)
	}
	return c, nil
}

func putComputer(ctx context.Context, tx *sql.Tx, c Computer) error {
	_, err := tx.ExecContext(ctx, `UPDATE computers SET namespace = ?, image = ?, size = ?, idle_timeout_ms = ?,
		backings = ?, state = ?, active = ?, driver = ?, sandbox = ?, runtime_id = ?, updated_at = ? WHERE id = ?`,
		c.Namespace, c.Image, c.Size, c.IdleTimeout.Milliseconds(), c.Backings, c.State, c.Active,
		c.Driver, c.Sandbox, c.RuntimeID, formatTime(c.UpdatedAt), c.ID)
	if err != nil {
		return fmt.Errorf("store: write computer %q: %w", c.ID, err)
	}
	return nil
}

// NewComputerFact is a fact to append to a Computer's log in the same
// transaction as the write that records what it reports (CreateComputer,
// ReserveComputerSlot, OpenComputerRuntime), so that the change and its
// fact are durable together with one commit (one fsync) instead of two.
// It is appended exactly as AppendComputerFact would: with the next
// sequence number, and dropped when Dedupe is set and was appended before.
type NewComputerFact struct {
	Dedupe string
	At     int64 // Unix ms
	Body   []byte
}

// appendFacts appends facts to the log of Computer id inside tx.
func (s *Store) appendFacts(ctx context.Context, tx *sql.Tx, id string, facts []NewComputerFact) error {
	for _, f := range facts {
		if _, _, err := s.appendFact(ctx, tx, id, f); err != nil {
			return err
		}
	}
	return nil
}

// CreateComputer stores a new Computer and appends facts to its log, in
// one transaction. It returns an error wrapping ErrConflict if the id
// exists; no fact is appended then.
func (s *Store) CreateComputer(ctx context.Context, c Computer, facts ...NewComputerFact) (Computer, error) {
	now := s.now().UTC()
	c.CreatedAt, c.UpdatedAt = now, now
	err := s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO computers (`+computerColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (id) DO NOTHING`,
			c.ID, c.Namespace, c.Image, c.Size, c.IdleTimeout.Milliseconds(), c.Backings, c.State, c.Active,
			c.Driver, c.Sandbox, c.RuntimeID, formatTime(now), formatTime(now))
		if err != nil {
			return fmt.Errorf("store: create computer %q: %w", c.ID, err)
		}
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT changes()`).Scan(&n); err != nil {
			return fmt.Errorf("store: create computer %q: %w", c.ID, err)
		}
		if n == 0 {
			return fmt.Errorf("%w: computer %q exists", ErrConflict, c.ID)
		}
		return s.appendFacts(ctx, tx, c.ID, facts)
	})
	return c, err
}

// Computer returns one Computer, or an error wrapping ErrNotFound.
func (s *Store) Computer(ctx context.Context, id string) (Computer, error) {
	return computerRow(s.rs[qComputer].QueryRowContext(ctx, id), id)
}

// Computers returns the Computers of a namespace ("" for all), by id.
func (s *Store) Computers(ctx context.Context, namespace string) ([]Computer, error) {
	q := `SELECT ` + computerColumns + ` FROM computers ORDER BY id`
	var args []any
	if namespace != "" {
		q = `SELECT ` + computerColumns + ` FROM computers WHERE namespace = ? ORDER BY id`
		args = append(args, namespace)
	}
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("store: list computers: %w", err)
	}
	defer rows.Close()
	var out []Computer
	for rows.Next() {
		c, err := scanComputer(rows)
		if err != nil {
			return nil, fmt.Errorf("store: list computers: %w", err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: list computers: %w", err)
	}
	return out, nil
}

// UpdateComputer reads a Computer, lets fn change it and writes it back,
// in one transaction. An error from fn aborts the update and is returned
// as is.
func (s *Store) UpdateComputer(ctx context.Context, id string, fn func(*Computer) error) (Computer, error) {
	var out Computer
	err := s.write(ctx, func(tx *sql.Tx) error {
		c, err := s.getComputer(ctx, tx, id)
		if err != nil {
			return err
		}
		if err := fn(&c); err != nil {
			return err
		}
		c.ID = id
		c.UpdatedAt = s.now().UTC()
		out = c
		return putComputer(ctx, tx, c)
	})
	return out, err
}

// DeleteComputer removes a Computer with its slot, queue entry and ports.
// It returns an error wrapping ErrNotFound if there is none.
func (s *Store) DeleteComputer(ctx context.Context, id string) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM computers WHERE id = ?`, id)
		if err != nil {
			return fmt.Errorf("store: delete computer %q: %w", id, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("%w: computer %q", ErrNotFound, id)
		}
		return nil
	})
}

// SlotLimit is how many fleet slots exist: Fixed when positive, else the
// sum over the registered hosts of max_active − reserved_headroom, else
// Default.
type SlotLimit struct {
	Fixed   int
	Default int
}

func slotLimit(ctx context.Context, tx *sql.Tx, l SlotLimit) (int, error) {
	if l.Fixed > 0 {
		return l.Fixed, nil
	}
	var n sql.NullInt64
	var hosts int
	if err := tx.QueryRowContext(ctx, `SELECT SUM(max_active - reserved_headroom), COUNT(*) FROM computer_hosts`).Scan(&n, &hosts); err != nil {
		return 0, fmt.Errorf("store: slot limit: %w", err)
	}
	if hosts == 0 {
		return l.Default, nil
	}
	return int(n.Int64), nil
}

// SlotReservation is the outcome of ReserveComputerSlot, as the contract's
// createFleetSlots answers it: reserved, or capacity with the limit.
type SlotReservation struct {
	Reserved bool
	Running  int // slots held after the call
	Limit    int
}

// ActiveOn counts the Computers that hold a slot and whose active backing
// is the given JSON, inside a reservation's transaction.
type ActiveOn func(active string) (int, error)

// ReserveComputerSlot atomically reserves a fleet slot for Computer id and
// applies fn to its record in the same transaction. A Computer that holds
// a slot already re-reserves for free. Otherwise a slot is granted when
// the slots held plus the queued starts ahead of id (all queued starts
// when id is not queued: the queue is first in, first out) are below the
// limit; the Computer then leaves the queue. When no slot is free nothing
// changes and Reserved is false. An error from fn aborts the reservation
// and is returned as is; fn may count the slot holders per backing with
// activeOn. facts are appended to the Computer's log in the same
// transaction when, and only when, the slot is reserved.
func (s *Store) ReserveComputerSlot(ctx context.Context, id string, limit SlotLimit, fn func(c *Computer, activeOn ActiveOn) error, facts ...NewComputerFact) (SlotReservation, Computer, error) {
	var (
		res SlotReservation
		out Computer
	)
	err := s.write(ctx, func(tx *sql.Tx) error {
		c, err := s.getComputer(ctx, tx, id)
		if err != nil {
			return err
		}
		if res.Limit, err = slotLimit(ctx, tx, limit); err != nil {
			return err
		}
		var held, running int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*), COALESCE(SUM(computer_id = ?), 0) FROM computer_slots`, id).Scan(&running, &held); err != nil {
			return fmt.Errorf("store: count slots: %w", err)
		}
		res.Running = running
		if held == 0 {
			var ahead int
			err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM computer_queue
				WHERE seq < COALESCE((SELECT seq FROM computer_queue WHERE computer_id = ?), 9223372036854775807)`, id).Scan(&ahead)
			if err != nil {
				return fmt.Errorf("store: read queue: %w", err)
			}
			if running+ahead >= res.Limit {
				return nil
			}
		}
		activeOn := func(active string) (int, error) {
			var n int
			err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM computers c JOIN computer_slots s ON s.computer_id = c.id
				WHERE c.active = ? AND c.id != ?`, active, id).Scan(&n)
			return n, err
		}
		if err := fn(&c, activeOn); err != nil {
			return err
		}
		now := s.now().UTC()
		if held == 0 {
			if _, err := tx.ExecContext(ctx, `INSERT INTO computer_slots (computer_id, reserved_at) VALUES (?, ?)`, id, formatTime(now)); err != nil {
				return fmt.Errorf("store: reserve slot: %w", err)
			}
			res.Running++
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM computer_queue WHERE computer_id = ?`, id); err != nil {
			return fmt.Errorf("store: dequeue: %w", err)
		}
		res.Reserved = true
		c.UpdatedAt = now
		out = c
		if err := putComputer(ctx, tx, c); err != nil {
			return err
		}
		return s.appendFacts(ctx, tx, id, facts)
	})
	return res, out, err
}

// ReleaseComputerSlot frees the slot of Computer id (if it holds one) and
// removes it from the queue, applying fn to its record in the same
// transaction. Releasing twice is harmless. A Computer that does not exist
// (deleted meanwhile) is not an error: fn is not called.
func (s *Store) ReleaseComputerSlot(ctx context.Context, id string, fn func(*Computer)) (Computer, error) {
	var out Computer
	err := s.write(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM computer_slots WHERE computer_id = ?`, id); err != nil {
			return fmt.Errorf("store: release slot: %w", err)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM computer_queue WHERE computer_id = ?`, id); err != nil {
			return fmt.Errorf("store: dequeue: %w", err)
		}
		c, err := s.getComputer(ctx, tx, id)
		if errors.Is(err, ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		fn(&c)
		c.UpdatedAt = s.now().UTC()
		out = c
		return putComputer(ctx, tx, c)
	})
	return out, err
}

// ComputerSlots returns the ids of the Computers that hold a slot.
func (s *Store) ComputerSlots(ctx context.Context) ([]string, error) {
	return s.strings(ctx, `SELECT computer_id FROM computer_slots ORDER BY computer_id`)
}

// EnqueueComputer puts Computer id at the end of the start queue (where it
// stays if it is queued already) and applies fn to its record, in one
// transaction. It returns the 1-based position.
func (s *Store) EnqueueComputer(ctx context.Context, id string, fn func(*Computer)) (int, Computer, error) {
	var (
		pos int
		out Computer
	)
	err := s.write(ctx, func(tx *sql.Tx) error {
		c, err := s.getComputer(ctx, tx, id)
		if err != nil {
			return err
		}
		now := s.now().UTC()
		if _, err := tx.ExecContext(ctx, `INSERT INTO computer_queue (computer_id, queued_at) VALUES (?, ?) ON CONFLICT (computer_id) DO NOTHING`,
			id, formatTime(now)); err != nil {
			return fmt.Errorf("store: enqueue %q: %w", id, err)
		}
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM computer_queue WHERE seq <= (SELECT seq FROM computer_queue WHERE computer_id = ?)`, id).Scan(&pos); err != nil {
			return fmt.Errorf("store: queue position: %w", err)
		}
		fn(&c)
		c.UpdatedAt = now
		out = c
		return putComputer(ctx, tx, c)
	})
	return pos, out, err
}

// ComputerQueue returns the ids of the queued Computers, first first.
func (s *Store) ComputerQueue(ctx context.Context) ([]string, error) {
	return s.strings(ctx, `SELECT computer_id FROM computer_queue ORDER BY seq`)
}

func (s *Store) strings(ctx context.Context, q string, args ...any) ([]string, error) {
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			return nil, fmt.Errorf("store: %w", err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	return out, nil
}

// ComputerHost is one host's capacity (hostCapacitySchema).
type ComputerHost struct {
	MaxActive        int
	ReservedHeadroom int
}

// PutComputerHost registers or replaces a host's capacity.
func (s *Store) PutComputerHost(ctx context.Context, hostID string, h ComputerHost) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO computer_hosts (host_id, max_active, reserved_headroom) VALUES (?, ?, ?)
			ON CONFLICT (host_id) DO UPDATE SET max_active = excluded.max_active, reserved_headroom = excluded.reserved_headroom`,
			hostID, h.MaxActive, h.ReservedHeadroom)
		if err != nil {
			return fmt.Errorf("store: put host %q: %w", hostID, err)
		}
		return nil
	})
}

// ComputerHosts returns the host capacity registry.
func (s *Store) ComputerHosts(ctx context.Context) (map[string]ComputerHost, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT host_id, max_active, reserved_headroom FROM computer_hosts`)
	if err != nil {
		return nil, fmt.Errorf("store: list hosts: %w", err)
	}
	defer rows.Close()
	out := map[string]ComputerHost{}
	for rows.Next() {
		var (
			id string
			h  ComputerHost
		)
		if err := rows.Scan(&id, &h.MaxActive, &h.ReservedHeadroom); err != nil {
			return nil, fmt.Errorf("store: list hosts: %w", err)
		}
		out[id] = h
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: list hosts: %w", err)
	}
	return out, nil
}

// UsageInterval is one row of the runtime usage ledger. Times are Unix
// milliseconds.
type UsageInterval struct {
	RuntimeID  string
	ComputerID string
	Backing    string // JSON
	StartedAt  int64
	ObservedAt int64
	Ended      bool
}

// OpenUsage opens the interval of a runtime that started at startedAt. It
// is idempotent: an existing runtime is left as it is.
func (s *Store) OpenUsage(ctx context.Context, u UsageInterval) error {
	return s.write(ctx, func(tx *sql.Tx) error { return openUsage(ctx, tx, u) })
}

func openUsage(ctx context.Context, tx *sql.Tx, u UsageInterval) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO computer_usage (runtime_id, computer_id, backing, started_at, observed_at, ended, acked_at)
		VALUES (?, ?, ?, ?, ?, 0, -1) ON CONFLICT (runtime_id) DO NOTHING`,
		u.RuntimeID, u.ComputerID, u.Backing, u.StartedAt, u.StartedAt)
	if err != nil {
		return fmt.Errorf("store: open usage %q: %w", u.RuntimeID, err)
	}
	return nil
}

// OpenComputerRuntime records that the runtime u of Computer
// u.ComputerID has started, in one transaction: it opens u's usage
// interval (as OpenUsage: an existing runtime is left as it is), applies
// fn to the Computer's record and appends facts to its log. So a runtime
// is never half recorded (an open interval for a Computer still starting,
// or a running Computer without an interval), and the three writes cost
// one commit. An unknown Computer is an error wrapping ErrNotFound; an
// error from fn aborts everything and is returned as is.
func (s *Store) OpenComputerRuntime(ctx context.Context, u UsageInterval, fn func(*Computer) error, facts ...NewComputerFact) (Computer, error) {
	var out Computer
	err := s.write(ctx, func(tx *sql.Tx) error {
		c, err := s.getComputer(ctx, tx, u.ComputerID)
		if err != nil {
			return err
		}
		if err := openUsage(ctx, tx, u); err != nil {
			return err
		}
		if err := fn(&c); err != nil {
			return err
		}
		c.ID = u.ComputerID
		c.UpdatedAt = s.now().UTC()
		out = c
		if err := putComputer(ctx, tx, c); err != nil {
			return err
		}
		return s.appendFacts(ctx, tx, u.ComputerID, facts)
	})
	return out, err
}

// EndUsage closes a runtime's interval at endedAt (never before its last
// checkpoint). Ending an ended or unknown runtime does nothing.
func (s *Store) EndUsage(ctx context.Context, runtimeID string, endedAt int64) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE computer_usage SET ended = 1, observed_at = MAX(observed_at, ?)
			WHERE runtime_id = ? AND ended = 0`, endedAt, runtimeID)
		if err != nil {
			return fmt.Errorf("store: end usage %q: %w", runtimeID, err)
		}
		return nil
	})
}

// OpenUsages returns the intervals not yet ended, oldest first.
func (s *Store) OpenUsages(ctx context.Context) ([]UsageInterval, error) {
	return s.usages(ctx, s.r, `SELECT runtime_id, computer_id, backing, started_at, observed_at, ended FROM computer_usage
		WHERE ended = 0 ORDER BY started_at, runtime_id`)
}

func (s *Store) usages(ctx context.Context, q txQueryer, query string, args ...any) ([]UsageInterval, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("store: read usage: %w", err)
	}
	defer rows.Close()
	var out []UsageInterval
	for rows.Next() {
		var u UsageInterval
		if err := rows.Scan(&u.RuntimeID, &u.ComputerID, &u.Backing, &u.StartedAt, &u.ObservedAt, &u.Ended); err != nil {
			return nil, fmt.Errorf("store: read usage: %w", err)
		}
		out = append(out, u)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: read usage: %w", err)
	}
	return out, nil
}

// PendingUsage advances the checkpoint of every open interval whose last
// checkpoint is at least checkpoint old to now, then returns up to limit
// intervals whose current observation has not been acknowledged, oldest
// first. Within one checkpoint, repeated calls return the same intervals
// with the same observations.
func (s *Store) PendingUsage(ctx context.Context, now int64, checkpoint time.Duration, limit int) ([]UsageInterval, error) {
	var out []UsageInterval
	err := s.write(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `UPDATE computer_usage SET observed_at = ? WHERE ended = 0 AND ? - observed_at >= ?`,
			now, now, checkpoint.Milliseconds()); err != nil {
			return fmt.Errorf("store: checkpoint usage: %w", err)
		}
		var err error
		out, err = s.usages(ctx, tx, `SELECT runtime_id, computer_id, backing, started_at, observed_at, ended FROM computer_usage
			WHERE observed_at > acked_at ORDER BY started_at, runtime_id LIMIT ?`, limit)
		return err
	})
	return out, err
}

// UsageAck acknowledges the delivery of one observation of a runtime.
type UsageAck struct {
	RuntimeID  string
	ObservedAt int64
}

// AcknowledgeUsage records deliveries and deletes the intervals that have
// ended and whose end was delivered. It is idempotent, and an older
// observation never undoes a newer acknowledgement.
func (s *Store) AcknowledgeUsage(ctx context.Context, acks []UsageAck) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		for _, a := range acks {
			if _, err := tx.ExecContext(ctx, `UPDATE computer_usage SET acked_at = MAX(acked_at, ?)
				WHERE runtime_id = ? AND ? <= observed_at`, a.ObservedAt, a.RuntimeID, a.ObservedAt); err != nil {
				return fmt.Errorf("store: acknowledge usage %q: %w", a.RuntimeID, err)
			}
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM computer_usage WHERE ended = 1 AND acked_at >= observed_at`); err != nil {
			return fmt.Errorf("store: settle usage: %w", err)
		}
		return nil
	})
}

// Recycle is a pending recycle request of a runtime.
type Recycle struct {
	RuntimeID   string
	ComputerID  string
	Backing     string
	RequestedAt int64 // Unix ms
}

// RequestRecycle records a recycle request (idempotent).
func (s *Store) RequestRecycle(ctx context.Context, r Recycle) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO computer_recycles (runtime_id, computer_id, backing, requested_at) VALUES (?, ?, ?, ?)
			ON CONFLICT (runtime_id) DO NOTHING`, r.RuntimeID, r.ComputerID, r.Backing, r.RequestedAt)
		if err != nil {
			return fmt.Errorf("store: request recycle %q: %w", r.RuntimeID, err)
		}
		return nil
	})
}

// FinishRecycle removes a recycle request (idempotent).
func (s *Store) FinishRecycle(ctx context.Context, runtimeID string) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM computer_recycles WHERE runtime_id = ?`, runtimeID); err != nil {
			return fmt.Errorf("store: finish recycle %q: %w", runtimeID, err)
		}
		return nil
	})
}

// PendingRecycles returns the recycle requests, oldest first.
func (s *Store) PendingRecycles(ctx context.Context) ([]Recycle, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT runtime_id, computer_id, backing, requested_at FROM computer_recycles ORDER BY requested_at, runtime_id`)
	if err != nil {
		return nil, fmt.Errorf("store: list recycles: %w", err)
	}
	defer rows.Close()
	var out []Recycle
	for rows.Next() {
		var r Recycle
		if err := rows.Scan(&r.RuntimeID, &r.ComputerID, &r.Backing, &r.RequestedAt); err != nil {
			return nil, fmt.Errorf("store: list recycles: %w", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: list recycles: %w", err)
	}
	return out, nil
}

// ComputerFact is one stored fact: its sequence number within its
// Computer and its JSON.
type ComputerFact struct {
	Seq  int64
	Body []byte
}

// AppendComputerFact appends a fact to a Computer's log with the next
// sequence number. With a non-empty dedupe key, a fact whose key was
// appended before is dropped (appended false, seq 0). With mustExist, an
// unknown Computer is an error wrapping ErrNotFound.
func (s *Store) AppendComputerFact(ctx context.Context, computerID, dedupe string, at int64, body []byte, mustExist bool) (seq int64, appended bool, err error) {
	err = s.write(ctx, func(tx *sql.Tx) error {
		if mustExist {
			var one int
			err := s.txStmt(ctx, tx, qComputerExists).QueryRowContext(ctx, computerID).Scan(&one)
			if errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("%w: computer %q", ErrNotFound, computerID)
			}
			if err != nil {
				return fmt.Errorf("store: read computer %q: %w", computerID, err)
			}
		}
		seq, appended, err = s.appendFact(ctx, tx, computerID, NewComputerFact{Dedupe: dedupe, At: at, Body: body})
		return err
	})
	if !appended {
		seq = 0
	}
	return seq, appended, err
}

// appendFact appends f to the log of Computer computerID inside tx (see
// AppendComputerFact).
func (s *Store) appendFact(ctx context.Context, tx *sql.Tx, computerID string, f NewComputerFact) (seq int64, appended bool, err error) {
	var key any
	if f.Dedupe != "" {
		key = f.Dedupe
		var one int
		err := s.txStmt(ctx, tx, qFactDedupe).QueryRowContext(ctx, computerID, f.Dedupe).Scan(&one)
		if err == nil {
			return 0, false, nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return 0, false, fmt.Errorf("store: read facts: %w", err)
		}
	}
	if err := s.txStmt(ctx, tx, qFactNextSeq).QueryRowContext(ctx, computerID).Scan(&seq); err != nil {
		return 0, false, fmt.Errorf("store: next fact seq: %w", err)
	}
	if _, err := s.txStmt(ctx, tx, qFactInsert).ExecContext(ctx, computerID, seq, f.At, key, string(f.Body)); err != nil {
		return 0, false, fmt.Errorf("store: append fact: %w", err)
	}
	return seq, true, nil
}

// ComputerFacts returns up to limit facts of a Computer with a sequence
// number above after, in order.
func (s *Store) ComputerFacts(ctx context.Context, computerID string, after int64, limit int) ([]ComputerFact, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT seq, body FROM computer_facts WHERE computer_id = ? AND seq > ? ORDER BY seq LIMIT ?`,
		computerID, after, limit)
	if err != nil {
		return nil, fmt.Errorf("store: read facts: %w", err)
	}
	defer rows.Close()
	var out []ComputerFact
	for rows.Next() {
		var (
			f    ComputerFact
			body string
		)
		if err := rows.Scan(&f.Seq, &body); err != nil {
			return nil, fmt.Errorf("store: read facts: %w", err)
		}
		f.Body = []byte(body)
		out = append(out, f)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: read facts: %w", err)
	}
	return out, nil
}

// LastComputerFactSeq returns the last sequence number given to a fact of
// the Computer (0 when none ever was).
func (s *Store) LastComputerFactSeq(ctx context.Context, computerID string) (int64, error) {
	var seq int64
	err := s.rs[qLastFactSeq].QueryRowContext(ctx, computerID).Scan(&seq)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("store: read fact seq: %w", err)
	}
	return seq, nil
}

// DeleteComputerFactsBefore deletes the facts recorded before at (Unix ms)
// and returns how many.
func (s *Store) DeleteComputerFactsBefore(ctx context.Context, at int64) (int64, error) {
	var n int64
	err := s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM computer_facts WHERE at < ?`, at)
		if err != nil {
			return fmt.Errorf("store: expire facts: %w", err)
		}
		n, _ = res.RowsAffected()
		return nil
	})
	return n, err
}

// ComputerPort is an exposed port of a Computer.
type ComputerPort struct {
	Port   int
	Public bool
	// SignIn names an auth provider of the Computer's namespace whose
	// sign-in admits browsers to a private port ("" for none).
	SignIn    string
	CreatedAt time.Time
}

// PutComputerPort exposes (or re-exposes) a port of a Computer; an
// unknown Computer is an error wrapping ErrNotFound.
func (s *Store) PutComputerPort(ctx context.Context, computerID string, p ComputerPort) (ComputerPort, error) {
	p.CreatedAt = s.now().UTC()
	err := s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO computer_ports (computer_id, port, public, sign_in, created_at) VALUES (?, ?, ?, ?, ?)
			ON CONFLICT (computer_id, port) DO UPDATE SET public = excluded.public, sign_in = excluded.sign_in`,
			computerID, p.Port, p.Public, p.SignIn, formatTime(p.CreatedAt))
		if err != nil {
			if strings.Contains(err.Error(), "FOREIGN KEY") {
				return fmt.Errorf("%w: computer %q", ErrNotFound, computerID)
			}
			return fmt.Errorf("store: expose port: %w", err)
		}
		return nil
	})
	return p, err
}

// DeleteComputerPort unexposes a port; unexposing a port that is not
// exposed does nothing.
func (s *Store) DeleteComputerPort(ctx context.Context, computerID string, port int) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM computer_ports WHERE computer_id = ? AND port = ?`, computerID, port); err != nil {
			return fmt.Errorf("store: unexpose port: %w", err)
		}
		return nil
	})
}

// ComputerPorts returns the exposed ports of a Computer, by port.
func (s *Store) ComputerPorts(ctx context.Context, computerID string) ([]ComputerPort, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT port, public, sign_in, created_at FROM computer_ports WHERE computer_id = ? ORDER BY port`, computerID)
	if err != nil {
		return nil, fmt.Errorf("store: list ports: %w", err)
	}
	defer rows.Close()
	var out []ComputerPort
	for rows.Next() {
		var (
			p       ComputerPort
			created string
		)
		if err := rows.Scan(&p.Port, &p.Public, &p.SignIn, &created); err != nil {
			return nil, fmt.Errorf("store: list ports: %w", err)
		}
		if p.CreatedAt, err = parseTime("created_at", created); err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: list ports: %w", err)
	}
	return out, nil
}

// ComputerPortsSigningInWith lists the exposed ports whose sign_in names
// auth provider name of namespace ns ("default" covers Computers of no
// namespace), as "<computer id>:<port>", sorted.
func (s *Store) ComputerPortsSigningInWith(ctx context.Context, ns, name string) ([]string, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT p.computer_id, p.port FROM computer_ports p JOIN computers c ON c.id = p.computer_id
		WHERE p.sign_in = ? AND (c.namespace = ? OR (? = 'default' AND c.namespace = '')) ORDER BY p.computer_id, p.port`, name, ns, ns)
	if err != nil {
		return nil, fmt.Errorf("store: ports signing in with %q: %w", name, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		var port int
		if err := rows.Scan(&id, &port); err != nil {
			return nil, fmt.Errorf("store: ports signing in with %q: %w", name, err)
		}
		out = append(out, id+":"+strconv.Itoa(port))
	}
	return out, rows.Err()
}
