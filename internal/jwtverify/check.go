package jwtverify

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/url"
	"slices"
	"strings"

	"github.com/berth-dev/berth/apitype"
)

// FieldError is a problem with one field of a [apitype.JwtSpec]. Field is
// `jwt` or starts with `jwt.`, so a caller holding the spec at another path
// (`auth.jwt`) prefixes it.
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

func fieldErr(field, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// MaxLeewaySecs is the largest `leeway_secs`.
const MaxLeewaySecs = 300

// family is the kind of key an algorithm verifies with.
type family int

const (
	famHMAC family = iota
	famRSA
	famEC
	famEd25519
)

type algorithm struct {
	fam   family
	curve elliptic.Curve // famEC only
}

// algorithms are the ones golang-jwt implements, less `none`.
var algorithms = map[string]algorithm{
	"HS256": {fam: famHMAC}, "HS384": {fam: famHMAC}, "HS512": {fam: famHMAC},
	"RS256": {fam: famRSA}, "RS384": {fam: famRSA}, "RS512": {fam: famRSA},
	"PS256": {fam: famRSA}, "PS384": {fam: famRSA}, "PS512": {fam: famRSA},
	"ES256": {fam: famEC, curve: elliptic.P256()},
	"ES384": {fam: famEC, curve: elliptic.P384()},
	"ES512": {fam: famEC, curve: elliptic.P521()},
	"EdDSA": {fam: famEd25519},
}

const algorithmNames = "HS256, HS384, HS512, RS256, RS384, RS512, PS256, PS384, PS512, ES256, ES384, ES512, EdDSA"

// RSA key sizes accepted, in bits.
const (
	minRSABits = 2048
	maxRSABits = 8192
)

// minHMACKey is the shortest HMAC secret, in bytes: RFC 7518 §3.2 wants a
// key at least as long as the hash, and HS256's is 32.
const minHMACKey = 32

// Check validates spec statically: no network, no secret store. The first
// problem found is returned as a [*FieldError]; nil means [New] will compile
// the spec (given a [SecretFunc] when it names a secret).
//
// Check covers what verification needs. The gate's own fields — `cookie`,
// `login_endpoint`, `login_url`, `login_redirect_param`, `authorize_url`,
// `token_url` — are not looked at.
func Check(spec apitype.JwtSpec) error {
	if _, err := compile(spec); err != nil {
		return err
	}
	return nil
}

// compiled is what Check learns about a spec and New builds on.
type compiled struct {
	algs    []string
	pub     any // the public_key's key, when that is the source
	leeway  int
	require []requirement
	subject string
	email   string
	name    string
}

// compile is Check, keeping what it parsed. Its errors are *FieldError.
func compile(spec apitype.JwtSpec) (*compiled, *FieldError) {
	n := 0
	if spec.Secret != nil {
		n++
	}
	if spec.PublicKey != "" {
		n++
	}
	if spec.JWKSURL != "" {
		n++
	}
	if n != 1 {
		return nil, fieldErr("jwt", "exactly one of secret, public_key and jwks_url is required")
	}
	c := &compiled{subject: "sub", email: "email", name: "name"}
	if spec.Secret != nil && spec.Secret.Secret == "" {
		return nil, fieldErr("jwt.secret.secret", "required")
	}
	if spec.PublicKey != "" {
		k, err := parsePublicKey(spec.PublicKey)
		if err != nil {
			return nil, fieldErr("jwt.public_key", "%s", err.Error())
		}
		c.pub = k
	}
	if spec.JWKSURL != "" {
		if msg := urlProblem(spec.JWKSURL); msg != "" {
			return nil, fieldErr("jwt.jwks_url", "%s", msg)
		}
	}

	if len(spec.Algorithms) == 0 {
		return nil, fieldErr("jwt.algorithms", "required: the token's own header must not choose the algorithm")
	}
	for i, name := range spec.Algorithms {
		f := fmt.Sprintf("jwt.algorithms[%d]", i)
		alg, ok := algorithms[name]
		switch {
		case strings.EqualFold(name, "none"):
			return nil, fieldErr(f, "%q is never accepted: it admits unsigned tokens", name)
		case !ok:
			return nil, fieldErr(f, "%q is not a supported algorithm (one of %s)", name, algorithmNames)
		case slices.Contains(spec.Algorithms[:i], name):
			return nil, fieldErr(f, "%q is listed twice", name)
		case spec.Secret != nil && alg.fam != famHMAC:
			return nil, fieldErr(f, "%s verifies with a public key (public_key or jwks_url); secret is for HS256, HS384 and HS512", name)
		case spec.Secret == nil && alg.fam == famHMAC:
			return nil, fieldErr(f, "%s needs secret: an HMAC key is never taken from a public key or a JWKS", name)
		case c.pub != nil:
			if msg := suits(alg, c.pub); msg != "" {
				return nil, fieldErr(f, "%s needs %s; public_key is %s", name, msg, describeKey(c.pub))
			}
		}
		c.algs = append(c.algs, name)
	}

	if spec.Issuer == "" {
		return nil, fieldErr("jwt.issuer", "required")
	}
	if spec.LeewaySecs != nil {
		if l := *spec.LeewaySecs; l < 0 || l > MaxLeewaySecs {
			return nil, fieldErr("jwt.leeway_secs", "must be in 0..%d", MaxLeewaySecs)
		}
		c.leeway = *spec.LeewaySecs
	}
	for _, cl := range []struct {
		field, v string
		dst      *string
	}{
		{"jwt.subject_claim", spec.SubjectClaim, &c.subject},
		{"jwt.email_claim", spec.EmailClaim, &c.email},
		{"jwt.name_claim", spec.NameClaim, &c.name},
	} {
		if cl.v == "" {
			continue
		}
		if strings.TrimSpace(cl.v) != cl.v {
			return nil, fieldErr(cl.field, "%q has leading or trailing space", cl.v)
		}
		*cl.dst = cl.v
	}

	keys := make([]string, 0, len(spec.Require))
	for k := range spec.Require {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, claim := range keys {
		r, msg := compileRequirement(claim, spec.Require[claim])
		if msg != "" {
			if claim == "" {
				return nil, fieldErr("jwt.require", "%s", msg)
			}
			return nil, fieldErr("jwt.require."+claim, "%s", msg)
		}
		c.require = append(c.require, r)
	}
	return c, nil
}

// urlProblem says what is wrong with a JWKS URL, or "".
func urlProblem(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "not a URL"
	}
	if u.Host == "" || u.Hostname() == "" {
		return "must be an absolute https URL"
	}
	if u.User != nil {
		return "must not carry credentials"
	}
	switch {
	case u.Scheme == "https":
	case u.Scheme == "http" && loopback(u.Hostname()):
	default:
		return "must be https (http only on loopback)"
	}
	return ""
}

// loopback reports whether host is 127.0.0.0/8, ::1 or localhost. No name
// is resolved: localhost is loopback by RFC 6761, any other name is not.
func loopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// parsePublicKey reads the first PEM block of s as a public key or a
// certificate.
func parsePublicKey(s string) (any, error) {
	rest := []byte(s)
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			return nil, fmt.Errorf("not a PEM public key or certificate")
		}
		var (
			key any
			err error
		)
		switch {
		case strings.Contains(b.Type, "PRIVATE KEY"):
			return nil, fmt.Errorf("is a private key (%s); give the public key or a certificate, and keep the private key with the issuer", b.Type)
		case b.Type == "PUBLIC KEY":
			key, err = x509.ParsePKIXPublicKey(b.Bytes)
		case b.Type == "RSA PUBLIC KEY":
			key, err = x509.ParsePKCS1PublicKey(b.Bytes)
		case b.Type == "CERTIFICATE":
			var cert *x509.Certificate
			cert, err = x509.ParseCertificate(b.Bytes)
			if err == nil {
				key = cert.PublicKey
			}
		default:
			// Skip what is not a key (EC PARAMETERS, say) and look on.
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("the %s block does not parse: %v", b.Type, err)
		}
		if msg := usable(key); msg != "" {
			return nil, fmt.Errorf("%s", msg)
		}
		return key, nil
	}
}

