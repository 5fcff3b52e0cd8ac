package computerapi

import (
	"context"
	"encoding/json"
	"github.com/berth-dev/berth/apitype/computertype"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/berth-dev/berth/internal/grant"
)

// opCase is one operation of the grant matrix: how to prepare a Computer
// for it, how to call it, and what it answers when allowed.
type opCase struct {
	route string // the pattern it exercises, as Routes lists it
	setup func(e *testEnv, id string) string
	call  func(e *testEnv, c cred, id, arg string) int
	want  int
}

func req(method, path string, body any) func(e *testEnv, c cred, id, arg string) int {
	return func(e *testEnv, c cred, id, arg string) int {
		p := strings.ReplaceAll(strings.ReplaceAll(path, "{id}", id), "{arg}", arg)
		code, _ := e.do(c, method, p, body)
		return code
	}
}

const matrixPatch = `--- a/p.txt
+++ b/p.txt
@@ -1 +1 @@
-old
+new
`

func writeFile(name, content string) func(e *testEnv, id string) string {
	return func(e *testEnv, id string) string {
		e.must(operator, http.StatusOK, "POST", "/computers/"+id+"/files/write", computertype.WriteRequest{Path: name, Content: content})
		return ""
	}
}

var opCases = map[grant.Action][]opCase{
	grant.Exec:           {{route: "POST /computers/{id}/exec", call: req("POST", "/computers/{id}/exec", computertype.ExecRequest{Argv: []string{"true"}}), want: 200}},
	grant.Bash:           {{route: "POST /computers/{id}/bash", call: req("POST", "/computers/{id}/bash", computertype.ExecRequest{Script: "exit 0"}), want: 200}},
	grant.Start:          {{route: "POST /computers/{id}/start", call: req("POST", "/computers/{id}/start", nil), want: 200}},
	grant.Stop:           {{route: "POST /computers/{id}/stop", call: req("POST", "/computers/{id}/stop", nil), want: 200}},
	grant.Delete:         {{route: "DELETE /computers/{id}", call: req("DELETE", "/computers/{id}", nil), want: 204}},
	grant.FilesRead:      {{route: "POST /computers/{id}/files/read", setup: writeFile("r.txt", "a\nb\n"), call: req("POST", "/computers/{id}/files/read", computertype.ReadRequest{Path: "r.txt"}), want: 200}},
	grant.FilesReadBytes: {{route: "GET /computers/{id}/files/readBytes", setup: writeFile("r.bin", "xyz"), call: req("GET", "/computers/{id}/files/readBytes?path=r.bin", nil), want: 200}},
	grant.FilesWrite:     {{route: "POST /computers/{id}/files/write", call: req("POST", "/computers/{id}/files/write", computertype.WriteRequest{Path: "w.txt", Content: "w"}), want: 200}},
	grant.FilesWriteByte: {{route: "PUT /computers/{id}/files/writeBytes", call: req("PUT", "/computers/{id}/files/writeBytes?path=w.bin", []byte{0, 1, 2}), want: 200}},
	grant.FilesList:      {{route: "POST /computers/{id}/files/list", call: req("POST", "/computers/{id}/files/list", computertype.PathRequest{Path: "/"}), want: 200}},
	grant.FilesGlob:      {{route: "POST /computers/{id}/files/glob", call: req("POST", "/computers/{id}/files/glob", computertype.GlobRequest{Pattern: "**/*.txt"}), want: 200}},
	grant.FilesGrep:      {{route: "POST /computers/{id}/files/grep", call: req("POST", "/computers/{id}/files/grep", computertype.GrepRequest{Pattern: "x"}), want: 200}},
	grant.FilesEdit:      {{route: "POST /computers/{id}/files/edit", setup: writeFile("e.txt", "old\n"), call: req("POST", "/computers/{id}/files/edit", computertype.EditRequest{Path: "e.txt", Edits: []computertype.Edit{{Old: "old", New: "new"}}}), want: 200}},
	grant.FilesPatch:     {{route: "POST /computers/{id}/files/patch", setup: writeFile("p.txt", "old\n"), call: req("POST", "/computers/{id}/files/patch", computertype.PatchRequest{Patch: matrixPatch}), want: 200}},
	grant.Mkdir:          {{route: "POST /computers/{id}/mkdir", call: req("POST", "/computers/{id}/mkdir", computertype.MkdirRequest{Path: "d"}), want: 201}},
	grant.Backing: {
		{route: "GET /computers/{id}/backings", call: req("GET", "/computers/{id}/backings", nil), want: 200},
		{route: "PUT /computers/{id}/backings", call: req("PUT", "/computers/{id}/backings", `{"backings":[{"kind":"process"}]}`), want: 200},
	},
	grant.ExposePort: {{route: "POST /computers/{id}/ports", call: req("POST", "/computers/{id}/ports", computertype.PortRequest{Port: 8080}), want: 201}},
	grant.ListPorts:  {{route: "GET /computers/{id}/ports", call: req("GET", "/computers/{id}/ports", nil), want: 200}},
	grant.UnexposePort: {{route: "DELETE /computers/{id}/ports/{port}", setup: func(e *testEnv, id string) string {
		e.must(operator, http.StatusCreated, "POST", "/computers/"+id+"/ports", computertype.PortRequest{Port: 9000})
		return "9000"
	}, call: req("DELETE", "/computers/{id}/ports/{arg}", nil), want: 204}},
	grant.Terminal:     {{route: "GET /computers/{id}/terminal", call: terminalCall, want: http.StatusSwitchingProtocols}},
	grant.ProcessStart: {{route: "POST /computers/{id}/processes", call: req("POST", "/computers/{id}/processes", computertype.ProcessRequest{Argv: []string{"true"}}), want: 201}},
	grant.ProcessList: {
		{route: "GET /computers/{id}/processes", call: req("GET", "/computers/{id}/processes", nil), want: 200},
		{route: "GET /computers/{id}/processes/{pid}/output", setup: startProcess("echo hi"), call: req("GET", "/computers/{id}/processes/{arg}/output", nil), want: 200},
	},
	grant.ProcessKill: {{route: "DELETE /computers/{id}/processes/{pid}", setup: startProcess("sleep 60"), call: req("DELETE", "/computers/{id}/processes/{arg}?signal=KILL", nil), want: 200}},
}

