package oidc

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// Reason says which step of a sign-in failed, for logs and metrics. Its
// values are stable.
type Reason string

// The reasons an [Error] carries.
const (
	// ReasonConfig: the configuration is invalid ([CheckConfig]), or the
	// issuer's discovered metadata cannot serve it (no PKCE S256, no client
	// authentication berth speaks, an endpoint that is not https).
	ReasonConfig Reason = "config"
	// ReasonDiscovery: the issuer's discovery document could not be fetched
	// or did not describe this issuer.
	ReasonDiscovery Reason = "discovery"
	// ReasonFlow: the [Flow] handed to Exchange lacks its nonce or verifier,
	// or no authorization code came back.
	ReasonFlow Reason = "flow"
	// ReasonExchange: the token endpoint refused the code (a wrong PKCE
	// verifier, a used or expired code, a wrong client secret) or could not
	// be reached.
	ReasonExchange Reason = "exchange"
	// ReasonIDToken: no id_token came back, or it lacks a subject or claims
	// berth can read.
	ReasonIDToken Reason = "id-token"
	// ReasonKeys: the issuer's signing keys (JWKS) could not be fetched.
	ReasonKeys Reason = "keys"
	// ReasonSignature: the id_token is not signed by any of the issuer's
	// published keys (or is not a signed JWT in an accepted algorithm).
	ReasonSignature Reason = "signature"
	// ReasonIssuer: the id_token names another issuer.
	ReasonIssuer Reason = "issuer"
	// ReasonAudience: the id_token was issued to another client.
	ReasonAudience Reason = "audience"
	// ReasonExpired: the id_token has expired (or is not valid yet).
	ReasonExpired Reason = "expired"
	// ReasonNonce: the id_token's nonce is not this flow's.
	ReasonNonce Reason = "nonce"
)

// Error is why a discovery or a sign-in failed. Its message is in words fit
// to show the person signing in, and never carries a secret, a code or a
// token; [Error.Detail] adds the cause for an operator's log, with the
// client secret, the code and the PKCE verifier redacted from it.
type Error struct {
	Reason  Reason
	Message string
	cause   error
}

func (e *Error) Error() string { return e.Message }

// Unwrap is the (redacted) cause. A context's cancellation or deadline
// stays in the chain, for errors.Is.
func (e *Error) Unwrap() error { return e.cause }

// Detail is the message and its cause, for logs.
func (e *Error) Detail() string {
	if e.cause == nil {
		return e.Message
	}
	return e.Message + ": " + e.cause.Error()
}

// ReasonOf is err's [Reason], or "" when err is not an [*Error].
func ReasonOf(err error) Reason {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return ""
}

// redacted is a cause whose text has had the given secrets taken out.
type redacted struct {
	text string
	ctx  error // context.Canceled or context.DeadlineExceeded, when the cause was one
}

func (r *redacted) Error() string { return r.text }
func (r *redacted) Unwrap() error { return r.ctx }

// redact turns cause into a [redacted] with every non-empty secret replaced,
// and its text bounded.
func redact(cause error, secrets ...string) error {
	if cause == nil {
		return nil
	}
	text := cause.Error()
	for _, s := range secrets {
		if s != "" {
			text = strings.ReplaceAll(text, s, "[redacted]")
		}
	}
	const max = 500
	if len(text) > max {
		text = text[:max] + "…"
	}
	r := &redacted{text: text}
	switch {
	case errors.Is(cause, context.Canceled):
		r.ctx = context.Canceled
	case errors.Is(cause, context.DeadlineExceeded):
		r.ctx = context.DeadlineExceeded
	}
	return r
}

func newError(reason Reason, cause error, format string, args ...any) *Error {
	return &Error{Reason: reason, Message: fmt.Sprintf(format, args...), cause: cause}
}
