package jwtverify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/golang-jwt/jwt/v5"

	"github.com/berth-dev/berth/apitype"
)

// SecretFunc resolves a SecretRef (its namespace already stamped) to the
// HMAC key bytes.
type SecretFunc func(ctx context.Context, ref apitype.SecretRef) ([]byte, error)

// Options are what [New] needs besides the spec.
type Options struct {
	// Secret resolves `secret`; required when the spec names one.
	Secret SecretFunc
	// Client fetches the JWKS. Nil means a client with dial, TLS handshake,
	// response header and overall timeouts of 5 s. Whichever client, its
	// redirects are limited to 3, each https or loopback http.
	Client *http.Client
	// Now is the clock for `exp`, `nbf` and the refetch rate limit. Nil
	// means time.Now.
	Now func() time.Time
	// FetchError, when set, hears every failed JWKS fetch or secret resolve,
	// the background ones included (whose failures reach no request).
	FetchError func(error)
}

// Reason is why a token was refused: short and stable, for a metrics label
// and a SIEM record.
type Reason string

// The reasons Verify refuses a token for.
const (
	// Not a JWT: bad segments, base64 or JSON, a claim of the wrong type,
	// a `crit` header, a token over 16 KiB.
	ReasonMalformed Reason = "malformed"
	// The header's `alg` is not among `algorithms` (`none` never is), or is
	// no algorithm at all.
	ReasonAlgorithm Reason = "algorithm"
	// The signature does not verify.
	ReasonSignature Reason = "signature"
	// `exp` has passed, or the token has no `exp`.
	ReasonExpired Reason = "expired"
	// `nbf` is still ahead.
	ReasonNotYetValid Reason = "not-yet-valid"
	// `iss` is missing or not `issuer`.
	ReasonIssuer Reason = "issuer"
	// `aud` is missing or does not contain `audience`.
	ReasonAudience Reason = "audience"
	// A `require` entry does not hold.
	ReasonRequire Reason = "require"
	// The subject claim is missing, empty, not a string or holds control
	// characters.
	ReasonSubject Reason = "subject"
	// No key held suits the token's `kid` and `alg` (for a JWKS, after the
	// refetch it was allowed), or the HMAC secret could not be resolved.
	ReasonNoKey Reason = "no-key"
	// The JWKS could not be fetched and no key that could verify the token
	// is held.
	ReasonJWKSUnavailable Reason = "jwks-unavailable"
)

// Error is a refused token.
type Error struct {
	Reason Reason
	// Msg is for a person; it may quote (shortened) claims of the token.
	Msg string
}

func (e *Error) Error() string { return "jwt " + string(e.Reason) + ": " + e.Msg }

func refuse(r Reason, format string, args ...any) *Error {
	return &Error{Reason: r, Msg: fmt.Sprintf(format, args...)}
}

// Claims is who a verified token says the caller is.
type Claims struct {
	// Subject is the subject claim; never empty.
	Subject string
	// Email and Name are the email and name claims, or "" when absent or
	// not strings.
	Email, Name string
	// All is every claim of the token, numbers as json.Number.
	All map[string]any
}

// maxTokenLen bounds the work a request's token can cause before its
// signature is checked.
const maxTokenLen = 16 << 10

// Verifier verifies tokens against one compiled spec. It is safe for
// concurrent use.
type Verifier struct {
	c       *compiled
	issuer  string
	parser  *jwt.Parser
	now     func() time.Time
	algBits map[string]uint16 // algorithm → its bit in a key's mask
	static  *keySet           // public_key
	src     *source           // secret or jwks_url
	jwks    bool
}

