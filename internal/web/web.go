// Package web is the admin API's HTTP plumbing: handlers that return errors,
// the JSON error envelope, strict JSON decoding with size and content-type
// checks, and panic recovery.
//
// Every error a client sees is the app-lb envelope {"error": "...", "code"?:
// "..."}, with a message that names the offending field where there is one.
package web

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"reflect"
	"runtime/debug"
	"strings"
)

// MaxBody is the default limit on request bodies (app-lb: 2 MiB).
const MaxBody = 2 << 20

// Error is an error with an HTTP status and a message safe to show.
type Error struct {
	Status  int
	Code    string // optional machine-readable code
	Message string
	// Err is the internal cause. It is logged; for a 5xx it is also sent
	// after Message to callers whose context ShowCauses marks (see
	// WriteError).
	Err    error
	Header http.Header
}

func (e *Error) Error() string {
	if e.Err != nil {
		return e.Message + ": " + e.Err.Error()
	}
	return e.Message
}

func (e *Error) Unwrap() error { return e.Err }

// Errorf returns an *Error with the given status and formatted message.
func Errorf(status int, format string, args ...any) *Error {
	return &Error{Status: status, Message: fmt.Sprintf(format, args...)}
}

// envelope is the wire shape of an error (apitype.Error; kept local so this
// package stays a leaf).
type envelope struct {
	Error string `json:"error"`
	Code  string `json:"code,omitempty"`
}

// HandlerFunc is an HTTP handler that may fail.
type HandlerFunc func(w http.ResponseWriter, r *http.Request) error

// Handle adapts h to http.Handler, writing returned errors as the envelope
// (WriteError). Errors that are not *Error become a 500.
func Handle(log *slog.Logger, h HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := h(w, r); err != nil {
			WriteError(log, w, r, err)
		}
	})
}

type causesKey struct{}

// ShowCauses returns ctx marked as a caller that may read the causes of
// server errors: the operator and callers not confined to a namespace,
// for whom a cause names nothing they could not see anyway.
func ShowCauses(ctx context.Context) context.Context {
	return context.WithValue(ctx, causesKey{}, true)
}

func causesShown(ctx context.Context) bool {
	v, _ := ctx.Value(causesKey{}).(bool)
	return v
}

// WriteError writes err as the JSON envelope. A server error (5xx) with a
// cause (an error that is not *Error, or an *Error's Err) is logged with a
// reference, and the cause is never hidden from whoever can fix it: a
// caller marked by ShowCauses reads it after the message ("…: cause"); any
// other caller (a namespace's, a grant's) gets the reference to the log
// line instead, since a cause may name what lies beyond its walls.
func WriteError(log *slog.Logger, w http.ResponseWriter, r *http.Request, err error) {
	var e *Error
	cause := err
	if !errors.As(err, &e) {
		e = &Error{Status: http.StatusInternalServerError, Message: "internal error"}
	} else {
		cause = e.Err
	}
	msg := e.Message
	if e.Status >= 500 && cause != nil {
		ref := errorRef()
		log.Error("request failed", "method", r.Method, "path", r.URL.Path, "status", e.Status, "ref", ref, "err", cause)
		if causesShown(r.Context()) {
			msg += ": " + cause.Error()
		} else {
			msg += " (the cause is in the server's log, ref " + ref + ")"
		}
	}
	for k, vs := range e.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	WriteJSON(w, e.Status, envelope{Error: msg, Code: e.Code})
}

// errorRef names one logged server error.
func errorRef() string {
	var b [6]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// WriteJSON writes v as JSON with the given status.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		buf.Reset()
		status = http.StatusInternalServerError
		fmt.Fprintf(&buf, `{"error":"could not encode the response"}`+"\n")
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(buf.Bytes())
}

// ReadJSON reads a JSON request body into v. It requires an application/json
// content type (415), caps the body at MaxBody (413) and its shape
// (CheckJSONShape: 400), and reports malformed
// JSON (400) and values of the wrong type (422) with the offending field.
// Unknown fields are allowed: the contract carries them through.
func ReadJSON(w http.ResponseWriter, r *http.Request, v any) error {
	raw, err := ReadBody(w, r)
	if err != nil {
		return err
	}
	return DecodeJSON(raw, v)
}

