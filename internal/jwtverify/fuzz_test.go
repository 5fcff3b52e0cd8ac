package jwtverify

import (
	"context"
	"crypto"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/json"
	"errors"
	"hash"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/berth-dev/berth/apitype"
)

var reasons = map[Reason]bool{
	ReasonMalformed: true, ReasonAlgorithm: true, ReasonSignature: true, ReasonExpired: true,
	ReasonNotYetValid: true, ReasonIssuer: true, ReasonAudience: true, ReasonRequire: true,
	ReasonSubject: true, ReasonNoKey: true, ReasonJWKSUnavailable: true,
}

// FuzzVerify: no input panics; a verifier holding a key nobody signs with
// admits nothing; and what the others admit carries a signature that
// verifies by the standard library alone.
func FuzzVerify(f *testing.F) {
	now := func() time.Time { return t0 }
	spec := secretSpec("HS256", "HS512")
	spec.Require = map[string]json.RawMessage{"role": rawJSON(`["user","admin"]`)}
	hs := newVerifier(f, spec, Options{Secret: staticSecret(hmacSecret), Now: now})
	rs := newVerifier(f, apitype.JwtSpec{PublicKey: pemPublic(f, rsaKey().Public()), Algorithms: []string{"RS256"}, Issuer: "auth-service"}, Options{Now: now})
	locked := make([]byte, 32)
	rand.Read(locked)
	lockedHS := newVerifier(f, secretSpec("HS256", "HS384", "HS512"), Options{Secret: staticSecret(locked), Now: now})
	lockedES := newVerifier(f, apitype.JwtSpec{PublicKey: pemPublic(f, ecKey2().Public()), Algorithms: []string{"ES256"}, Issuer: "auth-service"}, Options{Now: now})

	good := claims("role", "admin")
	for _, s := range []string{
		sign(f, jwt.SigningMethodHS256, hmacSecret, good),
		sign(f, jwt.SigningMethodHS512, hmacSecret, claims("role", []string{"x", "user"}), "kid", "a"),
		sign(f, jwt.SigningMethodRS256, rsaKey(), good),
		sign(f, jwt.SigningMethodES256, ecKey(), good),
		sign(f, jwt.SigningMethodHS256, []byte(pemPublic(f, rsaKey().Public())), good),
		sign(f, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, good),
		sign(f, jwt.SigningMethodHS256, hmacSecret, claims("exp", 1e300, "nbf", -1e300)),
		sign(f, jwt.SigningMethodHS256, hmacSecret, claims("sub", map[string]any{"a": 1}, "aud", []any{1})),
		sign(f, jwt.SigningMethodHS256, hmacSecret, good, "crit", "b64"),
		"", ".", "..", "a.b.c", "e30.e30.", "eyJhbGciOiJIUzI1NiJ9.e30.", "eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.",
	} {
		f.Add(s)
	}
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, raw string) {
		for name, v := range map[string]*Verifier{"locked HS": lockedHS, "locked ES": lockedES} {
			if c, err := v.Verify(ctx, raw); err == nil {
				t.Fatalf("%s verifier admitted %q as %+v", name, raw, c)
			}
		}
		for name, v := range map[string]*Verifier{"HS": hs, "RS": rs} {
			_, err := v.Verify(ctx, raw)
			if err != nil {
				var e *Error
				if !errors.As(err, &e) || !reasons[e.Reason] {
					t.Fatalf("%s: %v (%T) is not an *Error with a known reason", name, err, err)
				}
				continue
			}
			if !signedBy(raw, name) {
				t.Fatalf("%s verifier admitted %q, whose signature the standard library rejects", name, raw)
			}
		}
	})
}