// New compiles spec into a Verifier. It touches neither the network nor the
// secret store: the first Verify (or Prefetch) does. A Verifier with a
// secret or a JWKS runs a background refresh once it has keys; Close stops
// it.
func New(spec apitype.JwtSpec, o Options) (*Verifier, error) {
	c, ferr := compile(spec)
	if ferr != nil {
		return nil, ferr
	}
	if spec.Secret != nil && o.Secret == nil {
		return nil, errors.New("jwtverify: the spec names a secret and Options.Secret is nil")
	}
	now := o.Now
	if now == nil {
		now = time.Now
	}
	v := &Verifier{c: c, issuer: spec.Issuer, now: now, algBits: map[string]uint16{}}
	for i, a := range c.algs {
		v.algBits[a] = 1 << i
	}
	opts := []jwt.ParserOption{
		jwt.WithValidMethods(c.algs),
		jwt.WithIssuer(spec.Issuer),
		jwt.WithExpirationRequired(),
		jwt.WithLeeway(time.Duration(c.leeway) * time.Second),
		jwt.WithTimeFunc(now),
		jwt.WithJSONNumber(),
		jwt.WithStrictDecoding(),
	}
	if spec.Audience != "" {
		opts = append(opts, jwt.WithAudience(spec.Audience))
	}
	v.parser = jwt.NewParser(opts...)

	switch {
	case c.pub != nil:
		v.static = &keySet{anyKid: true, keys: []verifyKey{{key: c.pub, algs: v.mask(c.pub, "")}}}
	case spec.Secret != nil:
		ref := *spec.Secret
		resolve := o.Secret
		v.src = newSource("secret", secretRefresh, now, o.FetchError, func(ctx context.Context) (*keySet, error) {
			b, err := resolve(ctx, ref)
			if err != nil {
				return nil, fmt.Errorf("the secret %q does not resolve: %w", ref.Secret, err)
			}
			if len(b) < minHMACKey {
				return nil, fmt.Errorf("the secret %q is %d bytes; an HMAC key needs at least %d", ref.Secret, len(b), minHMACKey)
			}
			key := append([]byte(nil), b...)
			return &keySet{anyKid: true, keys: []verifyKey{{key: key, algs: v.mask(key, "")}}}, nil
		})
	default:
		client := fetchClient(o.Client)
		url := spec.JWKSURL
		v.jwks = true
		v.src = newSource("JWKS", jwksRefresh, now, o.FetchError, func(ctx context.Context) (*keySet, error) {
			return fetchJWKS(ctx, client, url, v.mask)
		})
	}
	return v, nil
}

// mask is the set of the spec's algorithms key can verify; a JWK's own alg,
// when it names one, narrows it to that.
func (v *Verifier) mask(key any, jwkAlg string) uint16 {
	var m uint16
	for _, a := range v.c.algs {
		if jwkAlg != "" && jwkAlg != a {
			continue
		}
		if suits(algorithms[a], key) == "" {
			m |= v.algBits[a]
		}
	}
	return m
}

// Prefetch resolves the secret or fetches the JWKS now, when no keys are
// held yet, so the first request does not wait on it. It is a no-op for a
// public_key.
func (v *Verifier) Prefetch(ctx context.Context) error {
	if v.src == nil {
		return nil
	}
	_, err := v.src.keys(ctx)
	return err
}

// Close stops the background refresh and waits for it and any fetch in
// flight. Verify keeps working on the keys held; it fetches no more.
func (v *Verifier) Close() {
	if v.src != nil {
		v.src.close()
	}
}

// Verify checks raw (the token, without `Bearer `) and returns its claims,
// or an [*Error] saying why it is refused. ctx bounds only a wait for keys.
func (v *Verifier) Verify(ctx context.Context, raw string) (*Claims, error) {
	if raw == "" {
		return nil, refuse(ReasonMalformed, "empty token")
	}
	if len(raw) > maxTokenLen {
		return nil, refuse(ReasonMalformed, "token is %d bytes; at most %d are read", len(raw), maxTokenLen)
	}
	claims := jwt.MapClaims{}
	tok, err := v.parser.ParseWithClaims(raw, claims, func(t *jwt.Token) (any, error) {
		return v.keyFor(ctx, t)
	})
	if err != nil {
		return nil, v.classify(tok, claims, err)
	}

	sub, ok := claims[v.c.subject].(string)
	switch {
	case !ok && claims[v.c.subject] == nil:
		return nil, refuse(ReasonSubject, "the token has no %s claim", v.c.subject)
	case !ok:
		return nil, refuse(ReasonSubject, "the %s claim is %s, not a string", v.c.subject, jsonKind(claims[v.c.subject]))
	case sub == "":
		return nil, refuse(ReasonSubject, "the %s claim is empty", v.c.subject)
	case !printable(sub):
		return nil, refuse(ReasonSubject, "the %s claim holds control characters", v.c.subject)
	}
	for _, r := range v.c.require {
		if !r.holds(claims[r.claim]) {
			got, present := claims[r.claim]
			if !present {
				return nil, refuse(ReasonRequire, "the token has no %s claim", r.claim)
			}
			return nil, refuse(ReasonRequire, "the %s claim is %s, not %s", r.claim, show(got), showWant(r.want))
		}
	}
	return &Claims{Subject: sub, Email: identity(claims, v.c.email), Name: identity(claims, v.c.name), All: claims}, nil
}

