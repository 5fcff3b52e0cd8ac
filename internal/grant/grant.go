// Package grant issues and verifies Computer grants: signed, opaque bearer
// credentials that let their holder perform a set of actions on one
// Computer until they expire (the contract's computerGrantSchema).
//
// # Tokens
//
// A grant token is
//
//	bcg_<payload>.<signature>
//
// where payload is the unpadded base64url of the grant's JSON (the
// contract's fields computerId, actions, expiresAt, egress (an egress
// policy, package egress; validated at issue) and provenance,
// plus the grant id "gid" and the issue time "iat", both chosen by the
// issuer) and signature is the unpadded base64url of HMAC-SHA256 over
// "berth-computer-grant-v1\x00" followed by the payload text, under a
// 256-bit key that never leaves the host (see [LoadKey]). Verification
// recomputes the MAC and compares in constant time, so a holder can read
// what a grant allows but cannot change it.
//
// The token alone is not enough: the issuer also keeps every grant it
// issued (in the store, and in memory for verification without a database
// read), and a grant it does not know, or knows as revoked, does not
// verify. Revocation is by grant id and takes effect on the next request;
// deleting a Computer revokes all of its grants, so a new Computer that
// reuses the id does not inherit them.
//
// Authority comes from the token only, never from a request body: the
// Computer a request names must be the grant's, and the request's action
// must be in the grant's set ([Grant.Check]).
package grant

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/berth-dev/berth/apitype/computertype"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/berth-dev/berth/internal/egress"
	"github.com/berth-dev/berth/internal/store"
)

// Prefix starts every grant token, so a grant is told apart from an
// app-token (berth_…) before anything is verified.
const Prefix = "bcg_"

// MaxToken is the longest token accepted; longer ones are refused before
// any decoding. It bounds the egress policy a grant can carry.
const MaxToken = 16 << 10

// MaxEgress bounds the JSON of a grant's egress policy.
const MaxEgress = 8 << 10

// DefaultMaxTTL caps how far in the future a grant may expire.
const DefaultMaxTTL = 90 * 24 * time.Hour

// maxProvenance bounds each provenance string.
const maxProvenance = 256

// macContext is prefixed to the signed text, so a MAC made for anything
// else under the same key can never pass as a grant signature.
const macContext = "berth-computer-grant-v1\x00"

// Action is an operation a grant may admit (the contract's
// computerActionSchema).
type Action string

// The actions, as the contract spells them.
const (
	Exec           Action = "exec"
	Start          Action = "start"
	Delete         Action = "delete"
	FilesRead      Action = "files.read"
	FilesReadBytes Action = "files.readBytes"
	FilesWrite     Action = "files.write"
	FilesWriteByte Action = "files.writeBytes"
	FilesList      Action = "files.list"
	FilesGlob      Action = "files.glob"
	FilesGrep      Action = "files.grep"
	FilesEdit      Action = "files.edit"
	FilesPatch     Action = "files.patch"
	Mkdir          Action = "mkdir"
	Bash           Action = "bash"
	Backing        Action = "backing"
	ExposePort     Action = "exposePort"
	ListPorts      Action = "listPorts"
	UnexposePort   Action = "unexposePort"
	Terminal       Action = "terminal"
	Stop           Action = "stop"
	ProcessStart   Action = "processStart"
	ProcessList    Action = "processList"
	ProcessKill    Action = "processKill"
)

// Actions lists every action in the contract's order.
var Actions = []Action{
	Exec, Start, Delete, FilesRead, FilesReadBytes, FilesWrite, FilesWriteByte,
	FilesList, FilesGlob, FilesGrep, FilesEdit, FilesPatch, Mkdir, Bash, Backing,
	ExposePort, ListPorts, UnexposePort, Terminal, Stop, ProcessStart, ProcessList,
	ProcessKill,
}

// Valid reports whether a is one of the contract's actions.
func (a Action) Valid() bool { return slices.Contains(Actions, a) }

// Provenance is who a grant acts for (computerProvenanceSchema): opaque
// host identities, stamped on every fact an operation under it produces.
type Provenance = computertype.ComputerProvenance

