package secrets

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/store"
)

// DB is the persistence the secret store needs (implemented by
// *store.Store).
type DB interface {
	SealedSecrets(ctx context.Context) ([]store.SealedSecret, error)
	SealedSecret(ctx context.Context, namespace, id string) (store.SealedSecret, error)
	PutSealedSecret(ctx context.Context, s store.SealedSecret) (bool, error)
	DeleteSealedSecret(ctx context.Context, namespace, id string) error
	SecretKeyCheck(ctx context.Context) ([]byte, error)
	PutSecretKeyCheck(ctx context.Context, sealed []byte) error
}

// Errors the store returns.
var (
	// ErrWrongKey: the key does not open the secrets already stored.
	ErrWrongKey = errors.New("secrets: the secret key does not open this data directory's secrets")
	// ErrNotFound: no secret with that namespace and id.
	ErrNotFound = errors.New("secrets: no such secret")
	// ErrNoKey: the secret exists but holds no such key.
	ErrNoKey = errors.New("secrets: no such key in the secret")
)

// FieldError is a validation failure of one field of a secret write.
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

func invalid(field, format string, args ...any) error {
	return &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// DefaultNamespace is the namespace of a secret that names none.
const DefaultNamespace = "default"

// Limits on names (app-lb.md §8).
const (
	MaxIDLen  = 64
	MaxKeyLen = 128
)

const keyCheck = "berth secret key check v1"

// Store is the secret store. Safe for concurrent use.
type Store struct {
	db  DB
	key Key
	now func() time.Time

	mu sync.Mutex // serialises read-modify-write cycles (Patch) with writes
}

// Option configures a Store.
type Option func(*Store)

// WithClock makes the store stamp updated_at with now.
func WithClock(now func() time.Time) Option { return func(s *Store) { s.now = now } }

// Open returns the secret store over db, sealed with key. It first checks
// that key is the one the data directory's secrets were sealed with (and
// records it, on first use); a different key is ErrWrongKey, and nothing
// is written.
func Open(ctx context.Context, db DB, key Key, opts ...Option) (*Store, error) {
	s := &Store{db: db, key: key, now: time.Now}
	for _, o := range opts {
		o(s)
	}
	check, err := db.SecretKeyCheck(ctx)
	switch {
	case errors.Is(err, store.ErrNotFound):
		rows, err := db.SealedSecrets(ctx)
		if err != nil {
			return nil, err
		}
		if err := s.openAll(rows); err != nil {
			return nil, err
		}
		err = db.PutSecretKeyCheck(ctx, s.seal([]byte(keyCheck), checkAAD()))
		if errors.Is(err, store.ErrConflict) {
			return Open(ctx, db, key, opts...) // another process recorded a key first
		}
		if err != nil {
			return nil, err
		}
		return s, nil
	case err != nil:
		return nil, err
	}
	if pt, err := s.open(check, checkAAD()); err != nil || string(pt) != keyCheck {
		return nil, fmt.Errorf("%w: it is not the key they were sealed with; nothing was changed — start berth with the original BERTH_SECRET_KEY (or the original %s)", ErrWrongKey, KeyFileName)
	}
	rows, err := db.SealedSecrets(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.openAll(rows); err != nil {
		return nil, err
	}
	return s, nil
}

// openAll checks that every stored secret opens, so a damaged row is found
// at startup rather than when a replica needs it.
func (s *Store) openAll(rows []store.SealedSecret) error {
	for _, r := range rows {
		if _, err := s.decode(r); err != nil {
			return err
		}
	}
	return nil
}

func checkAAD() []byte { return []byte("berth-secret-key-check-v1") }

func aad(ns, id string) []byte { return []byte("berth-secret-v1\x00" + ns + "\x00" + id) }

func (s *Store) seal(plain, ad []byte) []byte { return s.key.Seal(plain, ad) }

func (s *Store) open(sealed, ad []byte) ([]byte, error) { return s.key.Open(sealed, ad) }

// payload is what is sealed for one secret.
type payload struct {
	Description string            `json:"description,omitempty"`
	Data        map[string]string `json:"data"`
}

type secret struct {
	ns, id    string
	p         payload
	updatedAt time.Time
}

func (s *Store) decode(r store.SealedSecret) (secret, error) {
	plain, err := s.open(r.Sealed, aad(r.Namespace, r.ID))
	if err != nil {
		return secret{}, fmt.Errorf("%w: secret %q in namespace %q does not open (%v); nothing was changed", ErrWrongKey, r.ID, r.Namespace, err)
	}
	var p payload
	if err := json.Unmarshal(plain, &p); err != nil {
		return secret{}, fmt.Errorf("secrets: secret %q in namespace %q is corrupt: %w", r.ID, r.Namespace, err)
	}
	return secret{ns: r.Namespace, id: r.ID, p: p, updatedAt: r.UpdatedAt}, nil
}

func (s *Store) load(ctx context.Context, ns, id string) (secret, error) {
	r, err := s.db.SealedSecret(ctx, ns, id)
	if errors.Is(err, store.ErrNotFound) {
		return secret{}, fmt.Errorf("%w: no secret %q in namespace %q", ErrNotFound, id, ns)
	}
	if err != nil {
		return secret{}, err
	}
	return s.decode(r)
}

func summary(x secret) apitype.SecretSummary {
	sum := apitype.SecretSummary{
		ID: x.id, Namespace: x.ns, Keys: slices.Sorted(maps.Keys(x.p.Data)),
		UpdatedAt: x.updatedAt.Unix(), EncryptedAtRest: true,
	}
	if sum.Keys == nil {
		sum.Keys = []string{}
	}
	if x.p.Description != "" {
		d := x.p.Description
		sum.Description = &d
	}
	return sum
}

// Namespace returns ns, or DefaultNamespace when it is empty.
func Namespace(ns string) string {
	if ns == "" {
		return DefaultNamespace
	}
	return ns
}

// Put creates or replaces a secret and reports whether it was created.
func (s *Store) Put(ctx context.Context, spec apitype.SecretSpec) (apitype.SecretSummary, bool, error) {
	x := secret{ns: Namespace(spec.Namespace), id: spec.ID, p: payload{Description: spec.Description, Data: maps.Clone(spec.Data)}}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.write(ctx, x)
}

func (s *Store) write(ctx context.Context, x secret) (apitype.SecretSummary, bool, error) {
	if err := check(x); err != nil {
		return apitype.SecretSummary{}, false, err
	}
	plain, err := json.Marshal(x.p)
	if err != nil {
		return apitype.SecretSummary{}, false, err
	}
	x.updatedAt = s.now().UTC().Truncate(time.Second)
	created, err := s.db.PutSealedSecret(ctx, store.SealedSecret{
		Namespace: x.ns, ID: x.id, Sealed: s.seal(plain, aad(x.ns, x.id)), UpdatedAt: x.updatedAt,
	})
	if err != nil {
		return apitype.SecretSummary{}, false, fmt.Errorf("the secret was not saved: %w", err)
	}
	return summary(x), created, nil
}

// Patch sets and removes keys of an existing secret: a nil value removes
// its key. A secret left with no key is refused.
func (s *Store) Patch(ctx context.Context, ns, id string, p apitype.SecretPatch) (apitype.SecretSummary, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	x, err := s.load(ctx, Namespace(ns), id)
	if err != nil {
		return apitype.SecretSummary{}, err
	}
	if x.p.Data == nil {
		x.p.Data = map[string]string{}
	}
	for k, v := range p.Data {
		if v == nil {
			delete(x.p.Data, k)
		} else {
			x.p.Data[k] = *v
		}
	}
	if p.Description != "" {
		x.p.Description = p.Description
	}
	sum, _, err := s.write(ctx, x)
	return sum, err
}

// Get returns the summary of one secret.
func (s *Store) Get(ctx context.Context, ns, id string) (apitype.SecretSummary, error) {
	x, err := s.load(ctx, Namespace(ns), id)
	if err != nil {
		return apitype.SecretSummary{}, err
	}
	return summary(x), nil
}

// List returns the summaries of every secret, sorted by namespace and id.
func (s *Store) List(ctx context.Context) ([]apitype.SecretSummary, error) {
	rows, err := s.db.SealedSecrets(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]apitype.SecretSummary, 0, len(rows))
	for _, r := range rows {
		x, err := s.decode(r)
		if err != nil {
			return nil, err
		}
		out = append(out, summary(x))
	}
	return out, nil
}

// Delete removes a secret.
func (s *Store) Delete(ctx context.Context, ns, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.db.DeleteSealedSecret(ctx, Namespace(ns), id)
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("%w: no secret %q in namespace %q", ErrNotFound, id, Namespace(ns))
	}
	return err
}

