package oidctest_test

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/berth-dev/berth/internal/oidc/oidctest"
)

var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

func authorize(t *testing.T, op *oidctest.Provider, q url.Values) *http.Response {
	t.Helper()
	resp, err := noRedirect.Get(op.Issuer() + "/authorize?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

func params(op *oidctest.Provider, verifier string) url.Values {
	sum := sha256.Sum256([]byte(verifier))
	return url.Values{
		"client_id": {op.ClientID()}, "response_type": {"code"}, "scope": {"openid email"},
		"redirect_uri": {"http://127.0.0.1/cb"}, "state": {"s"}, "nonce": {"n"},
		"code_challenge": {base64.RawURLEncoding.EncodeToString(sum[:])}, "code_challenge_method": {"S256"},
	}
}

func token(t *testing.T, op *oidctest.Provider, form url.Values) (int, map[string]any) {
	t.Helper()
	resp, err := http.PostForm(op.Issuer()+"/token", form)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body map[string]any
	json.NewDecoder(resp.Body).Decode(&body)
	return resp.StatusCode, body
}

func TestAuthorizeRequiresPKCEAndNonce(t *testing.T) {
	op := oidctest.Start(t)
	for _, drop := range []string{"code_challenge", "code_challenge_method", "nonce"} {
		q := params(op, "v")
		q.Del(drop)
		if resp := authorize(t, op, q); resp.StatusCode != http.StatusBadRequest {
			t.Errorf("without %s: %s, want 400", drop, resp.Status)
		}
	}
	q := params(op, "v")
	q.Set("code_challenge_method", "plain")
	if resp := authorize(t, op, q); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("plain PKCE: %s, want 400", resp.Status)
	}
}

func TestTokenVerifiesPKCEInForm(t *testing.T) {
	op := oidctest.Start(t)
	verifier := strings.Repeat("v", 43)
	for _, c := range []struct {
		verifier string
		ok       bool
	}{{"", false}, {strings.Repeat("w", 43), false}, {verifier, true}} {
		resp := authorize(t, op, params(op, verifier))
		loc, _ := url.Parse(resp.Header.Get("Location"))
		form := url.Values{
			"grant_type": {"authorization_code"}, "code": {loc.Query().Get("code")},
			"redirect_uri": {"http://127.0.0.1/cb"}, "client_id": {op.ClientID()}, "client_secret": {op.ClientSecret()},
		}
		if c.verifier != "" {
			form.Set("code_verifier", c.verifier)
		}
		status, body := token(t, op, form)
		if got := status == http.StatusOK && body["id_token"] != nil; got != c.ok {
			t.Errorf("verifier %q: %d %v, want ok=%v", c.verifier, status, body, c.ok)
		}
	}
}

func TestKeySet(t *testing.T) {
	op := oidctest.Start(t)
	kids := func() []string {
		resp, err := http.Get(op.Issuer() + "/.well-known/jwks.json")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var set struct{ Keys []struct{ Kid string } }
		if err := json.NewDecoder(resp.Body).Decode(&set); err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, k := range set.Keys {
			ids = append(ids, k.Kid)
		}
		return ids
	}
	first := op.KeyIDs()
	if got := kids(); !slices.Equal(got, first) || len(got) != 1 {
		t.Fatalf("published %v, want %v", got, first)
	}
	kept := op.RotateKey(true)
	if got := kids(); !slices.Equal(got, []string{kept, first[0]}) {
		t.Errorf("after keeping rotation: %v", got)
	}
	withdrawn := op.RotateKey(false)
	if got := kids(); !slices.Equal(got, []string{withdrawn}) {
		t.Errorf("after withdrawing rotation: %v", got)
	}
	if op.JWKSHits() != 3 {
		t.Errorf("%d JWKS hits", op.JWKSHits())
	}
}
