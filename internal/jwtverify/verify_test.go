package jwtverify

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/berth-dev/berth/apitype"
)

func TestVerifyHMACMatrix(t *testing.T) {
	clock := newClock()
	v := newVerifier(t, secretSpec("HS256"), Options{Secret: staticSecret(hmacSecret), Now: clock.Now})
	hs := func(c jwt.MapClaims) string { return sign(t, jwt.SigningMethodHS256, hmacSecret, c) }
	unsigned := sign(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, claims())
	stripped := hs(claims())
	stripped = stripped[:strings.LastIndex(stripped, ".")+1]

	for _, tc := range []struct {
		name  string
		token string
		want  Reason
	}{
		{"valid", hs(claims()), ""},
		{"kid is ignored for a secret", sign(t, jwt.SigningMethodHS256, hmacSecret, claims(), "kid", "whatever"), ""},
		{"HS384 when only HS256 is allowed", sign(t, jwt.SigningMethodHS384, hmacSecret, claims()), ReasonAlgorithm},
		{"alg none", unsigned, ReasonAlgorithm},
		{"HS256 with the signature stripped", stripped, ReasonSignature},
		{"unknown alg", fakeHeader(t, `{"alg":"HS999"}`, hs(claims())), ReasonAlgorithm},
		{"no alg", fakeHeader(t, `{"typ":"JWT"}`, hs(claims())), ReasonAlgorithm},
		{"other secret", sign(t, jwt.SigningMethodHS256, otherSecret, claims()), ReasonSignature},
		{"expired", hs(claims("exp", t0.Add(-time.Second).Unix())), ReasonExpired},
		{"expired now", hs(claims("exp", t0.Unix())), ReasonExpired},
		{"no exp", hs(claims("exp", nil)), ReasonExpired},
		{"exp a string", hs(claims("exp", "tomorrow")), ReasonMalformed},
		{"not yet valid", hs(claims("nbf", t0.Add(time.Second).Unix())), ReasonNotYetValid},
		{"nbf passed", hs(claims("nbf", t0.Add(-time.Second).Unix())), ""},
		{"wrong iss", hs(claims("iss", "evil-service")), ReasonIssuer},
		{"no iss", hs(claims("iss", nil)), ReasonIssuer},
		{"no iss and no exp", hs(claims("iss", nil, "exp", nil)), ReasonExpired},
		{"aud not configured: any aud passes", hs(claims("aud", "whoever")), ""},
		{"no sub", hs(claims("sub", nil)), ReasonSubject},
		{"sub empty", hs(claims("sub", "")), ReasonSubject},
		{"sub a number", hs(claims("sub", 42)), ReasonSubject},
		{"sub an array", hs(claims("sub", []string{"a"})), ReasonSubject},
		{"sub with a newline", hs(claims("sub", "user-1\r\nx-admin: yes")), ReasonSubject},
		{"crit header", sign(t, jwt.SigningMethodHS256, hmacSecret, claims(), "crit", "exp"), ReasonMalformed},
		{"kid not a string", fakeHeader(t, `{"alg":"HS256","kid":7}`, hs(claims())), ReasonMalformed},
		{"empty", "", ReasonMalformed},
		{"one segment", "abc", ReasonMalformed},
		{"four segments", hs(claims()) + ".x", ReasonMalformed},
		{"garbage segments", "a.b.c", ReasonMalformed},
		{"padded base64", strings.Replace(hs(claims()), ".", "=.", 1), ReasonMalformed},
		{"too long", hs(claims("pad", strings.Repeat("x", maxTokenLen))), ReasonMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := v.Verify(context.Background(), tc.token)
			t.Log(err)
			if got := reasonOf(t, err); got != tc.want {
				t.Fatalf("reason %q (%v), want %q", got, err, tc.want)
			}
			if tc.want == "" && (c == nil || c.Subject != "user-1") {
				t.Fatalf("claims %+v", c)
			}
		})
	}
}

// fakeHeader replaces tok's header with header, keeping claims and
// signature (which then no longer match, if it comes to that).
func fakeHeader(t *testing.T, header, tok string) string {
	t.Helper()
	_, rest, _ := strings.Cut(tok, ".")
	return base64.RawURLEncoding.EncodeToString([]byte(header)) + "." + rest
}