// Value returns one value of a secret, for resolving a SecretRef.
func (s *Store) Value(ctx context.Context, ns, id, key string) (string, error) {
	x, err := s.load(ctx, Namespace(ns), id)
	if err != nil {
		return "", err
	}
	v, ok := x.p.Data[key]
	if !ok {
		return "", fmt.Errorf("%w: secret %q in namespace %q has no key %q", ErrNoKey, id, x.ns, key)
	}
	return v, nil
}

// ResolveEnv resolves a deployment's `vm.env_from` (or `update.env_from`)
// into environment variables, reading secrets of namespace ns only.
//
// An entry with a key exports that value as `as`, or as the key upper-cased
// (with characters other than A-Z, 0-9 and _ turned into _). An entry
// without a key exports every key of the secret that way; `as` is then
// allowed only when the secret holds exactly one key. Later entries win.
// A missing secret or key is an error naming it, wrapping ErrNotFound or
// ErrNoKey, so the replica is not created half-configured.
func (s *Store) ResolveEnv(ctx context.Context, ns string, refs []apitype.SecretEnv) (map[string]string, error) {
	ns = Namespace(ns)
	out := map[string]string{}
	seen := map[string]secret{}
	for i, ref := range refs {
		if ref.Namespace != "" && ref.Namespace != ns {
			return nil, fmt.Errorf("env_from[%d]: secret %q is named in namespace %q, outside the deployment's namespace %q", i, ref.Secret, ref.Namespace, ns)
		}
		x, ok := seen[ref.Secret]
		if !ok {
			var err error
			if x, err = s.load(ctx, ns, ref.Secret); err != nil {
				return nil, fmt.Errorf("env_from[%d]: %w", i, err)
			}
			seen[ref.Secret] = x
		}
		switch {
		case ref.Key != "":
			v, ok := x.p.Data[ref.Key]
			if !ok {
				return nil, fmt.Errorf("env_from[%d]: %w: secret %q in namespace %q has no key %q", i, ErrNoKey, ref.Secret, ns, ref.Key)
			}
			name := ref.As
			if name == "" {
				name = EnvName(ref.Key)
			}
			out[name] = v
		case ref.As != "":
			if len(x.p.Data) != 1 {
				return nil, fmt.Errorf("env_from[%d]: secret %q holds %d keys, so `as` needs a `key` to say which one", i, ref.Secret, len(x.p.Data))
			}
			for _, v := range x.p.Data {
				out[ref.As] = v
			}
		default:
			for k, v := range x.p.Data {
				out[EnvName(k)] = v
			}
		}
	}
	return out, nil
}