// usable says why a public key cannot verify anything here, or "".
func usable(key any) string {
	switch k := key.(type) {
	case *rsa.PublicKey:
		if b := k.N.BitLen(); b < minRSABits || b > maxRSABits {
			return fmt.Sprintf("an RSA key of %d bits; %d..%d are accepted", b, minRSABits, maxRSABits)
		}
	case *ecdsa.PublicKey:
		switch k.Curve {
		case elliptic.P256(), elliptic.P384(), elliptic.P521():
		default:
			return "an EC key on an unsupported curve; P-256, P-384 and P-521 are accepted"
		}
	case ed25519.PublicKey:
		if len(k) != ed25519.PublicKeySize {
			return "a malformed Ed25519 key"
		}
	default:
		return fmt.Sprintf("a %T key; RSA, EC and Ed25519 keys are accepted", key)
	}
	return ""
}

// suits says what key alg needs when key is not it, or "".
func suits(alg algorithm, key any) string {
	switch alg.fam {
	case famHMAC:
		if _, ok := key.([]byte); !ok {
			return "an HMAC secret"
		}
	case famRSA:
		if _, ok := key.(*rsa.PublicKey); !ok {
			return "an RSA key"
		}
	case famEC:
		if k, ok := key.(*ecdsa.PublicKey); !ok || k.Curve != alg.curve {
			return "an EC " + alg.curve.Params().Name + " key"
		}
	case famEd25519:
		if _, ok := key.(ed25519.PublicKey); !ok {
			return "an Ed25519 key"
		}
	}
	return ""
}

func describeKey(key any) string {
	switch k := key.(type) {
	case *rsa.PublicKey:
		return fmt.Sprintf("an RSA key (%d bits)", k.N.BitLen())
	case *ecdsa.PublicKey:
		return "an EC " + k.Curve.Params().Name + " key"
	case ed25519.PublicKey:
		return "an Ed25519 key"
	case []byte:
		return "an HMAC secret"
	}
	return fmt.Sprintf("a %T", key)
}

// A requirement is one entry of `require`: the claim must equal (or, when it
// is an array, contain) one of want.
type requirement struct {
	claim string
	want  []any // string, json.Number or bool
}

func compileRequirement(claim string, raw json.RawMessage) (requirement, string) {
	if claim == "" {
		return requirement{}, "a claim name must not be empty"
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		return requirement{}, "a value is required"
	}
	v, err := decodeJSON(raw)
	if err != nil {
		return requirement{}, "not JSON: " + err.Error()
	}
	r := requirement{claim: claim}
	const kinds = "a value must be a string, number or boolean, or a list of them"
	if list, ok := v.([]any); ok {
		if len(list) == 0 {
			return requirement{}, "an empty list admits no token"
		}
		for i, e := range list {
			if !scalar(e) {
				return requirement{}, fmt.Sprintf("[%d]: %s", i, kinds)
			}
		}
		r.want = list
		return r, ""
	}
	if !scalar(v) {
		return requirement{}, kinds
	}
	r.want = []any{v}
	return r, ""
}

// decodeJSON decodes one JSON value, numbers as json.Number.
func decodeJSON(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("more than one value")
	}
	return v, nil
}

func scalar(v any) bool {
	switch v.(type) {
	case string, json.Number, bool:
		return true
	}
	return false
}