func TestVerifyIdentity(t *testing.T) {
	clock := newClock()
	v := newVerifier(t, secretSpec("HS256"), Options{Secret: staticSecret(hmacSecret), Now: clock.Now})
	c, err := v.Verify(context.Background(), sign(t, jwt.SigningMethodHS256, hmacSecret, claims("level", 3)))
	if err != nil {
		t.Fatal(err)
	}
	if c.Subject != "user-1" || c.Email != "ada@example.com" || c.Name != "Ada" {
		t.Errorf("identity %q %q %q", c.Subject, c.Email, c.Name)
	}
	if got := c.All["level"]; got != json.Number("3") {
		t.Errorf("All[level] = %#v, want json.Number 3", got)
	}
	// Email and name that are not printable strings are dropped, not refused.
	c, err = v.Verify(context.Background(), sign(t, jwt.SigningMethodHS256, hmacSecret, claims("email", 7, "name", "a\nb")))
	if err != nil {
		t.Fatal(err)
	}
	if c.Email != "" || c.Name != "" {
		t.Errorf("email %q name %q, want both empty", c.Email, c.Name)
	}

	spec := secretSpec("HS256")
	spec.SubjectClaim, spec.EmailClaim, spec.NameClaim = "userId", "mail", "display"
	v = newVerifier(t, spec, Options{Secret: staticSecret(hmacSecret), Now: clock.Now})
	c, err = v.Verify(context.Background(), sign(t, jwt.SigningMethodHS256, hmacSecret,
		claims("userId", "u-42", "mail", "grace@example.com", "display", "Grace")))
	if err != nil {
		t.Fatal(err)
	}
	if c.Subject != "u-42" || c.Email != "grace@example.com" || c.Name != "Grace" {
		t.Errorf("custom identity %q %q %q", c.Subject, c.Email, c.Name)
	}
	// sub is now an ordinary claim: a token with only sub has no user.
	_, err = v.Verify(context.Background(), sign(t, jwt.SigningMethodHS256, hmacSecret, claims()))
	if got := reasonOf(t, err); got != ReasonSubject {
		t.Errorf("token without userId: %q (%v), want subject", got, err)
	}
}

func TestVerifyLeewayAndAudience(t *testing.T) {
	clock := newClock()
	spec := secretSpec("HS256", "HS512")
	spec.LeewaySecs = intp(30)
	spec.Audience = "heyo-app"
	v := newVerifier(t, spec, Options{Secret: staticSecret(hmacSecret), Now: clock.Now})
	hs := func(c jwt.MapClaims) string { return sign(t, jwt.SigningMethodHS256, hmacSecret, c) }
	for _, tc := range []struct {
		name  string
		token string
		want  Reason
	}{
		{"aud string", hs(claims("aud", "heyo-app")), ""},
		{"HS512 listed too", sign(t, jwt.SigningMethodHS512, hmacSecret, claims("aud", "heyo-app")), ""},
		{"aud array containing it", hs(claims("aud", []string{"other", "heyo-app"})), ""},
		{"wrong aud", hs(claims("aud", "other-app")), ReasonAudience},
		{"aud array without it", hs(claims("aud", []string{"a", "b"})), ReasonAudience},
		{"no aud", hs(claims("aud", nil)), ReasonAudience},
		{"aud a number", hs(claims("aud", 5)), ReasonMalformed},
		{"expired within leeway", hs(claims("aud", "heyo-app", "exp", t0.Add(-10*time.Second).Unix())), ""},
		{"expired beyond leeway", hs(claims("aud", "heyo-app", "exp", t0.Add(-31*time.Second).Unix())), ReasonExpired},
		{"nbf within leeway", hs(claims("aud", "heyo-app", "nbf", t0.Add(20*time.Second).Unix())), ""},
		{"nbf beyond leeway", hs(claims("aud", "heyo-app", "nbf", t0.Add(40*time.Second).Unix())), ReasonNotYetValid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := v.Verify(context.Background(), tc.token)
			if got := reasonOf(t, err); got != tc.want {
				t.Fatalf("reason %q (%v), want %q", got, err, tc.want)
			}
		})
	}

	// The clock moves: a token valid at t0 expires an hour (and 30 s) later.
	tok := hs(claims("aud", "heyo-app"))
	clock.Add(time.Hour + 29*time.Second)
	if _, err := v.Verify(context.Background(), tok); err != nil {
		t.Fatalf("within leeway after an hour: %v", err)
	}
	clock.Add(time.Second)
	if _, err := v.Verify(context.Background(), tok); reasonOf(t, err) != ReasonExpired {
		t.Fatalf("after an hour and 30 s: %v, want expired", err)
	}
}

