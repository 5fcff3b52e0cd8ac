package oidc

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"
)

// Provider is a relying party at one discovered issuer: one [Config]. It
// is made by [Registry.Provider], cheap, and safe for concurrent use.
type Provider struct {
	cfg      Config
	issuer   string
	endpoint oauth2.Endpoint
	client   *http.Client
	// verifier checks everything go-oidc checks: signature, iss, aud, exp.
	verifier *oidc.IDTokenVerifier
	// signature checks the signature alone, so that a failure of verifier
	// can be told apart: a token that fails here is forged or corrupt, one
	// that passes here and fails there has a wrong claim.
	signature *oidc.IDTokenVerifier
}

// Issuer is the issuer p signs in with.
func (p *Provider) Issuer() string { return p.issuer }

// Scopes are the scopes berth asks for.
var Scopes = []string{oidc.ScopeOpenID, "email", "profile"}

// Flow is one sign-in's secrets, kept by the caller (in a signed, short-lived
// cookie) between [Provider.AuthCodeURL] and [Provider.Exchange]: the state
// the callback must echo, the nonce the ID token must carry, and the PKCE
// code verifier whose S256 challenge the authorization request carried.
// Each is 256 random bits, base64url without padding (43 characters).
type Flow struct {
	State, Nonce, Verifier string
}

// NewFlow draws a fresh Flow.
func NewFlow() Flow {
	return Flow{State: random(), Nonce: random(), Verifier: random()}
}

func random() string {
	var b [32]byte
	rand.Read(b[:]) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b[:])
}

func (p *Provider) oauth(redirectURL string) *oauth2.Config {
	return &oauth2.Config{
		ClientID:     p.cfg.ClientID,
		ClientSecret: p.cfg.ClientSecret,
		Endpoint:     p.endpoint,
		RedirectURL:  redirectURL,
		Scopes:       Scopes,
	}
}

// AuthCodeURL is where to send the browser to sign in: the issuer's
// authorization endpoint with response_type=code, scope "openid email
// profile", f's state and nonce, the S256 PKCE challenge of f's verifier,
// and redirectURL as redirect_uri (which [Provider.Exchange] must be given
// again). The google provider adds prompt=select_account.
func (p *Provider) AuthCodeURL(f Flow, redirectURL string) string {
	opts := []oauth2.AuthCodeOption{oidc.Nonce(f.Nonce), oauth2.S256ChallengeOption(f.Verifier)}
	if p.cfg.Google {
		opts = append(opts, oauth2.SetAuthURLParam("prompt", "select_account"))
	}
	return p.oauth(redirectURL).AuthCodeURL(f.State, opts...)
}

// Identity is who signed in, from a verified ID token.
type Identity struct {
	Issuer  string // the configured issuer
	Subject string // sub: the issuer's stable identifier of the account
	Email   string
	// EmailVerified is the email_verified claim (true, or the string
	// "true", which some issuers send); false when the claim is absent.
	EmailVerified bool
	Name          string
	// HostedDomain is Google's hd claim: the Workspace domain of the
	// account, absent for a consumer account.
	HostedDomain string
}

// Exchange completes a sign-in: it redeems code at the token endpoint with
// f's PKCE verifier and redirectURL (10 s at most), requires an id_token in
// the answer, verifies it with go-oidc (signature against the issuer's
// published keys, fetched again when the token names a key not yet seen;
// iss; aud containing the client ID; exp), requires that an azp, when
// present or when aud names several clients, is the client ID, that sub is
// not empty and that the nonce is f's (compared in constant time), and
// returns who signed in. The state is the caller's to check, before.
//
// Errors are [*Error]s whose [Reason] names the failed step.
func (p *Provider) Exchange(ctx context.Context, f Flow, code, redirectURL string) (Identity, error) {
	if f.Nonce == "" || f.Verifier == "" {
		return Identity{}, newError(ReasonFlow, nil, "the sign-in flow is incomplete (it has no nonce or no code verifier); start again")
	}
	if code == "" {
		return Identity{}, newError(ReasonFlow, nil, "the identity provider sent no authorization code")
	}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	ctx = oidc.ClientContext(ctx, p.client)
	secrets := []string{p.cfg.ClientSecret, code, f.Verifier}

	tok, err := p.oauth(redirectURL).Exchange(ctx, code, oauth2.VerifierOption(f.Verifier))
	if err != nil {
		return Identity{}, p.exchangeError(ctx, err, secrets)
	}
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		return Identity{}, newError(ReasonIDToken, nil, "the identity provider %s returned no ID token", p.issuer)
	}
	secrets = append(secrets, raw, tok.AccessToken, tok.RefreshToken)

	signed, err := p.signature.Verify(ctx, raw)
	if err != nil {
		if strings.Contains(err.Error(), "fetching keys") {
			return Identity{}, newError(ReasonKeys, redact(err, secrets...), "could not fetch the signing keys of the identity provider %s", p.issuer)
		}
		return Identity{}, newError(ReasonSignature, redact(err, secrets...), "the ID token is not signed by the identity provider %s", p.issuer)
	}
	tokn, err := p.verifier.Verify(ctx, raw)
	if err != nil {
		return Identity{}, p.claimError(err, signed, secrets)
	}
	var claims struct {
		AZP           string   `json:"azp"`
		Email         string   `json:"email"`
		EmailVerified flexBool `json:"email_verified"`
		Name          string   `json:"name"`
		HD            string   `json:"hd"`
	}
	if err := tokn.Claims(&claims); err != nil {
		return Identity{}, newError(ReasonIDToken, redact(err, secrets...), "the ID token's claims are unreadable")
	}
	if (claims.AZP != "" || len(tokn.Audience) > 1) && claims.AZP != p.cfg.ClientID {
		return Identity{}, newError(ReasonAudience, nil, "the ID token was issued to another application (azp %q)", claims.AZP)
	}
	if tokn.Subject == "" {
		return Identity{}, newError(ReasonIDToken, nil, "the ID token names no subject (sub)")
	}
	if subtle.ConstantTimeCompare([]byte(tokn.Nonce), []byte(f.Nonce)) != 1 {
		return Identity{}, newError(ReasonNonce, nil, "the ID token belongs to another sign-in (its nonce does not match); start again")
	}
	return Identity{
		Issuer:        p.issuer,
		Subject:       tokn.Subject,
		Email:         claims.Email,
		EmailVerified: bool(claims.EmailVerified),
		Name:          claims.Name,
		HostedDomain:  claims.HD,
	}, nil
}