// keyFor is the jwt.Keyfunc: the key, or keys, that may verify t.
func (v *Verifier) keyFor(ctx context.Context, t *jwt.Token) (any, error) {
	if _, ok := t.Header["crit"]; ok {
		return nil, refuse(ReasonMalformed, "the header names critical extensions (crit), which are not implemented here")
	}
	kid := ""
	if k, ok := t.Header["kid"]; ok {
		if kid, ok = k.(string); !ok {
			return nil, refuse(ReasonMalformed, "the header's kid is %s, not a string", jsonKind(k))
		}
	}
	alg := t.Method.Alg()
	bit := v.algBits[alg] // in the list: WithValidMethods ran first
	if v.static != nil {
		return v.static.pick(kid, bit), nil
	}
	set, err := v.src.keys(ctx)
	if err != nil {
		if v.jwks {
			return nil, refuse(ReasonJWKSUnavailable, "no JWKS is held: %v", err)
		}
		return nil, refuse(ReasonNoKey, "%v", err)
	}
	if k := set.pick(kid, bit); k != nil {
		return k, nil
	}
	if !v.jwks {
		return nil, refuse(ReasonNoKey, "the secret cannot verify %s", alg)
	}
	// The issuer may have rotated: look again, once per window.
	set, err = v.src.refetch(ctx, set)
	if k := set.pick(kid, bit); k != nil {
		return k, nil
	}
	what := "no key suits " + alg
	if kid != "" {
		what = fmt.Sprintf("no key %s suits %s", show(kid), alg)
	}
	switch {
	case errors.Is(err, errRateLimited):
		return nil, refuse(ReasonNoKey, "%s, and the JWKS was refetched less than %v ago", what, missWindow)
	case err != nil:
		return nil, refuse(ReasonJWKSUnavailable, "%s, and the JWKS refetch failed: %v", what, err)
	}
	return nil, refuse(ReasonNoKey, "%s in the JWKS, refetched just now", what)
}

// classify turns a golang-jwt error into an *Error.
func (v *Verifier) classify(tok *jwt.Token, claims jwt.MapClaims, err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	switch {
	case errors.Is(err, jwt.ErrTokenMalformed):
		return refuse(ReasonMalformed, "%v", err)
	case errors.Is(err, jwt.ErrTokenUnverifiable):
		// The header names no algorithm, or one golang-jwt does not know.
		alg := any(nil)
		if tok != nil {
			alg = tok.Header["alg"]
		}
		return refuse(ReasonAlgorithm, "the header's alg %s is not an algorithm; %s accepted", show(alg), v.accepted())
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		if tok != nil && tok.Method != nil && v.algBits[tok.Method.Alg()] == 0 {
			return refuse(ReasonAlgorithm, "alg %s is not accepted; %s", show(tok.Method.Alg()), v.accepted())
		}
		return refuse(ReasonSignature, "the signature does not verify")
	case errors.Is(err, jwt.ErrTokenInvalidClaims):
		return v.claimsProblem(claims, err)
	}
	return refuse(ReasonMalformed, "%v", err)
}

func (v *Verifier) accepted() string {
	if len(v.c.algs) == 1 {
		return "only " + v.c.algs[0] + " is"
	}
	n := len(v.c.algs)
	return strings.Join(v.c.algs[:n-1], ", ") + " and " + v.c.algs[n-1] + " are"
}

