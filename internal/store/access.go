package store

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Token is one stored app-token. The secret itself is never stored: only
// SecretSHA256, the hex SHA-256 of the token's secret part.
type Token struct {
	ID           string
	Name         string
	Admin        string
	Namespace    string   // "" when the token is not confined to a namespace
	Deployments  []string // deployment ids, or ["*"]
	SecretSHA256 string
	CreatedAt    time.Time
	ExpiresAt    time.Time // zero: never expires
	LastUsedAt   time.Time // zero: never used (or not flushed yet)
	MintedBy     string
	// OpenAdmin: minted or last changed while the admin API had no
	// operator password.
	OpenAdmin bool
}

// Tokens returns every stored token, sorted by ID.
func (s *Store) Tokens(ctx context.Context) ([]Token, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT id, name, admin, namespace, deployments, secret_sha256,
		created_at, expires_at, last_used_at, minted_by, open_admin FROM tokens ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("store: list tokens: %w", err)
	}
	defer rows.Close()
	var out []Token
	for rows.Next() {
		var (
			t                         Token
			deps                      string
			created, expires, lastUse string
		)
		if err := rows.Scan(&t.ID, &t.Name, &t.Admin, &t.Namespace, &deps, &t.SecretSHA256,
			&created, &expires, &lastUse, &t.MintedBy, &t.OpenAdmin); err != nil {
			return nil, fmt.Errorf("store: read token: %w", err)
		}
		if err := json.Unmarshal([]byte(deps), &t.Deployments); err != nil {
			return nil, fmt.Errorf("store: corrupt deployments of token %q: %w", t.ID, err)
		}
		if t.CreatedAt, err = parseTime("created_at", created); err != nil {
			return nil, err
		}
		if t.ExpiresAt, err = parseOptTime("expires_at", expires); err != nil {
			return nil, err
		}
		if t.LastUsedAt, err = parseOptTime("last_used_at", lastUse); err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: list tokens: %w", err)
	}
	return out, nil
}

// PutToken inserts t or replaces the stored token with the same ID.
func (s *Store) PutToken(ctx context.Context, t Token) error {
	if t.ID == "" || t.SecretSHA256 == "" {
		return errors.New("store: a token needs an id and a secret hash")
	}
	deps := t.Deployments
	if deps == nil {
		deps = []string{}
	}
	raw, err := json.Marshal(deps)
	if err != nil {
		return fmt.Errorf("store: token %q: %w", t.ID, err)
	}
	return s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO tokens (id, name, admin, namespace, deployments, secret_sha256,
			created_at, expires_at, last_used_at, minted_by, open_admin) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (id) DO UPDATE SET name = excluded.name, admin = excluded.admin,
			namespace = excluded.namespace, deployments = excluded.deployments,
			secret_sha256 = excluded.secret_sha256, created_at = excluded.created_at,
			expires_at = excluded.expires_at, last_used_at = excluded.last_used_at,
			minted_by = excluded.minted_by, open_admin = excluded.open_admin`,
			t.ID, t.Name, t.Admin, t.Namespace, string(raw), t.SecretSHA256, formatTime(t.CreatedAt),
			formatOptTime(t.ExpiresAt), formatOptTime(t.LastUsedAt), t.MintedBy, t.OpenAdmin)
		if err != nil {
			return fmt.Errorf("store: put token %q: %w", t.ID, err)
		}
		return nil
	})
}

// TouchToken records when a token was last used. A token that no longer
// exists is not an error: it was revoked while the request was in flight.
func (s *Store) TouchToken(ctx context.Context, id string, at time.Time) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `UPDATE tokens SET last_used_at = ? WHERE id = ?`, formatOptTime(at), id); err != nil {
			return fmt.Errorf("store: touch token %q: %w", id, err)
		}
		return nil
	})
}

// DeleteToken removes a token, or returns an error wrapping ErrNotFound.
func (s *Store) DeleteToken(ctx context.Context, id string) error {
	return s.deleteRow(ctx, "token "+id, `DELETE FROM tokens WHERE id = ?`, id)
}

// SealedSecret is one stored secret: its address in the clear and
// everything else (description, key names, values) in Sealed, which only
// package secrets can open.
type SealedSecret struct {
	Namespace string
	ID        string
	Sealed    []byte
	UpdatedAt time.Time
}

// SealedSecrets returns every stored secret, sorted by namespace and ID.
func (s *Store) SealedSecrets(ctx context.Context) ([]SealedSecret, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT namespace, id, sealed, updated_at FROM secrets ORDER BY namespace, id`)
	if err != nil {
		return nil, fmt.Errorf("store: list secrets: %w", err)
	}
	defer rows.Close()
	var out []SealedSecret
	for rows.Next() {
		sec, err := scanSecret(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, sec)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: list secrets: %w", err)
	}
	return out, nil
}