func TestVerifyRequire(t *testing.T) {
	clock := newClock()
	spec := secretSpec("HS256")
	spec.Require = map[string]json.RawMessage{
		"role":      rawJSON(`["user", "admin"]`),
		"accountId": rawJSON(`"acct_7f3c"`),
		"level":     rawJSON(`1`),
		"verified":  rawJSON(`true`),
	}
	v := newVerifier(t, spec, Options{Secret: staticSecret(hmacSecret), Now: clock.Now})
	ok := []any{"role", "admin", "accountId", "acct_7f3c", "level", 1, "verified", true}
	with := func(kv ...any) string {
		c := claims(ok...)
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i+1] == nil {
				delete(c, kv[i].(string))
			} else {
				c[kv[i].(string)] = kv[i+1]
			}
		}
		return sign(t, jwt.SigningMethodHS256, hmacSecret, c)
	}
	for _, tc := range []struct {
		name  string
		token string
		want  Reason
	}{
		{"all hold", with(), ""},
		{"OR within a claim: the other role", with("role", "user"), ""},
		{"role not listed", with("role", "guest"), ReasonRequire},
		{"array claim containing one", with("role", []string{"guest", "user"}), ""},
		{"array claim containing none", with("role", []string{"guest", "owner"}), ReasonRequire},
		{"empty array claim", with("role", []string{}), ReasonRequire},
		{"AND across claims: account wrong", with("accountId", "acct_other"), ReasonRequire},
		{"missing claim", with("accountId", nil), ReasonRequire},
		{"number 1.0 equals 1", with("level", 1.0), ""},
		{"number written 1e0", fakeClaim(t, with(), `"level":1`, `"level":1e0`), ""},
		{"number 2", with("level", 2), ReasonRequire},
		{"string \"1\" is not 1", with("level", "1"), ReasonRequire},
		{"number array containing 1", with("level", []any{0, 1}), ""},
		{"bool true", with("verified", true), ""},
		{"bool false", with("verified", false), ReasonRequire},
		{"string \"true\" is not true", with("verified", "true"), ReasonRequire},
		{"null is not true", with("verified", jsonNull{}), ReasonRequire},
		{"object claim", with("role", map[string]any{"user": true}), ReasonRequire},
		{"subject missing wins over require", with("sub", nil, "role", "guest"), ReasonSubject},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := v.Verify(context.Background(), tc.token)
			if got := reasonOf(t, err); got != tc.want {
				t.Fatalf("reason %q (%v), want %q", got, err, tc.want)
			}
		})
	}
}

// jsonNull marshals as null (a nil in the claims map deletes the claim).
type jsonNull struct{}

func (jsonNull) MarshalJSON() ([]byte, error) { return []byte("null"), nil }

// fakeClaim re-signs tok with its claims' JSON edited: old replaced by new.
func fakeClaim(t *testing.T, tok, old, new string) string {
	t.Helper()
	p := jwt.NewParser()
	parts := strings.Split(tok, ".")
	body, err := p.DecodeSegment(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(string(body), old, new, 1)
	if edited == string(body) {
		t.Fatalf("%s not in %s", old, body)
	}
	input := parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(edited))
	sig, err := jwt.SigningMethodHS256.Sign(input, hmacSecret)
	if err != nil {
		t.Fatal(err)
	}
	return input + "." + base64.RawURLEncoding.EncodeToString(sig)
}

