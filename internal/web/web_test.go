package web

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

type target struct {
	Name    string `json:"name"`
	Count   int    `json:"count"`
	Scaling struct {
		Min int `json:"min_replicas"`
	} `json:"scaling"`
}

// checked fails its decode with a FieldError, as apitype's UnmarshalJSON
// methods do.
type checked struct{}

func (*checked) UnmarshalJSON([]byte) error {
	return &FieldError{Field: "routes[0].host", Msg: "must be a host name"}
}

func asError(t *testing.T, err error) *Error {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not a *web.Error", err, err)
	}
	return e
}

// TestReadJSON: each way a body can be wrong is its own status, and the
// message names the field where there is one.
func TestReadJSON(t *testing.T) {
	for _, tt := range []struct {
		name, ct, body string
		status         int
		want           string // in the message
	}{
		{"no content type", "", `{}`, 415, `Content-Type must be application/json, got ""`},
		{"text", "text/plain", `{}`, 415, `got "text/plain"`},
		{"bad media type", "application/json; =", `{}`, 415, "Content-Type must be application/json"},
		{"empty", "application/json", "  \n", 400, "the request body is empty"},
		{"syntax", "application/json", `{"name": }`, 400, "malformed JSON at byte"},
		{"truncated", "application/json", `{"name": "x"`, 400, "malformed JSON"},
		{"trailing", "application/json", `{"name": "x"} {}`, 400, "unexpected data after the top-level value"},
		{"trailing garbage", "application/json", `{"name": "x"} x`, 400, "unexpected data after the top-level value"},
		{"wrong type", "application/json", `{"count": "three"}`, 422, "count: expected int, got JSON string"},
		{"wrong nested type", "application/json", `{"scaling": {"min_replicas": true}}`, 422, "scaling.min_replicas: expected int, got JSON bool"},
		{"wrong top level", "application/json", `[1]`, 422, "the body: expected web.target, got JSON array"},
		{"too deep", "application/json", strings.Repeat("[", MaxJSONDepth+1) + strings.Repeat("]", MaxJSONDepth+1), 400, "nest"},
		{"too big", "application/json", `{"name": "` + strings.Repeat("x", MaxBody) + `"}`, 413, "request body exceeds 2097152 bytes"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest("POST", "/x", strings.NewReader(tt.body))
			if tt.ct != "" {
				r.Header.Set("Content-Type", tt.ct)
			}
			var v target
			err := ReadJSON(httptest.NewRecorder(), r, &v)
			e := asError(t, err)
			if e.Status != tt.status || !strings.Contains(e.Message, tt.want) {
				t.Errorf("ReadJSON: %d %q, want %d containing %q", e.Status, e.Message, tt.status, tt.want)
			}
		})
	}

	// What is accepted: +json types, parameters, unknown fields.
	for _, ct := range []string{"application/json", "application/json; charset=utf-8", "application/merge-patch+json"} {
		r := httptest.NewRequest("POST", "/x", strings.NewReader(`{"name": "a", "count": 2, "extra": [1]}`))
		r.Header.Set("Content-Type", ct)
		var v target
		if err := ReadJSON(httptest.NewRecorder(), r, &v); err != nil || v.Name != "a" || v.Count != 2 {
			t.Errorf("Content-Type %q: %+v, %v", ct, v, err)
		}
	}

	// A decoder's FieldError is a 400 with its message.
	var c checked
	e := asError(t, DecodeJSON([]byte(`{}`), &c))
	if e.Status != 400 || e.Message != "routes[0].host: must be a host name" {
		t.Errorf("FieldError: %d %q", e.Status, e.Message)
	}
}

// TestReadBody returns the body as sent once it passes the checks.
func TestReadBody(t *testing.T) {
	r := httptest.NewRequest("PUT", "/x", strings.NewReader(`{"a": 1}`))
	r.Header.Set("Content-Type", "application/json")
	raw, err := ReadBody(httptest.NewRecorder(), r)
	if err != nil || string(raw) != `{"a": 1}` {
		t.Errorf("ReadBody = %q, %v", raw, err)
	}
}

