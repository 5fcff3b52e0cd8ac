package jwtverify

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"strings"
	"testing"

	"github.com/berth-dev/berth/apitype"
)

func TestCheck(t *testing.T) {
	rsaPEM := pemPublic(t, rsaKey().Public())
	ecPEM := pemPublic(t, ecKey().Public())
	small := must(rsa.GenerateKey(rand.Reader, 1024))
	p384 := must(ecdsa.GenerateKey(elliptic.P384(), rand.Reader))
	privPEM := string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: must(x509.MarshalPKCS8PrivateKey(ecKey()))}))
	pkcs1 := string(pem.EncodeToMemory(&pem.Block{Type: "RSA PUBLIC KEY", Bytes: x509.MarshalPKCS1PublicKey(&rsaKey().PublicKey)}))
	pub := func(key string, algs ...string) apitype.JwtSpec {
		return apitype.JwtSpec{PublicKey: key, Algorithms: algs, Issuer: "i"}
	}
	jwks := func(url string, algs ...string) apitype.JwtSpec {
		return apitype.JwtSpec{JWKSURL: url, Algorithms: algs, Issuer: "i"}
	}
	with := func(s apitype.JwtSpec, f func(*apitype.JwtSpec)) apitype.JwtSpec { f(&s); return s }

	for _, tc := range []struct {
		name  string
		spec  apitype.JwtSpec
		field string // "" = valid
		msg   string
	}{
		{"secret", secretSpec("HS256", "HS384", "HS512"), "", ""},
		{"RSA PKIX", pub(rsaPEM, "RS256", "RS384", "RS512", "PS256", "PS384", "PS512"), "", ""},
		{"RSA PKCS1", pub(pkcs1, "RS256"), "", ""},
		{"RSA certificate", pub(pemCert(t, rsaKey()), "PS512"), "", ""},
		{"EC", pub(ecPEM, "ES256"), "", ""},
		{"EC P-384", pub(pemPublic(t, p384.Public()), "ES384"), "", ""},
		{"Ed25519", pub(pemPublic(t, edKey().Public()), "EdDSA"), "", ""},
		{"PEM after text", pub("the issuer's key:\n"+ecPEM, "ES256"), "", ""},
		{"jwks https", jwks("https://auth.example.com/.well-known/jwks.json", "RS256", "ES256", "EdDSA"), "", ""},
		{"jwks http 127.0.0.1", jwks("http://127.0.0.1:8080/jwks", "RS256"), "", ""},
		{"jwks http 127.1.2.3", jwks("http://127.1.2.3/jwks", "RS256"), "", ""},
		{"jwks http ::1", jwks("http://[::1]:9/jwks", "RS256"), "", ""},
		{"jwks http localhost", jwks("http://localhost/jwks", "RS256"), "", ""},
		{"full", with(secretSpec("HS256"), func(s *apitype.JwtSpec) {
			s.Audience, s.LeewaySecs, s.SubjectClaim = "a", intp(300), "userId"
			s.Require = map[string]json.RawMessage{"role": rawJSON(`["user","admin"]`), "n": rawJSON(`1.5`), "ok": rawJSON(`true`)}
		}), "", ""},

		{"no key source", apitype.JwtSpec{Algorithms: []string{"HS256"}, Issuer: "i"}, "jwt", "exactly one of secret, public_key and jwks_url"},
		{"two key sources", with(secretSpec("HS256"), func(s *apitype.JwtSpec) { s.JWKSURL = "https://x/jwks" }), "jwt", "exactly one"},
		{"secret without a name", with(secretSpec("HS256"), func(s *apitype.JwtSpec) { s.Secret = &apitype.SecretRef{} }), "jwt.secret.secret", "required"},
		{"no algorithms", secretSpec(), "jwt.algorithms", "required"},
		{"unknown algorithm", secretSpec("HS256", "HS999"), "jwt.algorithms[1]", `"HS999" is not a supported algorithm`},
		{"lowercase algorithm", secretSpec("hs256"), "jwt.algorithms[0]", "not a supported algorithm"},
		{"none", secretSpec("none"), "jwt.algorithms[0]", "never accepted"},
		{"NONE", pub(rsaPEM, "RS256", "NONE"), "jwt.algorithms[1]", "never accepted"},
		{"duplicate", secretSpec("HS256", "HS256"), "jwt.algorithms[1]", "listed twice"},
		{"public key with HS256", pub(rsaPEM, "HS256"), "jwt.algorithms[0]", "HS256 needs secret"},
		{"jwks with HS256", jwks("https://x/jwks", "RS256", "HS256"), "jwt.algorithms[1]", "HS256 needs secret"},
		{"secret with RS256", secretSpec("HS256", "RS256"), "jwt.algorithms[1]", "RS256 verifies with a public key"},
		{"RSA key with ES256", pub(rsaPEM, "RS256", "ES256"), "jwt.algorithms[1]", "ES256 needs an EC P-256 key; public_key is an RSA key (2048 bits)"},
		{"EC key with RS256", pub(ecPEM, "RS256"), "jwt.algorithms[0]", "RS256 needs an RSA key; public_key is an EC P-256 key"},
		{"P-256 key with ES384", pub(ecPEM, "ES384"), "jwt.algorithms[0]", "ES384 needs an EC P-384 key"},
		{"Ed25519 key with ES256", pub(pemPublic(t, edKey().Public()), "ES256"), "jwt.algorithms[0]", "public_key is an Ed25519 key"},
		{"RSA key with EdDSA", pub(rsaPEM, "EdDSA"), "jwt.algorithms[0]", "EdDSA needs an Ed25519 key"},
		{"not PEM", pub("ssh-rsa AAAAB3Nza...", "RS256"), "jwt.public_key", "not a PEM public key or certificate"},
		{"PEM of another kind", pub(string(pem.EncodeToMemory(&pem.Block{Type: "EC PARAMETERS", Bytes: []byte{6, 8}})), "ES256"), "jwt.public_key", "not a PEM public key or certificate"},
		{"private key", pub(privPEM, "ES256"), "jwt.public_key", "is a private key"},
		{"corrupt key", pub(string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: []byte("nope")})), "RS256"), "jwt.public_key", "does not parse"},
		{"RSA 1024", pub(pemPublic(t, small.Public()), "RS256"), "jwt.public_key", "RSA key of 1024 bits"},
		{"jwks http", jwks("http://auth.example.com/jwks", "RS256"), "jwt.jwks_url", "must be https (http only on loopback)"},
		{"jwks http 10/8", jwks("http://10.0.0.1/jwks", "RS256"), "jwt.jwks_url", "must be https"},
		{"jwks http localhost.evil", jwks("http://localhost.evil.com/jwks", "RS256"), "jwt.jwks_url", "must be https"},
		{"jwks ftp", jwks("ftp://127.0.0.1/jwks", "RS256"), "jwt.jwks_url", "must be https"},
		{"jwks relative", jwks("/jwks", "RS256"), "jwt.jwks_url", "absolute"},
		{"jwks no host", jwks("https:///jwks", "RS256"), "jwt.jwks_url", "absolute"},
		{"jwks credentials", jwks("https://u:p@x/jwks", "RS256"), "jwt.jwks_url", "credentials"},
		{"jwks not a URL", jwks("https://x/%zz", "RS256"), "jwt.jwks_url", "not a URL"},
		{"no issuer", with(secretSpec("HS256"), func(s *apitype.JwtSpec) { s.Issuer = "" }), "jwt.issuer", "required"},
		{"leeway 301", with(secretSpec("HS256"), func(s *apitype.JwtSpec) { s.LeewaySecs = intp(301) }), "jwt.leeway_secs", "must be in 0..300"},
		{"leeway -1", with(secretSpec("HS256"), func(s *apitype.JwtSpec) { s.LeewaySecs = intp(-1) }), "jwt.leeway_secs", "must be in 0..300"},
		{"subject claim spaced", with(secretSpec("HS256"), func(s *apitype.JwtSpec) { s.SubjectClaim = " sub" }), "jwt.subject_claim", "space"},
		{"require empty list", with(secretSpec("HS256"), func(s *apitype.JwtSpec) {
			s.Require = map[string]json.RawMessage{"role": rawJSON(`[]`)}
		}), "jwt.require.role", "empty list admits no token"},
		{"require object", with(secretSpec("HS256"), func(s *apitype.JwtSpec) {
			s.Require = map[string]json.RawMessage{"org": rawJSON(`{"id":1}`)}
		}), "jwt.require.org", "string, number or boolean"},
		{"require null", with(secretSpec("HS256"), func(s *apitype.JwtSpec) {
			s.Require = map[string]json.RawMessage{"org": rawJSON(`null`)}
		}), "jwt.require.org", "string, number or boolean"},
		{"require nested list", with(secretSpec("HS256"), func(s *apitype.JwtSpec) {
			s.Require = map[string]json.RawMessage{"role": rawJSON(`["a", ["b"]]`)}
		}), "jwt.require.role", "[1]: a value must be"},
		{"require no value", with(secretSpec("HS256"), func(s *apitype.JwtSpec) {
			s.Require = map[string]json.RawMessage{"role": nil}
		}), "jwt.require.role", "a value is required"},
		{"require bad JSON", with(secretSpec("HS256"), func(s *apitype.JwtSpec) {
			s.Require = map[string]json.RawMessage{"role": rawJSON(`"a" "b"`)}
		}), "jwt.require.role", "not JSON"},
		{"require empty claim", with(secretSpec("HS256"), func(s *apitype.JwtSpec) {
			s.Require = map[string]json.RawMessage{"": rawJSON(`"a"`)}
		}), "jwt.require", "claim name must not be empty"},
		{"require: first in key order", with(secretSpec("HS256"), func(s *apitype.JwtSpec) {
			s.Require = map[string]json.RawMessage{"b": rawJSON(`[]`), "a": rawJSON(`{}`), "c": rawJSON(`null`)}
		}), "jwt.require.a", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Check(tc.spec)
			if tc.field == "" {
				if err != nil {
					t.Fatalf("Check: %v", err)
				}
				return
			}
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("Check = %v (%T), want a *FieldError", err, err)
			}
			if fe.Field != tc.field || !strings.Contains(fe.Msg, tc.msg) {
				t.Fatalf("Check = %q: %q, want %q: …%s…", fe.Field, fe.Msg, tc.field, tc.msg)
			}
			if _, err := New(tc.spec, Options{Secret: staticSecret(hmacSecret)}); err == nil {
				t.Fatal("New compiled what Check refused")
			}
		})
	}
}

// TestCheckFixture: the spec of app-lb's deployment-status-jwt fixture.
func TestCheckFixture(t *testing.T) {
	var spec apitype.JwtSpec
	err := json.Unmarshal([]byte(`{
		"secret": {"secret": "heyo-auth", "key": "key", "namespace": "team-a"},
		"algorithms": ["HS256"], "issuer": "auth-service", "audience": "heyo-app",
		"subject_claim": "userId", "cookie": "heyo_access_token", "leeway_secs": 30,
		"require": {"role": ["user", "admin"], "accountId": "acct_7f3c"}
	}`), &spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := Check(spec); err != nil {
		t.Fatal(err)
	}
}