// Grant is what a token carries: the contract's grant plus its id and
// issue time.
type Grant struct {
	// ID identifies the grant for revocation ("gid" in the token).
	ID         string          `json:"gid"`
	ComputerID string          `json:"computerId"`
	Actions    []Action        `json:"actions"`
	ExpiresAt  int64           `json:"expiresAt"` // Unix milliseconds
	Egress     json.RawMessage `json:"egress,omitempty"`
	Provenance Provenance      `json:"provenance"`
	// IssuedAt is Unix milliseconds ("iat").
	IssuedAt int64 `json:"iat"`
}

// Contract returns g in the contract's computerGrantSchema shape.
func (g Grant) Contract() computertype.ComputerGrant {
	acts := make([]string, len(g.Actions))
	for i, a := range g.Actions {
		acts[i] = string(a)
	}
	return computertype.ComputerGrant{ComputerID: g.ComputerID, Actions: acts, ExpiresAt: g.ExpiresAt, Egress: g.Egress, Provenance: g.Provenance}
}

// Allows reports whether a is in the grant's set.
func (g Grant) Allows(a Action) bool { return slices.Contains(g.Actions, a) }

// Expired reports whether the grant has expired at now.
func (g Grant) Expired(now time.Time) bool { return now.UnixMilli() >= g.ExpiresAt }

// Check reports whether g admits action on Computer computerID:
// ErrOtherComputer or ErrDenied when it does not. Expiry and revocation are
// Verify's business.
func (g Grant) Check(computerID string, action Action) error {
	if g.ComputerID != computerID {
		return fmt.Errorf("%w: the grant is for Computer %q", ErrOtherComputer, g.ComputerID)
	}
	if !g.Allows(action) {
		return fmt.Errorf("%w: the grant does not include %q", ErrDenied, action)
	}
	return nil
}

// Errors. Verify returns ErrMalformed, ErrSignature, ErrUnknown,
// ErrRevoked and ErrExpired: the token is no credential at all (an HTTP
// 401). Check returns ErrOtherComputer and ErrDenied: a valid credential
// that does not reach this operation (403). Issue returns *FieldError.
var (
	ErrMalformed     = errors.New("grant: malformed token")
	ErrSignature     = errors.New("grant: the token's signature does not verify")
	ErrUnknown       = errors.New("grant: the token names a grant this host did not issue")
	ErrRevoked       = errors.New("grant: revoked")
	ErrExpired       = errors.New("grant: expired")
	ErrOtherComputer = errors.New("grant: not valid for this Computer")
	ErrDenied        = errors.New("grant: action not granted")
	ErrNotFound      = errors.New("grant: no such grant")
)

// FieldError is an invalid field of an issue request.
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

// Store is the persistence an Issuer needs (implemented by *store.Store).
type Store interface {
	Grants(ctx context.Context, notBefore int64) ([]store.Grant, error)
	PutGrant(ctx context.Context, g store.Grant) error
	RevokeGrants(ctx context.Context, computerID string, at time.Time, ids ...string) ([]string, error)
	PruneGrants(ctx context.Context, before int64) (int64, error)
}

// pruneEvery is how often Issue deletes expired grants from the store:
// they can never verify again, so their rows only take room.
const pruneEvery = time.Hour

// Config configures an Issuer.
type Config struct {
	// Key is the signing key, at least 32 bytes (see LoadKey).
	Key []byte
	// Store keeps issued grants and revocations.
	Store Store
	// MaxTTL caps a grant's lifetime; default DefaultMaxTTL.
	MaxTTL time.Duration
	// Now is the clock; default time.Now. Tests move it to expire grants.
	Now func() time.Time
}

// Issuer issues, verifies and revokes grants. It keeps the unexpired
// grants in memory, written through to the store, so verification costs
// no database read. Safe for concurrent use.
type Issuer struct {
	cfg Config

	wmu sync.Mutex // serialises writes: store first, then memory

	mu    sync.Mutex // guards known
	known map[string]*entry

	pruned time.Time // last store prune; guarded by wmu
}

type entry struct {
	g       Grant
	revoked time.Time // zero while it stands
}