// TestHandle: a handler's *Error is written as the envelope with its
// status, code and headers; any other error is a 500 that does not leak
// the cause to a caller not marked by ShowCauses.
func TestHandle(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	h := Handle(log, func(w http.ResponseWriter, r *http.Request) error {
		switch r.URL.Path {
		case "/limited":
			return &Error{Status: 429, Code: "rate_limited", Message: "slow down", Header: http.Header{"Retry-After": {"3"}}}
		case "/field":
			return Invalid("scaling.max_replicas", "must be at most %d", 10)
		case "/plain":
			return errors.New("disk /secret/path on fire")
		}
		WriteJSON(w, 201, map[string]string{"ok": "<yes>"})
		return nil
	})
	for _, tt := range []struct {
		path, body string
		status     int
		header     string
	}{
		{"/limited", `{"error":"slow down","code":"rate_limited"}`, 429, "3"},
		{"/field", `{"error":"scaling.max_replicas: must be at most 10"}`, 400, ""},
		{"/ok", `{"ok":"<yes>"}`, 201, ""},
	} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", tt.path, nil))
		if w.Code != tt.status || strings.TrimSpace(w.Body.String()) != tt.body || w.Header().Get("Retry-After") != tt.header || w.Header().Get("Content-Type") != "application/json" {
			t.Errorf("%s: %d %s Retry-After %q Content-Type %q", tt.path, w.Code, w.Body, w.Header().Get("Retry-After"), w.Header().Get("Content-Type"))
		}
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/plain", nil))
	var env envelope
	json.Unmarshal(w.Body.Bytes(), &env)
	if w.Code != 500 || !strings.HasPrefix(env.Error, "internal error") || strings.Contains(env.Error, "/secret") {
		t.Errorf("plain error: %d %q", w.Code, env.Error)
	}
	// Invalid keeps the FieldError for callers that look for one.
	var fe *FieldError
	if err := Invalid("x", "bad"); !errors.As(err, &fe) || fe.Field != "x" {
		t.Errorf("Invalid: %v", err)
	}
}

// TestWriteJSONUnencodable: a value that cannot be encoded is a 500
// envelope, not a half-written body.
func TestWriteJSONUnencodable(t *testing.T) {
	w := httptest.NewRecorder()
	WriteJSON(w, 200, map[string]float64{"x": math.Inf(1)})
	if w.Code != 500 || strings.TrimSpace(w.Body.String()) != `{"error":"could not encode the response"}` {
		t.Errorf("%d %q", w.Code, w.Body)
	}
}

// TestRecover: a panic is a logged 500 envelope; http.ErrAbortHandler is
// passed on.
func TestRecover(t *testing.T) {
	var logged strings.Builder
	log := slog.New(slog.NewTextHandler(&logged, nil))
	h := Recover(log, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/abort" {
			panic(http.ErrAbortHandler)
		}
		panic("nil map")
	}))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/boom", nil))
	if w.Code != 500 || strings.TrimSpace(w.Body.String()) != `{"error":"internal error"}` || !strings.Contains(logged.String(), "nil map") {
		t.Errorf("panic: %d %q; log %q", w.Code, w.Body, logged.String())
	}
	func() {
		defer func() {
			if v := recover(); v != http.ErrAbortHandler {
				t.Errorf("ErrAbortHandler: recovered %v, want it re-raised", v)
			}
		}()
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/abort", nil))
	}()
}

// TestErrorUnwrap: an *Error wraps its cause.
func TestErrorUnwrap(t *testing.T) {
	e := &Error{Status: 502, Message: "upstream", Err: io.ErrUnexpectedEOF}
	if !errors.Is(e, io.ErrUnexpectedEOF) || e.Error() != "upstream: unexpected EOF" || Errorf(400, "a %d", 1).Error() != "a 1" {
		t.Errorf("%v", e)
	}
}
