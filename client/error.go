package client

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/berth-dev/berth/apitype"
)

// Error is a status outside 2xx from the admin API.
type Error struct {
	// Status is the HTTP status code.
	Status int
	// Message is the server's sentence from the {"error": …} envelope. When
	// the body is not an envelope (the plain-text 401, a proxy's error page)
	// it is the body's text, trimmed and shortened; when there is no body it
	// is the status text.
	Message string
	// Code is the envelope's machine-readable code ("plugin_disabled", …),
	// empty when the server sent none.
	Code string
}

// Error returns the server's message, which is written for people and is
// what a CLI should show.
func (e *Error) Error() string { return e.Message }

// maxTextMessage is how much of a non-JSON error body becomes the message.
const maxTextMessage = 512

// newError builds an *Error from a status and the (bounded) body.
func newError(status int, body []byte) *Error {
	var env apitype.Error
	if json.Unmarshal(body, &env) == nil && env.Message != "" {
		return &Error{Status: status, Message: env.Message, Code: env.Code}
	}
	msg := strings.Join(strings.Fields(string(body)), " ")
	if len(msg) > maxTextMessage {
		cut := maxTextMessage
		for cut > 0 && !utf8.RuneStart(msg[cut]) {
			cut--
		}
		msg = msg[:cut] + "…"
	}
	if msg == "" || !utf8.ValidString(msg) {
		msg = http.StatusText(status)
		if msg == "" {
			msg = "unexpected status"
		}
		msg = strings.ToLower(msg) + " (HTTP " + strconv.Itoa(status) + ")"
	}
	return &Error{Status: status, Message: msg}
}

// StatusCode returns the HTTP status of an [*Error] in err's chain, or 0
// when err did not come from the server (a network failure, a bad URL).
func StatusCode(err error) int {
	var e *Error
	if errors.As(err, &e) {
		return e.Status
	}
	return 0
}

// IsNotFound reports whether err is the server's 404, such as
// `no deployment "web"`.
func IsNotFound(err error) bool { return StatusCode(err) == http.StatusNotFound }

// IsConflict reports whether err is a 409: the request clashes with the
// deployment's state (a running job, a rollout reservation, no other healthy
// upstream to drain to).
func IsConflict(err error) bool { return StatusCode(err) == http.StatusConflict }

// IsPreconditionFailed reports whether err is a 412: [Client.Create] found
// the id taken, or [Client.Update]'s If-Match no longer matches.
func IsPreconditionFailed(err error) bool {
	return StatusCode(err) == http.StatusPreconditionFailed
}

// IsUnauthorized reports whether err is a 401: no credential, or one the
// server does not accept.
func IsUnauthorized(err error) bool { return StatusCode(err) == http.StatusUnauthorized }

// IsForbidden reports whether err is a 403: the credential is valid but its
// scope does not reach the route or deployment.
func IsForbidden(err error) bool { return StatusCode(err) == http.StatusForbidden }