func TestVerifyPublicKeys(t *testing.T) {
	clock := newClock()
	for _, tc := range []struct {
		name   string
		alg    string
		method jwt.SigningMethod
		pem    string
		key    any // signs
		wrong  any // signs too, but is not the key
	}{
		{"RS256 PKIX", "RS256", jwt.SigningMethodRS256, pemPublic(t, rsaKey().Public()), rsaKey(), rsaKey2()},
		{"PS256 PKIX", "PS256", jwt.SigningMethodPS256, pemPublic(t, rsaKey().Public()), rsaKey(), rsaKey2()},
		{"RS512 certificate", "RS512", jwt.SigningMethodRS512, pemCert(t, rsaKey()), rsaKey(), rsaKey2()},
		{"ES256 PKIX", "ES256", jwt.SigningMethodES256, pemPublic(t, ecKey().Public()), ecKey(), ecKey2()},
		{"ES256 certificate", "ES256", jwt.SigningMethodES256, pemCert(t, ecKey()), ecKey(), ecKey2()},
		{"EdDSA PKIX", "EdDSA", jwt.SigningMethodEdDSA, pemPublic(t, edKey().Public()), edKey(), edKey2()},
		{"EdDSA certificate", "EdDSA", jwt.SigningMethodEdDSA, pemCert(t, edKey()), edKey(), edKey2()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := apitype.JwtSpec{PublicKey: tc.pem, Algorithms: []string{tc.alg}, Issuer: "auth-service"}
			v := newVerifier(t, spec, Options{Now: clock.Now})
			c, err := v.Verify(context.Background(), sign(t, tc.method, tc.key, claims()))
			if err != nil || c.Subject != "user-1" {
				t.Fatalf("Verify: %+v, %v", c, err)
			}
			_, err = v.Verify(context.Background(), sign(t, tc.method, tc.wrong, claims()))
			if got := reasonOf(t, err); got != ReasonSignature {
				t.Errorf("signed by another key: %q (%v), want signature", got, err)
			}
			_, err = v.Verify(context.Background(), sign(t, tc.method, tc.key, claims("exp", t0.Add(-time.Hour).Unix())))
			if got := reasonOf(t, err); got != ReasonExpired {
				t.Errorf("expired: %q (%v)", got, err)
			}
		})
	}
}

// TestKeyConfusion: a token signed with HMAC, keyed by the RSA public key's
// own PEM text, must not verify against that public key.
func TestKeyConfusion(t *testing.T) {
	clock := newClock()
	pub := pemPublic(t, rsaKey().Public())
	v := newVerifier(t, apitype.JwtSpec{PublicKey: pub, Algorithms: []string{"RS256"}, Issuer: "auth-service"}, Options{Now: clock.Now})
	for _, m := range []jwt.SigningMethod{jwt.SigningMethodHS256, jwt.SigningMethodHS512} {
		forged := sign(t, m, []byte(pub), claims())
		_, err := v.Verify(context.Background(), forged)
		if got := reasonOf(t, err); got != ReasonAlgorithm {
			t.Errorf("%s over the PEM: %q (%v), want algorithm", m.Alg(), got, err)
		}
		// Passing the HS token off as RS256 makes it an RSA signature
		// that does not verify.
		relabelled := fakeHeader(t, `{"alg":"RS256","typ":"JWT"}`, forged)
		if _, err := v.Verify(context.Background(), relabelled); reasonOf(t, err) != ReasonSignature {
			t.Errorf("%s relabelled RS256: %v, want signature", m.Alg(), err)
		}
	}
	// And the spec that would make it possible does not compile.
	if _, err := New(apitype.JwtSpec{PublicKey: pub, Algorithms: []string{"RS256", "HS256"}, Issuer: "i"}, Options{}); err == nil {
		t.Error("public_key with HS256 compiled")
	}
}

func TestSecretSource(t *testing.T) {
	clock := newClock()
	var calls atomic.Int32
	var gotRef apitype.SecretRef
	secret := hmacSecret
	fail := error(nil)
	v := newVerifier(t, secretSpec("HS256"), Options{Now: clock.Now, Secret: func(_ context.Context, ref apitype.SecretRef) ([]byte, error) {
		calls.Add(1)
		gotRef = ref
		return secret, fail
	}})
	if calls.Load() != 0 {
		t.Fatal("New resolved the secret")
	}
	tok := sign(t, jwt.SigningMethodHS256, hmacSecret, claims())
	for range 3 {
		if _, err := v.Verify(context.Background(), tok); err != nil {
			t.Fatal(err)
		}
	}
	if calls.Load() != 1 {
		t.Errorf("resolved %d times for 3 tokens, want once", calls.Load())
	}
	if gotRef != *secretSpec().Secret {
		t.Errorf("resolved %+v", gotRef)
	}

	// A rotated secret arrives with the background refresh.
	tick := make(chan time.Time)
	v2 := newVerifier(t, secretSpec("HS256"), Options{Now: clock.Now, Secret: func(context.Context, apitype.SecretRef) ([]byte, error) {
		return secret, fail
	}})
	v2.src.tick = tick
	if err := v2.Prefetch(context.Background()); err != nil {
		t.Fatal(err)
	}
	secret = otherSecret
	refreshNow(t, v2.src, tick)
	if _, err := v2.Verify(context.Background(), sign(t, jwt.SigningMethodHS256, otherSecret, claims())); err != nil {
		t.Errorf("after rotation: %v", err)
	}
	if _, err := v2.Verify(context.Background(), tok); reasonOf(t, err) != ReasonSignature {
		t.Errorf("old secret after rotation: %v, want signature", err)
	}
	// A failed resolve keeps the last key.
	fail = errors.New("store down")
	refreshNow(t, v2.src, tick)
	if _, err := v2.Verify(context.Background(), sign(t, jwt.SigningMethodHS256, otherSecret, claims())); err != nil {
		t.Errorf("after a failed refresh: %v", err)
	}
}