// claimsProblem names the first of the validator's (joined) complaints, in
// the order exp, nbf, iss, aud. A claim missing reads as
// ErrTokenRequiredClaimMissing whichever it is, so the claims say which.
func (v *Verifier) claimsProblem(claims jwt.MapClaims, err error) *Error {
	missing := errors.Is(err, jwt.ErrTokenRequiredClaimMissing)
	absent := func(name string) bool {
		x, ok := claims[name]
		if !ok || x == nil {
			return true
		}
		switch x := x.(type) {
		case string:
			return x == ""
		case []any:
			return len(x) == 0 || len(x) == 1 && x[0] == ""
		}
		return false
	}
	switch {
	case errors.Is(err, jwt.ErrInvalidType):
		return refuse(ReasonMalformed, "%v", err)
	case missing && absent("exp"):
		return refuse(ReasonExpired, "the token has no exp; an expiry is required")
	case errors.Is(err, jwt.ErrTokenExpired):
		exp, _ := claims.GetExpirationTime()
		return refuse(ReasonExpired, "the token expired at %s (%d s leeway)", exp.UTC().Format(time.RFC3339), v.c.leeway)
	case errors.Is(err, jwt.ErrTokenNotValidYet):
		nbf, _ := claims.GetNotBefore()
		return refuse(ReasonNotYetValid, "the token is not valid before %s (%d s leeway)", nbf.UTC().Format(time.RFC3339), v.c.leeway)
	case missing && absent("iss"):
		return refuse(ReasonIssuer, "the token has no iss; %s is required", show(v.issuer))
	case errors.Is(err, jwt.ErrTokenInvalidIssuer):
		return refuse(ReasonIssuer, "iss %s is not %s", show(claims["iss"]), show(v.issuer))
	case missing && absent("aud"):
		return refuse(ReasonAudience, "the token has no aud")
	case errors.Is(err, jwt.ErrTokenInvalidAudience):
		return refuse(ReasonAudience, "aud %s does not name this audience", show(claims["aud"]))
	}
	return refuse(ReasonMalformed, "%v", err)
}

// holds reports whether the token's claim value got satisfies r.
func (r requirement) holds(got any) bool {
	if list, ok := got.([]any); ok {
		for _, g := range list {
			if r.matches(g) {
				return true
			}
		}
		return false
	}
	return r.matches(got)
}

func (r requirement) matches(got any) bool {
	for _, w := range r.want {
		if equal(w, got) {
			return true
		}
	}
	return false
}

// equal compares two decoded JSON scalars typed: strings with strings,
// booleans with booleans, numbers by value (as integers when both are,
// else as float64).
func equal(want, got any) bool {
	switch w := want.(type) {
	case string:
		g, ok := got.(string)
		return ok && g == w
	case bool:
		g, ok := got.(bool)
		return ok && g == w
	case json.Number:
		g, ok := got.(json.Number)
		if !ok {
			return false
		}
		if w == g {
			return true
		}
		wi, err1 := strconv.ParseInt(string(w), 10, 64)
		gi, err2 := strconv.ParseInt(string(g), 10, 64)
		if err1 == nil && err2 == nil {
			return wi == gi
		}
		wf, err1 := strconv.ParseFloat(string(w), 64)
		gf, err2 := strconv.ParseFloat(string(g), 64)
		return err1 == nil && err2 == nil && wf == gf
	}
	return false
}

// identity is claim name of claims when it is a printable string, else "".
func identity(claims jwt.MapClaims, name string) string {
	s, _ := claims[name].(string)
	if !printable(s) {
		return ""
	}
	return s
}

// printable reports whether s is valid UTF-8 without control characters,
// so it can travel in a header.
func printable(s string) bool {
	for _, r := range s {
		if r == unicode.ReplacementChar || unicode.IsControl(r) {
			return false
		}
	}
	return true
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case json.Number, float64:
		return "a number"
	case bool:
		return "a boolean"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("a %T", v)
}

// show quotes a value from a token for a message, shortened: a token's
// claims are the caller's to choose.
func show(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return jsonKind(v)
	}
	const max = 64
	if len(b) > max {
		n := max
		for n > 0 && !utf8.RuneStart(b[n]) {
			n--
		}
		return string(b[:n]) + "…"
	}
	return string(b)
}

func showWant(want []any) string {
	if len(want) == 1 {
		return show(want[0])
	}
	return "one of " + show(want)
}