func startProcess(script string) func(e *testEnv, id string) string {
	return func(e *testEnv, id string) string {
		var p computertype.Process
		json.Unmarshal(e.must(operator, http.StatusCreated, "POST", "/computers/"+id+"/processes", computertype.ProcessRequest{Script: script}), &p)
		return p.ID
	}
}

// terminalCall opens the terminal websocket and reports 101 when the
// session started (its first message is "ready"), else the refusal.
func terminalCall(e *testEnv, c cred, id, _ string) int {
	h := http.Header{}
	switch c {
	case "":
	case operator:
		r, _ := http.NewRequest("GET", "/", nil)
		r.SetBasicAuth(opUser, opPass)
		h.Set("Authorization", r.Header.Get("Authorization"))
	default:
		h.Set("Authorization", "Bearer "+string(c))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(e.srv.URL, "http")+"/computers/"+id+"/terminal", &websocket.DialOptions{HTTPHeader: h})
	if err != nil {
		if resp != nil {
			return resp.StatusCode
		}
		e.t.Fatalf("terminal dial: %v", err)
	}
	defer conn.CloseNow()
	_, msg, err := conn.Read(ctx)
	if err != nil || !strings.Contains(string(msg), `"ready"`) {
		e.t.Fatalf("terminal's first message = %s, %v; want ready", msg, err)
	}
	return http.StatusSwitchingProtocols
}