// EnvName is the environment variable a secret key is exported as when an
// env_from entry gives no `as`: upper-cased, with every character other
// than A-Z, 0-9 and _ replaced by _.
func EnvName(key string) string {
	b := []byte(strings.ToUpper(key))
	for i, c := range b {
		if !('A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_') {
			b[i] = '_'
		}
	}
	return string(b)
}

// MergeEnv returns a replica's environment: the literal env_vars with the
// resolved secrets laid over them, since a secret wins over a literal
// variable of the same name.
func MergeEnv(literal, fromSecrets map[string]string) map[string]string {
	out := make(map[string]string, len(literal)+len(fromSecrets))
	maps.Copy(out, literal)
	maps.Copy(out, fromSecrets)
	return out
}

// check validates a secret (app-lb.md §8).
func check(x secret) error {
	if msg := nameProblem(x.id, MaxIDLen); msg != "" {
		return invalid("id", "%s", msg)
	}
	if msg := namespaceProblem(x.ns); msg != "" {
		return invalid("namespace", "%s", msg)
	}
	if len(x.p.Data) == 0 {
		return invalid("data", "a secret must hold at least one key")
	}
	for _, k := range slices.Sorted(maps.Keys(x.p.Data)) {
		if msg := nameProblem(k, MaxKeyLen); msg != "" {
			return invalid("data", "key %s", msg)
		}
	}
	if len(x.p.Description) > 1024 {
		return invalid("description", "must be at most 1024 bytes")
	}
	return nil
}