func TestSecretUnavailable(t *testing.T) {
	clock := newClock()
	tok := sign(t, jwt.SigningMethodHS256, hmacSecret, claims())
	for _, tc := range []struct {
		name   string
		secret []byte
		err    error
		msg    string
	}{
		{"resolve fails", nil, errors.New("no secret heyo-auth"), "no secret heyo-auth"},
		{"too short", []byte("short"), nil, "at least 32"},
		{"empty", []byte{}, nil, "at least 32"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var heard []error
			v := newVerifier(t, secretSpec("HS256"), Options{Now: clock.Now, FetchError: func(err error) { heard = append(heard, err) },
				Secret: func(context.Context, apitype.SecretRef) ([]byte, error) { return tc.secret, tc.err }})
			_, err := v.Verify(context.Background(), tok)
			if got := reasonOf(t, err); got != ReasonNoKey || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("%q %v, want no-key mentioning %q", got, err, tc.msg)
			}
			if len(heard) != 1 {
				t.Errorf("FetchError heard %d errors, want 1", len(heard))
			}
		})
	}
	if _, err := New(secretSpec("HS256"), Options{}); err == nil {
		t.Error("New with a secret and no SecretFunc succeeded")
	}
}

// TestClaimsOrder: with several problems, the reason is the first of exp,
// nbf, iss, aud; the signature comes before all of them.
func TestClaimsOrder(t *testing.T) {
	clock := newClock()
	spec := secretSpec("HS256")
	spec.Audience = "heyo-app"
	v := newVerifier(t, spec, Options{Secret: staticSecret(hmacSecret), Now: clock.Now})
	bad := claims("exp", t0.Add(-time.Hour).Unix(), "nbf", t0.Add(time.Hour).Unix(), "iss", "x", "aud", "y")
	for _, tc := range []struct {
		token string
		want  Reason
	}{
		{sign(t, jwt.SigningMethodHS256, otherSecret, bad), ReasonSignature},
		{sign(t, jwt.SigningMethodHS256, hmacSecret, bad), ReasonExpired},
		{sign(t, jwt.SigningMethodHS256, hmacSecret, claims("nbf", t0.Add(time.Hour).Unix(), "iss", "x", "aud", "y")), ReasonNotYetValid},
		{sign(t, jwt.SigningMethodHS256, hmacSecret, claims("iss", "x", "aud", "y")), ReasonIssuer},
		{sign(t, jwt.SigningMethodHS256, hmacSecret, claims("aud", "y")), ReasonAudience},
	} {
		_, err := v.Verify(context.Background(), tc.token)
		if got := reasonOf(t, err); got != tc.want {
			t.Errorf("reason %q (%v), want %q", got, err, tc.want)
		}
	}
}

func TestErrorMessagesQuoteShortly(t *testing.T) {
	clock := newClock()
	v := newVerifier(t, secretSpec("HS256"), Options{Secret: staticSecret(hmacSecret), Now: clock.Now})
	_, err := v.Verify(context.Background(), sign(t, jwt.SigningMethodHS256, hmacSecret, claims("iss", strings.Repeat("é", 200))))
	if reasonOf(t, err) != ReasonIssuer {
		t.Fatal(err)
	}
	if msg := err.Error(); len(msg) > 200 || !strings.Contains(msg, "…") {
		t.Errorf("message not shortened: %d bytes: %s", len(msg), msg)
	}
}
