package web

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestWriteErrorCauses: a server error's cause is sent to a caller marked
// by ShowCauses and logged with a reference; other callers get the
// reference; client errors keep their message alone.
func TestWriteErrorCauses(t *testing.T) {
	cause := errors.New("mkdir /data/computers/x: not a directory")
	for _, c := range []struct {
		name   string
		err    error
		shown  bool
		status int
		want   string // the message, or its prefix when it ends in "ref "
	}{
		{"shown", &Error{Status: 500, Message: "the operation failed", Err: cause}, true, 500, "the operation failed: mkdir /data/computers/x: not a directory"},
		{"hidden", &Error{Status: 500, Message: "the operation failed", Err: cause}, false, 500, "the operation failed (the cause is in the server's log, ref "},
		{"plain error shown", cause, true, 500, "internal error: mkdir /data/computers/x: not a directory"},
		{"plain error hidden", cause, false, 500, "internal error (the cause is in the server's log, ref "},
		{"502 shown", &Error{Status: 502, Message: "could not reach it", Err: cause}, true, 502, "could not reach it: mkdir /data/computers/x: not a directory"},
		{"no cause", Errorf(503, "busy"), true, 503, "busy"},
		{"client error", &Error{Status: 400, Message: "x: bad", Err: cause}, true, 400, "x: bad"},
	} {
		var logBuf bytes.Buffer
		log := slog.New(slog.NewTextHandler(&logBuf, nil))
		r := httptest.NewRequest("GET", "/x", nil)
		if c.shown {
			r = r.WithContext(ShowCauses(r.Context()))
		}
		w := httptest.NewRecorder()
		WriteError(log, w, r, c.err)
		var env envelope
		if err := json.Unmarshal(w.Body.Bytes(), &env); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if w.Code != c.status {
			t.Errorf("%s: status %d, want %d", c.name, w.Code, c.status)
		}
		if prefix, ok := strings.CutSuffix(c.want, "ref "); ok {
			ref, found := strings.CutPrefix(env.Error, prefix+"ref ")
			ref = strings.TrimSuffix(ref, ")")
			if !found || len(ref) != 12 || !strings.Contains(logBuf.String(), "ref="+ref) || !strings.Contains(logBuf.String(), "not a directory") {
				t.Errorf("%s: %q; log %q", c.name, env.Error, logBuf.String())
			}
			continue
		}
		if env.Error != c.want {
			t.Errorf("%s: %q, want %q", c.name, env.Error, c.want)
		}
		if c.status >= 500 && c.shown && c.name != "no cause" && !strings.Contains(logBuf.String(), "not a directory") {
			t.Errorf("%s: cause not logged: %q", c.name, logBuf.String())
		}
	}
}
