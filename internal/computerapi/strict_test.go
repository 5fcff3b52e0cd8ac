//go:build linux

package computerapi

import (
	"net/http"
	"strings"
	"testing"
)

// TestUnknownKeysRefused: a key the Computer API does not declare — a
// typo, at the top or nested, or a field berth does not act on — is a 400
// naming it, never dropped; the request changes nothing.
func TestUnknownKeysRefused(t *testing.T) {
	e := newEnv(t)
	for _, tt := range []struct{ path, body, want string }{
		{"/computers", `{"id":"typo","idleTimeoutSec":60}`, `idleTimeoutSec: unknown field`},
		{"/computers", `{"id":"typo","backings":[{"kind":"process","hostid":"h1"}]}`, `backings[0].hostid: unknown field`},
	} {
		code, b := e.do(operator, "POST", tt.path, tt.body)
		if code != http.StatusBadRequest || !strings.Contains(string(b), tt.want) {
			t.Errorf("POST %s %s = %d %s, want 400 %q", tt.path, tt.body, code, b, tt.want)
		}
	}
	if code, _ := e.do(operator, "GET", "/computers/typo", nil); code != http.StatusNotFound {
		t.Errorf("a refused create made a Computer: GET = %d", code)
	}
	e.create("desk")
	for _, tt := range []struct{ path, body, want string }{
		{"/computers/desk/exec", `{"argv":["true"],"timeoutMS":5}`, `timeoutMS: unknown field`},
		{"/computers/desk/files/write", `{"path":"a","content":"x","mod":"0600"}`, `mod: unknown field`},
		{"/computers/desk/files/edit", `{"path":"a","edits":[{"old":"x","new":"y","replace_all":true}]}`, `edits[0].replace_all: unknown field`},
		{"/computers/desk/grants", `{"actions":["exec"],"expiresInSec":60}`, `expiresInSec: unknown field`},
		{"/computers/desk/ports", `{"port":8000,"publc":true}`, `publc: unknown field`},
	} {
		code, b := e.do(operator, "POST", tt.path, tt.body)
		if code != http.StatusBadRequest || !strings.Contains(string(b), tt.want) {
			t.Errorf("POST %s %s = %d %s, want 400 %q", tt.path, tt.body, code, b, tt.want)
		}
	}
	if code, b := e.do(operator, "PUT", "/computers/desk/backings", `{"backings":null,"activ":1}`); code != http.StatusBadRequest || !strings.Contains(string(b), "activ: unknown field") {
		t.Errorf("PUT backings with an unknown key = %d %s", code, b)
	}
}