// ReadClosedJSON is ReadJSON for a closed body: a key v's type does not
// declare — a typo, or a field of a newer contract — is refused (400,
// naming it) rather than dropped. unknown finds such a key in raw, "" for
// none (apitype.UnknownKey, which knows the wire types' open maps).
func ReadClosedJSON(w http.ResponseWriter, r *http.Request, v any, unknown func(raw []byte, t reflect.Type) string) error {
	raw, err := ReadBody(w, r)
	if err != nil {
		return err
	}
	return DecodeClosedJSON(raw, v, unknown)
}

// DecodeClosedJSON is ReadClosedJSON's decoding of raw.
func DecodeClosedJSON(raw []byte, v any, unknown func(raw []byte, t reflect.Type) string) error {
	if p := unknown(raw, reflect.TypeOf(v).Elem()); p != "" {
		return Invalid(p, "unknown field")
	}
	return DecodeJSON(raw, v)
}

// ReadBody returns the raw JSON body after the content-type, size and shape
// (CheckJSONShape) checks.
func ReadBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	ct := r.Header.Get("Content-Type")
	mt, _, err := mime.ParseMediaType(ct)
	if ct == "" || err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
		return nil, Errorf(http.StatusUnsupportedMediaType, "Content-Type must be application/json, got %q", ct)
	}
	body := http.MaxBytesReader(w, r.Body, MaxBody)
	raw, err := io.ReadAll(body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, Errorf(http.StatusRequestEntityTooLarge, "request body exceeds %d bytes", mbe.Limit)
		}
		return nil, Errorf(http.StatusBadRequest, "could not read the request body: %v", err)
	}
	if err := CheckJSONShape(raw); err != nil {
		return nil, err
	}
	return raw, nil
}

// DecodeJSON decodes raw into v with the same error mapping as ReadJSON.
func DecodeJSON(raw []byte, v any) error {
	if len(bytes.TrimSpace(raw)) == 0 {
		return Errorf(http.StatusBadRequest, "the request body is empty; expected JSON")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if dec.More() {
		return Errorf(http.StatusBadRequest, "malformed JSON: unexpected data after the top-level value")
	}
	var extra json.RawMessage
	if err := dec.Decode(&extra); err != io.EOF {
		return Errorf(http.StatusBadRequest, "malformed JSON: unexpected data after the top-level value")
	}
	return nil
}

func jsonError(err error) error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	var fe *FieldError
	switch {
	case errors.As(err, &fe):
		return &Error{Status: http.StatusBadRequest, Message: fe.Error()}
	case errors.As(err, &se):
		return Errorf(http.StatusBadRequest, "malformed JSON at byte %d: %v", se.Offset, se)
	case errors.As(err, &te):
		field := te.Field
		if field == "" {
			field = "the body"
		}
		return Errorf(http.StatusUnprocessableEntity, "%s: expected %s, got JSON %s", field, te.Type, te.Value)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return Errorf(http.StatusBadRequest, "malformed JSON: unexpected end of input")
	default:
		return Errorf(http.StatusBadRequest, "malformed JSON: %v", err)
	}
}

// FieldError is a validation failure of one field. Its message starts with the
// field path, e.g. "scaling.min_replicas: must not exceed max_replicas".
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

// Invalid returns a 400 *Error for a field.
func Invalid(field, format string, args ...any) *Error {
	fe := &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
	return &Error{Status: http.StatusBadRequest, Message: fe.Error(), Err: fe}
}

// Recover turns a panic in next into a logged 500 envelope, so no panic
// reaches a client as a dropped connection. http.ErrAbortHandler is re-raised:
// it is how a handler deliberately aborts a response.
func Recover(log *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				log.Error("panic serving request", "method", r.Method, "path", r.URL.Path, "panic", v, "stack", string(debug.Stack()))
				WriteJSON(w, http.StatusInternalServerError, envelope{Error: "internal error"})
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// BoolParam parses a strictly true/false query parameter; absent is false.
// Anything else (app-lb refuses ?force=1 on the admin API) is a 400 naming
// the parameter.
func BoolParam(r *http.Request, name string) (bool, error) {
	switch v := r.URL.Query().Get(name); v {
	case "", "false":
		return false, nil
	case "true":
		return true, nil
	default:
		return false, Invalid(name, "must be true or false, got %q", v)
	}
}

// AuthScheme names the scheme of an Authorization header value for logs
// and the SIEM's records: "basic", "bearer", or "none" (empty, or another
// scheme). It never looks at the credential itself.
func AuthScheme(authorization string) string {
	switch s := authorization; {
	case len(s) >= 6 && strings.EqualFold(s[:6], "basic "):
		return "basic"
	case len(s) >= 7 && strings.EqualFold(s[:7], "bearer "):
		return "bearer"
	}
	return "none"
}
