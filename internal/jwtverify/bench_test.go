package jwtverify

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/berth-dev/berth/apitype"
)

// BenchmarkVerify is one accepted token per op, keys held (the JWKS case
// has fetched once before the clock starts).
func BenchmarkVerify(b *testing.B) {
	now := func() time.Time { return t0 }
	withRequire := func(s apitype.JwtSpec) apitype.JwtSpec {
		s.Audience = "heyo-app"
		s.Require = map[string]json.RawMessage{"role": rawJSON(`["user","admin"]`)}
		return s
	}
	c := claims("aud", "heyo-app", "role", "admin")
	pub := func(key, alg string) apitype.JwtSpec {
		return apitype.JwtSpec{PublicKey: key, Algorithms: []string{alg}, Issuer: "auth-service"}
	}

	jwksSrv := newJWKSServer(b, jwk(rsaKey().Public(), "k1", "RS256"))
	for _, tc := range []struct {
		name  string
		spec  apitype.JwtSpec
		token string
	}{
		{"HS256", withRequire(secretSpec("HS256")), sign(b, jwt.SigningMethodHS256, hmacSecret, c)},
		{"RS256", withRequire(pub(pemPublic(b, rsaKey().Public()), "RS256")), sign(b, jwt.SigningMethodRS256, rsaKey(), c)},
		{"ES256", withRequire(pub(pemPublic(b, ecKey().Public()), "ES256")), sign(b, jwt.SigningMethodES256, ecKey(), c)},
		{"EdDSA", withRequire(pub(pemPublic(b, edKey().Public()), "EdDSA")), sign(b, jwt.SigningMethodEdDSA, edKey(), c)},
		{"RS256-JWKS", withRequire(jwksSpec(jwksSrv.URL, "RS256")), sign(b, jwt.SigningMethodRS256, rsaKey(), c, "kid", "k1")},
	} {
		b.Run(tc.name, func(b *testing.B) {
			v := newVerifier(b, tc.spec, Options{Secret: staticSecret(hmacSecret), Now: now})
			ctx := context.Background()
			if _, err := v.Verify(ctx, tc.token); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := v.Verify(ctx, tc.token); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRefuse is the cost of turning away a forged HS256 token.
func BenchmarkRefuse(b *testing.B) {
	v := newVerifier(b, secretSpec("HS256"), Options{Secret: staticSecret(hmacSecret), Now: func() time.Time { return t0 }})
	tok := sign(b, jwt.SigningMethodHS256, otherSecret, claims())
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := v.Verify(ctx, tok); err == nil {
			b.Fatal("admitted")
		}
	}
}