// signedBy checks raw's signature with crypto alone: HMAC-SHA256/512 under
// hmacSecret for "HS", RSASSA-PKCS1-v1_5 SHA-256 under rsaKey for "RS".
func signedBy(raw, which string) bool {
	parts := strings.Split(raw, ".")
	if len(parts) != 3 {
		return false
	}
	hb, err1 := base64.RawURLEncoding.DecodeString(parts[0])
	sig, err2 := base64.RawURLEncoding.DecodeString(parts[2])
	if err1 != nil || err2 != nil {
		return false
	}
	var h struct{ Alg string }
	if json.Unmarshal(hb, &h) != nil {
		return false
	}
	input := []byte(parts[0] + "." + parts[1])
	switch which {
	case "HS":
		var mac hash.Hash
		switch h.Alg {
		case "HS256":
			mac = hmac.New(sha256.New, hmacSecret)
		case "HS512":
			mac = hmac.New(sha512.New, hmacSecret)
		default:
			return false
		}
		mac.Write(input)
		return hmac.Equal(mac.Sum(nil), sig)
	case "RS":
		if h.Alg != "RS256" {
			return false
		}
		d := sha256.Sum256(input)
		return rsa.VerifyPKCS1v15(&rsaKey().PublicKey, crypto.SHA256, d[:], sig) == nil
	}
	return false
}

type failTransport struct{}

func (failTransport) RoundTrip(*http.Request) (*http.Response, error) {
	return nil, errors.New("no network in this test")
}

// FuzzCheck: any spec that decodes either fails Check with a field under
// jwt (and then New fails too) or passes, and then New compiles it without
// touching the network and the result verifies without panicking.
func FuzzCheck(f *testing.F) {
	pemKey, _ := json.Marshal(pemPublic(f, rsaKey().Public()))
	ecPEM, _ := json.Marshal(pemPublic(f, ecKey().Public()))
	for _, s := range []string{
		`{"secret":{"secret":"heyo-auth","namespace":"team-a"},"algorithms":["HS256"],"issuer":"auth-service","audience":"heyo-app","subject_claim":"userId","leeway_secs":30,"require":{"role":["user","admin"],"accountId":"acct_7f3c"}}`,
		`{"jwks_url":"https://auth.example.com/.well-known/jwks.json","algorithms":["RS256","ES256"],"issuer":"https://auth.example.com/"}`,
		`{"jwks_url":"http://example.com/jwks","algorithms":["RS256"],"issuer":"i"}`,
		`{"public_key":` + string(pemKey) + `,"algorithms":["RS256","PS512"],"issuer":"i"}`,
		`{"public_key":` + string(pemKey) + `,"algorithms":["HS256"],"issuer":"i"}`,
		`{"public_key":` + string(ecPEM) + `,"algorithms":["ES384"],"issuer":"i"}`,
		`{"secret":{"secret":"s"},"algorithms":["none"],"issuer":"i"}`,
		`{"secret":{"secret":"s"},"algorithms":["HS256"],"issuer":"i","require":{"n":[1,true,"x"],"o":{"a":1},"":"x"}}`,
		`{"secret":{"secret":"s"},"public_key":"x","algorithms":[],"issuer":"","leeway_secs":-5}`,
		`{}`,
	} {
		f.Add([]byte(s))
	}
	ctx := context.Background()
	client := &http.Client{Transport: failTransport{}}
	tok := sign(f, jwt.SigningMethodHS256, hmacSecret, claims())
	f.Fuzz(func(t *testing.T, data []byte) {
		var spec apitype.JwtSpec
		if json.Unmarshal(data, &spec) != nil {
			return
		}
		o := Options{Secret: staticSecret(hmacSecret), Client: client, Now: func() time.Time { return t0 }}
		if err := Check(spec); err != nil {
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != "jwt" && !strings.HasPrefix(fe.Field, "jwt.") || fe.Msg == "" {
				t.Fatalf("Check = %v (%T), want a *FieldError under jwt", err, err)
			}
			if _, err := New(spec, o); err == nil {
				t.Fatal("New compiled what Check refused")
			}
			return
		}
		v, err := New(spec, o)
		if err != nil {
			t.Fatalf("Check passed and New failed: %v", err)
		}
		defer v.Close()
		for _, raw := range []string{"a.b.c", tok} {
			if _, err := v.Verify(ctx, raw); err != nil {
				var e *Error
				if !errors.As(err, &e) || !reasons[e.Reason] {
					t.Fatalf("Verify: %v (%T)", err, err)
				}
			}
		}
	})
}
