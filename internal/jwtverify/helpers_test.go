package jwtverify

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"math/big"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/clocktest"
)

// Keys are made once per test binary: RSA generation is slow.
var (
	rsaKey  = sync.OnceValue(func() *rsa.PrivateKey { return must(rsa.GenerateKey(rand.Reader, 2048)) })
	rsaKey2 = sync.OnceValue(func() *rsa.PrivateKey { return must(rsa.GenerateKey(rand.Reader, 2048)) })
	ecKey   = sync.OnceValue(func() *ecdsa.PrivateKey { return must(ecdsa.GenerateKey(elliptic.P256(), rand.Reader)) })
	ecKey2  = sync.OnceValue(func() *ecdsa.PrivateKey { return must(ecdsa.GenerateKey(elliptic.P256(), rand.Reader)) })
	edKey   = sync.OnceValue(newEd25519)
	edKey2  = sync.OnceValue(newEd25519)
)

var (
	hmacSecret  = []byte("0123456789abcdef0123456789abcdef-heyo")
	otherSecret = []byte("fedcba9876543210fedcba9876543210-evil")
)

func newEd25519() ed25519.PrivateKey {
	_, k, err := ed25519.GenerateKey(rand.Reader)
	return must(k, err)
}

// refreshNow runs one background refresh of s (whose tick is tick) and
// returns when it has ended.
func refreshNow(t testing.TB, s *source, tick chan time.Time) {
	t.Helper()
	done := make(chan struct{})
	s.mu.Lock()
	s.refreshed = func() { done <- struct{}{} }
	s.mu.Unlock()
	tick <- time.Now()
	<-done
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// t0 is the fake clock's start.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func newClock() *clocktest.Clock { return clocktest.New(t0) }

func pemPublic(t testing.TB, pub crypto.PublicKey) string {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
}

func pemCert(t testing.TB, priv crypto.Signer) string {
	t.Helper()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "issuer"},
		NotBefore:    t0.Add(-24 * time.Hour),
		NotAfter:     t0.Add(24 * time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, priv.Public(), priv)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

// claims are a token's claims that verify against baseSpec at t0.
func claims(extra ...any) jwt.MapClaims {
	c := jwt.MapClaims{
		"iss":   "auth-service",
		"sub":   "user-1",
		"email": "ada@example.com",
		"name":  "Ada",
		"exp":   t0.Add(time.Hour).Unix(),
		"iat":   t0.Add(-time.Minute).Unix(),
	}
	for i := 0; i+1 < len(extra); i += 2 {
		k := extra[i].(string)
		if extra[i+1] == nil {
			delete(c, k)
			continue
		}
		c[k] = extra[i+1]
	}
	return c
}

// sign makes a token; header entries (kid, say) are set on top of alg/typ.
func sign(t testing.TB, m jwt.SigningMethod, key any, c jwt.MapClaims, header ...string) string {
	t.Helper()
	tok := jwt.NewWithClaims(m, c)
	for i := 0; i+1 < len(header); i += 2 {
		tok.Header[header[i]] = header[i+1]
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func secretSpec(algs ...string) apitype.JwtSpec {
	return apitype.JwtSpec{
		Secret:     &apitype.SecretRef{Secret: "heyo-auth", Key: "key", Namespace: "team-a"},
		Algorithms: algs,
		Issuer:     "auth-service",
	}
}

func staticSecret(b []byte) SecretFunc {
	return func(context.Context, apitype.SecretRef) ([]byte, error) { return b, nil }
}

func newVerifier(t testing.TB, spec apitype.JwtSpec, o Options) *Verifier {
	t.Helper()
	v, err := New(spec, o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(v.Close)
	return v
}

// reasonOf is err's Reason, "" for nil, and fails the test for another
// kind of error.
func reasonOf(t testing.TB, err error) Reason {
	t.Helper()
	if err == nil {
		return ""
	}
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not an *Error", err, err)
	}
	return e.Reason
}

func intp(i int) *int { return &i }

func rawJSON(s string) json.RawMessage { return json.RawMessage(s) }
