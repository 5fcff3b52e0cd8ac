package server

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRelativeDataDir: berth serve's default data dir is relative
// (./berth-data). The server makes it absolute at start-up, so a Computer's
// workspace is an absolute path and exec in it works (issue 10: every exec
// answered 500 "the operation failed").
func TestRelativeDataDir(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	h := start(t, "berth-data")
	if want := filepath.Join(dir, "berth-data"); h.s.o.DataDir != want {
		t.Errorf("DataDir %q, want %q", h.s.o.DataDir, want)
	}
	if want := filepath.Join(dir, "berth-data", "sites"); h.s.SitesDir() != want {
		t.Errorf("SitesDir %q, want %q", h.s.SitesDir(), want)
	}
	if r := h.json("POST", "/computers", `{"id":"desk","backings":[{"kind":"process"}]}`); r.code != 201 {
		t.Fatalf("create: %d %s", r.code, r.body)
	}
	r := h.json("POST", "/computers/desk/exec", `{"argv":["/bin/sh","-c","echo hi > note.txt && cat note.txt && pwd"]}`)
	if r.code != 200 {
		t.Fatalf("exec: %d %s", r.code, r.body)
	}
	var res struct {
		ExitCode int    `json:"exitCode"`
		Stdout   string `json:"stdout"`
	}
	if err := json.Unmarshal(r.body, &res); err != nil || res.ExitCode != 0 || !strings.HasPrefix(res.Stdout, "hi\n") {
		t.Errorf("exec: %s, %v", r.body, err)
	}
	h.do("DELETE", "/computers/desk", "", "")
}

// TestServerErrorSaysWhy: a 500 names its cause to the operator (issue 10:
// "the operation failed" hid what the operator could fix); a namespace
// token, whose walls the cause may reach past, gets a reference to the
// server's log line instead.
func TestServerErrorSaysWhy(t *testing.T) {
	w := startTenants(t, Options{NamespaceDrivers: map[string][]string{"team-a": {"process"}}})
	// Something in the way of the workspaces: a file where a Computer's
	// directory goes.
	for _, id := range []string{"op-box", "a-box"} {
		if err := os.WriteFile(filepath.Join(w.o.DataDir, "computers", id), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	r := w.call(nil, "POST", "/computers", w.op, `{"id":"op-box"}`)
	if msg := errorOf(t, r); r.code != 500 || !strings.Contains(msg, "not a directory") || !strings.Contains(msg, filepath.Join(w.o.DataDir, "computers", "op-box")) {
		t.Errorf("operator: %s, want 500 naming the cause", r)
	}
	r = w.call(nil, "POST", "/computers", w.a, `{"id":"a-box"}`)
	if msg := errorOf(t, r); r.code != 500 || strings.Contains(msg, "not a directory") || strings.Contains(msg, w.o.DataDir) || !strings.Contains(msg, "server's log, ref ") {
		t.Errorf("team-a: %s, want 500 with a log reference only", r)
	}
}