// New returns an Issuer, loading the unexpired grants from the store.
func New(ctx context.Context, cfg Config) (*Issuer, error) {
	if len(cfg.Key) < 32 {
		return nil, errors.New("grant: the signing key must be at least 32 bytes")
	}
	if cfg.Store == nil {
		return nil, errors.New("grant: an Issuer needs a store")
	}
	if cfg.MaxTTL <= 0 {
		cfg.MaxTTL = DefaultMaxTTL
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cfg.Key = bytes.Clone(cfg.Key)
	rows, err := cfg.Store.Grants(ctx, cfg.Now().UnixMilli())
	if err != nil {
		return nil, err
	}
	i := &Issuer{cfg: cfg, known: make(map[string]*entry, len(rows))}
	for _, r := range rows {
		var g Grant
		if err := json.Unmarshal(r.Payload, &g); err != nil {
			return nil, fmt.Errorf("grant: stored grant %q is corrupt: %w", r.ID, err)
		}
		i.known[r.ID] = &entry{g: g, revoked: r.RevokedAt}
	}
	return i, nil
}

// Request is what the host asks to be granted.
type Request struct {
	ComputerID string
	Actions    []Action
	ExpiresAt  time.Time
	// Egress is the grant's egress policy (package egress's Policy:
	// {"allow": [...], "deny": [...]}); nil for none, which denies all.
	Egress     json.RawMessage
	Provenance Provenance
}

// Issue validates r, records the grant and returns it with its token. The
// token is shown once: it is not stored.
func (i *Issuer) Issue(ctx context.Context, r Request) (Grant, string, error) {
	now := i.cfg.Now()
	g, err := i.validate(r, now)
	if err != nil {
		return Grant{}, "", err
	}
	var id [8]byte
	rand.Read(id[:])
	g.ID = hex.EncodeToString(id[:])
	g.IssuedAt = now.UnixMilli()
	payload, err := json.Marshal(g)
	if err != nil {
		return Grant{}, "", fmt.Errorf("grant: encoding: %w", err)
	}
	i.wmu.Lock()
	defer i.wmu.Unlock()
	if err := i.cfg.Store.PutGrant(ctx, store.Grant{
		ID: g.ID, ComputerID: g.ComputerID, Payload: payload, ExpiresAt: g.ExpiresAt, IssuedAt: now,
	}); err != nil {
		return Grant{}, "", err
	}
	i.mu.Lock()
	i.known[g.ID] = &entry{g: g}
	i.sweepLocked(now)
	i.mu.Unlock()
	if now.Sub(i.pruned) >= pruneEvery {
		// Best effort: a failed prune is retried at the next issue.
		if _, err := i.cfg.Store.PruneGrants(ctx, now.UnixMilli()); err == nil {
			i.pruned = now
		}
	}
	return g, i.sign(payload), nil
}

func (i *Issuer) validate(r Request, now time.Time) (Grant, error) {
	g := Grant{ComputerID: r.ComputerID, Egress: r.Egress, Provenance: r.Provenance}
	if r.ComputerID == "" {
		return g, &FieldError{"computerId", "is required"}
	}
	if len(r.Actions) == 0 {
		return g, &FieldError{"actions", "must name at least one action"}
	}
	for n, a := range r.Actions {
		if !a.Valid() {
			return g, &FieldError{fmt.Sprintf("actions[%d]", n), fmt.Sprintf("%q is not an action; want one of %s", a, actionList())}
		}
	}
	// A set: each action once, in the contract's order.
	for _, a := range Actions {
		if slices.Contains(r.Actions, a) {
			g.Actions = append(g.Actions, a)
		}
	}
	switch {
	case r.ExpiresAt.IsZero():
		return g, &FieldError{"expiresAt", "is required"}
	case !r.ExpiresAt.After(now):
		return g, &FieldError{"expiresAt", "must be in the future"}
	case r.ExpiresAt.Sub(now) > i.cfg.MaxTTL:
		return g, &FieldError{"expiresAt", fmt.Sprintf("must be within %s of now", i.cfg.MaxTTL)}
	}
	g.ExpiresAt = r.ExpiresAt.UnixMilli()
	switch p := r.Provenance; {
	case strings.TrimSpace(p.Actor) == "":
		return g, &FieldError{"provenance.actor", "is required"}
	case len(p.Actor) > maxProvenance:
		return g, &FieldError{"provenance.actor", fmt.Sprintf("must be at most %d bytes", maxProvenance)}
	case len(p.Via) > maxProvenance:
		return g, &FieldError{"provenance.via", fmt.Sprintf("must be at most %d bytes", maxProvenance)}
	}
	if len(r.Egress) > 0 {
		if len(r.Egress) > MaxEgress {
			return g, &FieldError{"egress", fmt.Sprintf("must be at most %d bytes of JSON", MaxEgress)}
		}
		var buf bytes.Buffer
		if err := json.Compact(&buf, r.Egress); err != nil {
			return g, &FieldError{"egress", "must be JSON"}
		}
		if _, err := egress.ParsePolicy(buf.Bytes()); err != nil {
			var pe *egress.PolicyError
			if errors.As(err, &pe) && pe.Field != "" {
				return g, &FieldError{"egress." + pe.Field, pe.Msg}
			}
			return g, &FieldError{"egress", strings.TrimPrefix(err.Error(), "egress: ")}
		}
		if v := buf.String(); v == "null" {
			g.Egress = nil
		} else {
			g.Egress = buf.Bytes()
		}
	}
	return g, nil
}

func actionList() string {
	s := make([]string, len(Actions))
	for n, a := range Actions {
		s[n] = string(a)
	}
	return strings.Join(s, ", ")
}

// sign returns the token for payload.
func (i *Issuer) sign(payload []byte) string {
	p := base64.RawURLEncoding.EncodeToString(payload)
	return Prefix + p + "." + base64.RawURLEncoding.EncodeToString(i.mac(p))
}

func (i *Issuer) mac(encodedPayload string) []byte {
	m := hmac.New(sha256.New, i.cfg.Key)
	m.Write([]byte(macContext))
	m.Write([]byte(encodedPayload))
	return m.Sum(nil)
}

// Verify checks a token and returns its grant: the signature, that this
// issuer issued it and has not revoked it, and its expiry. It never
// panics, whatever it is given.
func (i *Issuer) Verify(token string) (Grant, error) {
	if len(token) > MaxToken {
		return Grant{}, fmt.Errorf("%w: longer than %d bytes", ErrMalformed, MaxToken)
	}
	rest, ok := strings.CutPrefix(token, Prefix)
	if !ok {
		return Grant{}, fmt.Errorf("%w: a grant token starts with %q", ErrMalformed, Prefix)
	}
	p, s, ok := strings.Cut(rest, ".")
	if !ok || p == "" || s == "" {
		return Grant{}, fmt.Errorf("%w: want %s<payload>.<signature>", ErrMalformed, Prefix)
	}
	sig, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(sig) != sha256.Size {
		return Grant{}, fmt.Errorf("%w: the signature is not %d bytes of base64url", ErrMalformed, sha256.Size)
	}
	// The MAC is checked before the payload is even decoded: nothing a
	// forger writes is parsed.
	if !hmac.Equal(sig, i.mac(p)) {
		return Grant{}, ErrSignature
	}
	raw, err := base64.RawURLEncoding.DecodeString(p)
	if err != nil {
		return Grant{}, fmt.Errorf("%w: the payload is not base64url", ErrMalformed)
	}
	var g Grant
	if err := json.Unmarshal(raw, &g); err != nil {
		return Grant{}, fmt.Errorf("%w: the payload is not a grant", ErrMalformed)
	}
	i.mu.Lock()
	e, ok := i.known[g.ID]
	var revoked time.Time
	if ok {
		revoked = e.revoked
	}
	i.mu.Unlock()
	now := i.cfg.Now()
	switch {
	case g.Expired(now):
		// Before the lookup: expired grants are swept from memory.
		return Grant{}, fmt.Errorf("%w at %s", ErrExpired, time.UnixMilli(g.ExpiresAt).UTC().Format(time.RFC3339))
	case !ok || e.g.ComputerID != g.ComputerID:
		return Grant{}, ErrUnknown
	case !revoked.IsZero():
		return Grant{}, fmt.Errorf("%w at %s", ErrRevoked, revoked.UTC().Format(time.RFC3339))
	}
	return g, nil
}

// Authorize verifies token and checks that it admits action on Computer
// computerID.
func (i *Issuer) Authorize(token, computerID string, action Action) (Grant, error) {
	g, err := i.Verify(token)
	if err != nil {
		return Grant{}, err
	}
	if err := g.Check(computerID, action); err != nil {
		return Grant{}, err
	}
	return g, nil
}

// Lookup returns grant id of Computer computerID by its id, for the
// egress proxy, which knows the grant a process works under by id (not
// by token). A grant that no longer stands is returned with ErrRevoked or
// ErrExpired, so its provenance can still be named; one this issuer does
// not know (never issued, or expired and forgotten) is ErrUnknown.
func (i *Issuer) Lookup(computerID, id string) (Grant, error) {
	i.mu.Lock()
	e, ok := i.known[id]
	var g Grant
	var revoked time.Time
	if ok {
		g, revoked = e.g, e.revoked
	}
	i.mu.Unlock()
	switch {
	case !ok || g.ComputerID != computerID:
		return Grant{}, ErrUnknown
	case g.Expired(i.cfg.Now()):
		return g, fmt.Errorf("%w at %s", ErrExpired, time.UnixMilli(g.ExpiresAt).UTC().Format(time.RFC3339))
	case !revoked.IsZero():
		return g, fmt.Errorf("%w at %s", ErrRevoked, revoked.UTC().Format(time.RFC3339))
	}
	return g, nil
}

// Revoke revokes grant id of Computer computerID; revoking a revoked grant
// again succeeds. It returns ErrNotFound when computerID has no such
// unexpired grant.
func (i *Issuer) Revoke(ctx context.Context, computerID, id string) error {
	i.mu.Lock()
	e, ok := i.known[id]
	i.mu.Unlock()
	if !ok || e.g.ComputerID != computerID {
		return fmt.Errorf("%w: Computer %q has no grant %q", ErrNotFound, computerID, id)
	}
	i.wmu.Lock()
	defer i.wmu.Unlock()
	now := i.cfg.Now()
	if _, err := i.cfg.Store.RevokeGrants(ctx, computerID, now, id); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("%w: Computer %q has no grant %q", ErrNotFound, computerID, id)
		}
		return err
	}
	i.mu.Lock()
	if e.revoked.IsZero() {
		e.revoked = now
	}
	i.mu.Unlock()
	return nil
}