// oauthErrorCode is the shape of an RFC 6749 error code, the one part of a
// token endpoint's refusal that is shown in the message.
var oauthErrorCode = regexp.MustCompile(`^[a-z_]{1,40}$`)

func (p *Provider) exchangeError(ctx context.Context, err error, secrets []string) *Error {
	var re *oauth2.RetrieveError
	if errors.As(err, &re) {
		code := re.ErrorCode
		if !oauthErrorCode.MatchString(code) {
			code = ""
		}
		// The cause is the status, the code and the description, never the
		// raw body (an issuer may echo what it was sent).
		status := ""
		if re.Response != nil {
			status = re.Response.Status
		}
		cause := errors.New(strings.TrimSpace(status + " " + code + " " + re.ErrorDescription))
		if code == "" {
			return newError(ReasonExchange, redact(cause, secrets...), "the identity provider %s refused to complete the sign-in", p.issuer)
		}
		return newError(ReasonExchange, redact(cause, secrets...), "the identity provider %s refused to complete the sign-in (%s)", p.issuer, code)
	}
	// oauth2 flattens the transport's error into text: the context says
	// whether time ran out or the caller gave up.
	if ctxErr := ctx.Err(); ctxErr != nil {
		cause := redact(fmt.Errorf("%v (%w)", err, ctxErr), secrets...)
		if errors.Is(ctxErr, context.DeadlineExceeded) {
			return newError(ReasonExchange, cause, "the identity provider %s did not answer in time", p.issuer)
		}
		return newError(ReasonExchange, cause, "the sign-in was abandoned while waiting for the identity provider %s", p.issuer)
	}
	if strings.Contains(err.Error(), "cannot fetch token") {
		return newError(ReasonExchange, redact(err, secrets...), "could not reach the identity provider %s", p.issuer)
	}
	return newError(ReasonExchange, redact(err, secrets...), "the identity provider %s answered the sign-in with something berth cannot use", p.issuer)
}

// claimError classifies a failure of the full verification of a token whose
// signature verified (signed): go-oidc checks iss, then aud, then exp/nbf.
func (p *Provider) claimError(err error, signed *oidc.IDToken, secrets []string) *Error {
	cause := redact(err, secrets...)
	var expired *oidc.TokenExpiredError
	switch {
	case errors.As(err, &expired):
		return newError(ReasonExpired, cause, "the ID token has expired; sign in again")
	case signed.Issuer != p.issuer && !(p.issuer == GoogleIssuer && signed.Issuer == "accounts.google.com"):
		return newError(ReasonIssuer, cause, "the ID token was issued by %q, not by the identity provider %s", signed.Issuer, p.issuer)
	case !slices.Contains(signed.Audience, p.cfg.ClientID):
		return newError(ReasonAudience, cause, "the ID token was issued to another application")
	case strings.Contains(err.Error(), "nbf"):
		return newError(ReasonExpired, cause, "the ID token is not valid yet (is a clock wrong?)")
	}
	return newError(ReasonIDToken, cause, "the ID token did not verify")
}

// flexBool decodes a JSON boolean or the strings "true"/"false".
type flexBool bool

func (b *flexBool) UnmarshalJSON(data []byte) error {
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	switch v := v.(type) {
	case bool:
		*b = flexBool(v)
	case string:
		*b = flexBool(strings.EqualFold(v, "true"))
	default:
		*b = false
	}
	return nil
}