// SealedSecret returns one secret, or an error wrapping ErrNotFound.
func (s *Store) SealedSecret(ctx context.Context, namespace, id string) (SealedSecret, error) {
	row := s.r.QueryRowContext(ctx, `SELECT namespace, id, sealed, updated_at FROM secrets WHERE namespace = ? AND id = ?`, namespace, id)
	sec, err := scanSecret(row)
	if errors.Is(err, sql.ErrNoRows) {
		return SealedSecret{}, fmt.Errorf("%w: secret %q in namespace %q", ErrNotFound, id, namespace)
	}
	return sec, err
}

func scanSecret(sc scanner) (SealedSecret, error) {
	var (
		sec     SealedSecret
		updated string
	)
	if err := sc.Scan(&sec.Namespace, &sec.ID, &sec.Sealed, &updated); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return SealedSecret{}, err
		}
		return SealedSecret{}, fmt.Errorf("store: read secret: %w", err)
	}
	var err error
	sec.UpdatedAt, err = parseTime("updated_at", updated)
	return sec, err
}

// PutSealedSecret inserts or replaces a secret and reports whether it was
// created.
func (s *Store) PutSealedSecret(ctx context.Context, sec SealedSecret) (created bool, err error) {
	if sec.ID == "" || sec.Namespace == "" || len(sec.Sealed) == 0 {
		return false, errors.New("store: a secret needs a namespace, an id and a sealed value")
	}
	err = s.write(ctx, func(tx *sql.Tx) error {
		var one int
		err := tx.QueryRowContext(ctx, `SELECT 1 FROM secrets WHERE namespace = ? AND id = ?`, sec.Namespace, sec.ID).Scan(&one)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("store: read secret %q: %w", sec.ID, err)
		}
		created = errors.Is(err, sql.ErrNoRows)
		_, err = tx.ExecContext(ctx, `INSERT INTO secrets (namespace, id, sealed, updated_at) VALUES (?, ?, ?, ?)
			ON CONFLICT (namespace, id) DO UPDATE SET sealed = excluded.sealed, updated_at = excluded.updated_at`,
			sec.Namespace, sec.ID, bytes.Clone(sec.Sealed), formatTime(sec.UpdatedAt))
		if err != nil {
			return fmt.Errorf("store: put secret %q: %w", sec.ID, err)
		}
		return nil
	})
	return created, err
}

// DeleteSealedSecret removes a secret, or returns an error wrapping
// ErrNotFound.
func (s *Store) DeleteSealedSecret(ctx context.Context, namespace, id string) error {
	return s.deleteRow(ctx, "secret "+namespace+"/"+id, `DELETE FROM secrets WHERE namespace = ? AND id = ?`, namespace, id)
}

// SecretKeyCheck returns the sealed key check, or an error wrapping
// ErrNotFound when none has been written yet.
func (s *Store) SecretKeyCheck(ctx context.Context) ([]byte, error) {
	var b []byte
	err := s.r.QueryRowContext(ctx, `SELECT sealed FROM secret_key_check WHERE one = 1`).Scan(&b)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%w: secret key check", ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("store: read secret key check: %w", err)
	}
	return b, nil
}

// PutSecretKeyCheck writes the sealed key check unless one exists: the
// first key a data directory is used with is the one it keeps. It returns
// an error wrapping ErrConflict when a check was already there.
func (s *Store) PutSecretKeyCheck(ctx context.Context, sealed []byte) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `INSERT INTO secret_key_check (one, sealed) VALUES (1, ?) ON CONFLICT DO NOTHING`, bytes.Clone(sealed))
		if err != nil {
			return fmt.Errorf("store: put secret key check: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("%w: a secret key check already exists", ErrConflict)
		}
		return nil
	})
}

// Namespace is one declared namespace.
type Namespace struct {
	Name        string
	Description string
	Domains     []string // assigned by the operator; see package namespaces
	CreatedAt   time.Time
}

// Namespaces returns the declared namespaces, sorted by name.
func (s *Store) Namespaces(ctx context.Context) ([]Namespace, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT name, description, domains, created_at FROM namespaces ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("store: list namespaces: %w", err)
	}
	defer rows.Close()
	var out []Namespace
	for rows.Next() {
		var (
			n       Namespace
			created string
			domains string
		)
		if err := rows.Scan(&n.Name, &n.Description, &domains, &created); err != nil {
			return nil, fmt.Errorf("store: read namespace: %w", err)
		}
		if err := json.Unmarshal([]byte(domains), &n.Domains); err != nil {
			return nil, fmt.Errorf("store: namespace %q: domains: %w", n.Name, err)
		}
		if n.CreatedAt, err = parseTime("created_at", created); err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: list namespaces: %w", err)
	}
	return out, nil
}