// RevokeComputer revokes every grant of computerID (for a deleted
// Computer) and returns how many it revoked.
func (i *Issuer) RevokeComputer(ctx context.Context, computerID string) (int, error) {
	i.wmu.Lock()
	defer i.wmu.Unlock()
	now := i.cfg.Now()
	ids, err := i.cfg.Store.RevokeGrants(ctx, computerID, now)
	if err != nil {
		return 0, err
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	n := 0
	for _, e := range i.known {
		if e.g.ComputerID == computerID && e.revoked.IsZero() {
			e.revoked = now
			n++
		}
	}
	return max(n, len(ids)), nil
}

// Status is an issued grant as listed: the grant and whether it was
// revoked.
type Status struct {
	Grant     Grant
	RevokedAt time.Time // zero while it stands
}

// List returns the unexpired grants of computerID, oldest first.
func (i *Issuer) List(computerID string) []Status {
	now := i.cfg.Now()
	i.mu.Lock()
	defer i.mu.Unlock()
	var out []Status
	for _, e := range i.known {
		if e.g.ComputerID == computerID && !e.g.Expired(now) {
			out = append(out, Status{Grant: e.g, RevokedAt: e.revoked})
		}
	}
	slices.SortFunc(out, func(a, b Status) int {
		if c := a.Grant.IssuedAt - b.Grant.IssuedAt; c != 0 {
			if c < 0 {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Grant.ID, b.Grant.ID)
	})
	return out
}

// sweepLocked forgets expired grants; they fail verification on their
// expiry before the lookup, so forgetting them changes no answer.
func (i *Issuer) sweepLocked(now time.Time) {
	for id, e := range i.known {
		if e.g.Expired(now) {
			delete(i.known, id)
		}
	}
}