// TestGrantMatrix calls every operation route with a grant that allows
// it, one that lacks the action, an expired one, one for another
// Computer, a revoked one and a malformed one.
func TestGrantMatrix(t *testing.T) {
	e := newEnv(t)
	covered := map[string]bool{}
	for _, action := range grant.Actions {
		cases := opCases[action]
		if len(cases) == 0 {
			t.Errorf("action %s has no case in the matrix", action)
			continue
		}
		for _, oc := range cases {
			covered[oc.route] = true
			if got := New(Options{}).Routes()[oc.route]; got != action {
				t.Errorf("route %s requires action %q, the matrix says %q", oc.route, got, action)
			}
			t.Run(strings.ReplaceAll(oc.route, "/", "_"), func(t *testing.T) {
				e.t = t
				defer func() { e.t = nil }()
				id := "m" + strings.ToLower(strings.NewReplacer(".", "", "/", "", "{", "", "}", "", " ", "").Replace(oc.route))
				if len(id) > 40 {
					id = id[len(id)-40:]
				}
				id = strings.TrimLeft(id, "-")
				e.create(id)
				e.create(id + "-x") // another Computer
				arg := ""
				if oc.setup != nil {
					arg = oc.setup(e, id)
				}
				// Every action but this one.
				var others []grant.Action
				for _, a := range grant.Actions {
					if a != action {
						others = append(others, a)
					}
				}
				_, denied := e.grant(id, others...)
				_, foreign := e.grant(id+"-x", grant.Actions...)
				_, expiring := e.grant(id, action)
				rv, revoked := e.grant(id, action)
				e.must(operator, http.StatusNoContent, "DELETE", "/computers/"+id+"/grants/"+rv.ID, nil)
				_, good := e.grant(id, action)
				malformed := cred(grant.Prefix + strings.TrimPrefix(string(good), grant.Prefix)[1:])

				for _, rc := range []struct {
					name string
					c    cred
					want int
				}{
					{"no credential", "", http.StatusUnauthorized},
					{"denied", denied, http.StatusForbidden},
					{"other computer", foreign, http.StatusForbidden},
					{"revoked", revoked, http.StatusUnauthorized},
					{"malformed", malformed, http.StatusUnauthorized},
					{"not a grant", "bcg_", http.StatusUnauthorized},
				} {
					if got := oc.call(e, rc.c, id, arg); got != rc.want {
						t.Errorf("%s: %d, want %d", rc.name, got, rc.want)
					}
				}
				e.clock.add(2 * time.Hour)
				got := oc.call(e, expiring, id, arg)
				e.clock.add(-2 * time.Hour)
				if got != http.StatusUnauthorized {
					t.Errorf("expired: %d, want 401", got)
				}
				// Allowed last: delete removes the Computer.
				if got := oc.call(e, good, id, arg); got != oc.want {
					t.Errorf("allowed: %d, want %d", got, oc.want)
				}
			})
		}
	}
	for route, action := range New(Options{}).Routes() {
		if action != "" && !covered[route] {
			t.Errorf("route %s (action %s) is not in the grant matrix", route, action)
		}
	}
}

// TestAdminOnlyRoutes: grants cannot reach the admin routes, whatever
// their actions, and the operator can.
func TestAdminOnlyRoutes(t *testing.T) {
	e := newEnv(t)
	e.create("adm")
	g, all := e.grant("adm", grant.Actions...)
	for _, r := range []struct{ method, path string }{
		{"POST", "/computers"},
		{"GET", "/computers"},
		{"POST", "/computers/adm/grants"},
		{"GET", "/computers/adm/grants"},
		{"DELETE", "/computers/adm/grants/" + g.ID},
		{"GET", "/computers/adm/facts"},
		{"GET", "/computers/usage/pending"},
		{"POST", "/computers/usage/acknowledge"},
	} {
		if code, b := e.do(all, r.method, r.path, `{}`); code != http.StatusForbidden {
			t.Errorf("grant %s %s = %d %s, want 403", r.method, r.path, code, b)
		}
		if code, _ := e.do("", r.method, r.path, `{}`); code != http.StatusUnauthorized {
			t.Errorf("no credential %s %s = %d, want 401", r.method, r.path, code)
		}
	}
	// Any grant of the Computer may read it; a grant of another may not.
	_, one := e.grant("adm", grant.ListPorts)
	e.must(one, http.StatusOK, "GET", "/computers/adm", nil)
	e.create("adm2")
	e.must(one, http.StatusForbidden, "GET", "/computers/adm2", nil)
	// Forbidden before the lookup: no oracle for other Computers.
	e.must(one, http.StatusForbidden, "GET", "/computers/nonexistent", nil)
	e.must(operator, http.StatusNotFound, "GET", "/computers/nonexistent", nil)

	// Deleting a Computer revokes its grants: a new one with the same id
	// does not honour them.
	e.must(operator, http.StatusNoContent, "DELETE", "/computers/adm", nil)
	e.create("adm")
	if code, b := e.do(all, "POST", "/computers/adm/exec", computertype.ExecRequest{Argv: []string{"true"}}); code != http.StatusUnauthorized {
		t.Errorf("old grant on a recreated Computer = %d %s, want 401", code, b)
	}
}