// CheckID reports whether id is a valid secret id.
func CheckID(id string) error {
	if msg := nameProblem(id, MaxIDLen); msg != "" {
		return invalid("id", "%s", msg)
	}
	return nil
}

func nameProblem(s string, max int) string {
	switch {
	case s == "":
		return "must not be empty"
	case len(s) > max:
		return fmt.Sprintf("%q is longer than %d characters", s[:max]+"…", max)
	case strings.Contains(s, ".."):
		return fmt.Sprintf("%q must not contain \"..\"", s)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Sprintf("%q has invalid character %q (allowed: A-Z a-z 0-9 . _ -)", s, c)
		}
	}
	return ""
}

func namespaceProblem(ns string) string {
	if len(ns) > 63 {
		return "longer than 63 characters"
	}
	for i := 0; i < len(ns); i++ {
		c := ns[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
			return fmt.Sprintf("%q has invalid character %q (allowed: a-z 0-9 -)", ns, c)
		}
	}
	return ""
}

// ReferencedBy returns the ids of the deployments among specs that name
// secret id of namespace ns anywhere (env_from, build/artifact/mount/
// workspace/update auth, gate client_secret, JWT secret), sorted.
func ReferencedBy(specs []apitype.DeploymentSpec, ns, id string) []string {
	ns = Namespace(ns)
	var out []string
	for i := range specs {
		sp := &specs[i]
		dns := Namespace(sp.Namespace)
		hit := false
		each(sp, func(secret, refNS string) {
			if refNS == "" {
				refNS = dns
			}
			if secret == id && refNS == ns {
				hit = true
			}
		})
		if hit {
			out = append(out, sp.ID)
		}
	}
	slices.Sort(out)
	return out
}

// each calls fn for every secret reference in sp.
func each(sp *apitype.DeploymentSpec, fn func(secret, ns string)) {
	ref := func(r *apitype.SecretRef) {
		if r != nil {
			fn(r.Secret, r.Namespace)
		}
	}
	env := func(es []apitype.SecretEnv) {
		for _, e := range es {
			fn(e.Secret, e.Namespace)
		}
	}
	if vm := sp.VM; vm != nil {
		env(vm.EnvFrom)
		if vm.Workspace != nil {
			ref(vm.Workspace.Auth)
		}
		for i := range vm.Mounts {
			ref(vm.Mounts[i].Auth)
		}
	}
	if sp.Build != nil {
		ref(sp.Build.Auth)
	}
	if sp.Artifact != nil {
		ref(sp.Artifact.Auth)
	}
	if u := sp.Update; u != nil {
		env(u.EnvFrom)
		ref(u.Auth)
	}
	if a := sp.Auth; a != nil {
		ref(a.ClientSecret)
		if a.JWT != nil {
			ref(a.JWT.Secret)
		}
	}
}