// PutNamespace declares a namespace, or updates the description and
// domains of a declared one, keeping its CreatedAt. It returns the
// namespace as stored and whether it was created.
func (s *Store) PutNamespace(ctx context.Context, n Namespace) (Namespace, bool, error) {
	if n.Name == "" {
		return Namespace{}, false, errors.New("store: namespace name must not be empty")
	}
	out := Namespace{Name: n.Name, Description: n.Description, Domains: slices.Clone(n.Domains), CreatedAt: s.now().UTC().Round(0)}
	if out.Domains == nil {
		out.Domains = []string{}
	}
	domains, err := json.Marshal(out.Domains)
	if err != nil {
		return Namespace{}, false, err
	}
	var created bool
	err = s.write(ctx, func(tx *sql.Tx) error {
		var at string
		err := tx.QueryRowContext(ctx, `SELECT created_at FROM namespaces WHERE name = ?`, n.Name).Scan(&at)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			created = true
		case err != nil:
			return fmt.Errorf("store: read namespace %q: %w", n.Name, err)
		default:
			if out.CreatedAt, err = parseTime("created_at", at); err != nil {
				return err
			}
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO namespaces (name, description, domains, created_at) VALUES (?, ?, ?, ?)
			ON CONFLICT (name) DO UPDATE SET description = excluded.description, domains = excluded.domains`,
			out.Name, out.Description, string(domains), formatTime(out.CreatedAt))
		if err != nil {
			return fmt.Errorf("store: put namespace %q: %w", n.Name, err)
		}
		return nil
	})
	return out, created, err
}

// DeleteNamespace removes a declared namespace, or returns an error
// wrapping ErrNotFound.
func (s *Store) DeleteNamespace(ctx context.Context, name string) error {
	return s.deleteRow(ctx, "namespace "+name, `DELETE FROM namespaces WHERE name = ?`, name)
}

// AuthProvider is one auth provider declared on a namespace. Spec is its
// JSON as the API validated it, stored and returned verbatim.
type AuthProvider struct {
	Namespace string
	Name      string
	Spec      []byte
	CreatedAt time.Time
}

// AuthProviders returns every declared provider, sorted by namespace and
// name.
func (s *Store) AuthProviders(ctx context.Context) ([]AuthProvider, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT namespace, name, spec, created_at FROM auth_providers ORDER BY namespace, name`)
	if err != nil {
		return nil, fmt.Errorf("store: list auth providers: %w", err)
	}
	defer rows.Close()
	var out []AuthProvider
	for rows.Next() {
		var (
			p       AuthProvider
			created string
		)
		if err := rows.Scan(&p.Namespace, &p.Name, &p.Spec, &created); err != nil {
			return nil, fmt.Errorf("store: read auth provider: %w", err)
		}
		if p.CreatedAt, err = parseTime("created_at", created); err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: list auth providers: %w", err)
	}
	return out, nil
}

// PutAuthProvider inserts or replaces a provider, keeping the CreatedAt of
// a replaced one. It returns the provider as stored and whether it was
// created.
func (s *Store) PutAuthProvider(ctx context.Context, p AuthProvider) (AuthProvider, bool, error) {
	if p.Namespace == "" || p.Name == "" {
		return AuthProvider{}, false, errors.New("store: an auth provider needs a namespace and a name")
	}
	if !json.Valid(p.Spec) {
		return AuthProvider{}, false, fmt.Errorf("store: auth provider %q: spec is not valid JSON", p.Name)
	}
	out := AuthProvider{Namespace: p.Namespace, Name: p.Name, Spec: bytes.Clone(p.Spec), CreatedAt: s.now().UTC().Round(0)}
	var created bool
	err := s.write(ctx, func(tx *sql.Tx) error {
		var at string
		err := tx.QueryRowContext(ctx, `SELECT created_at FROM auth_providers WHERE namespace = ? AND name = ?`, p.Namespace, p.Name).Scan(&at)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			created = true
		case err != nil:
			return fmt.Errorf("store: read auth provider %q: %w", p.Name, err)
		default:
			if out.CreatedAt, err = parseTime("created_at", at); err != nil {
				return err
			}
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO auth_providers (namespace, name, spec, created_at) VALUES (?, ?, ?, ?)
			ON CONFLICT (namespace, name) DO UPDATE SET spec = excluded.spec`,
			out.Namespace, out.Name, string(out.Spec), formatTime(out.CreatedAt))
		if err != nil {
			return fmt.Errorf("store: put auth provider %q: %w", p.Name, err)
		}
		return nil
	})
	return out, created, err
}

// DeleteAuthProvider removes a provider, or returns an error wrapping
// ErrNotFound.
func (s *Store) DeleteAuthProvider(ctx context.Context, namespace, name string) error {
	return s.deleteRow(ctx, "auth provider "+namespace+"/"+name, `DELETE FROM auth_providers WHERE namespace = ? AND name = ?`, namespace, name)
}

// deleteRow runs a one-row DELETE and maps "no row" to ErrNotFound.
func (s *Store) deleteRow(ctx context.Context, what, query string, args ...any) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, query, args...)
		if err != nil {
			return fmt.Errorf("store: delete %s: %w", what, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("%w: %s", ErrNotFound, what)
		}
		return nil
	})
}

// formatOptTime is formatTime with the zero time as "".
func formatOptTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return formatTime(t)
}

func parseOptTime(column, s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	return parseTime(column, s)
}
