package server

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/store"
)

// TestUnsupportedSectionsRefused: a spec that sets a section berth does
// not act on is a 400 naming it, not a 201 that is then ignored; nothing
// is stored. One stored from before is skipped at start-up, as a gated one
// is. Unknown top-level keys are still kept and returned.
func TestUnsupportedSectionsRefused(t *testing.T) {
	dir := t.TempDir()
	n, op, _ := limitsWorld(t, Options{DataDir: dir})
	vm := `"vm":{"driver":"process","port":8080,"start_command":"true"`
	for field, doc := range map[string]string{
		"discovery": `{"id":"u","routes":[{"host":"u.test"}],"discovery":{"service_id":"svc"}}`,
		"vm.mounts": `{"id":"u",` + vm + `,"mounts":[{"path":"/data","store":"local","ref":"r"}]}}`,
	} {
		r := n.call(nil, "POST", "/deployments", op, doc)
		refused(t, r, 400, field)
		want := field + ": not supported yet"
		if field == "discovery" {
			// Served in a fleet only.
			want = "discovery: discovery needs a fleet: start berth with --etcd"
		}
		if field == "vm.mounts" {
			// Before that: the process driver attaches no mounts (it
			// is no vm.Mounter), and this host has no driver that does.
			want = "vm.mounts: the process driver cannot attach mounts (drivers on this host that can: none)"
		}
		if !strings.Contains(string(r.body), want) {
			t.Errorf("%s: %s does not say %q", field, r, want)
		}
		n.must(404, "GET", "/deployments/u", op, "", nil)
	}
	// A malformed vm.workspace is still refused naming the field.
	refused(t, n.call(nil, "POST", "/deployments", op, `{"id":"u","vm":{"driver":"process","port":8080,"workspace":{"store":"s"}},"scaling":{"max_replicas":1}}`), 400, "vm.workspace.store")

	var st apitype.DeploymentStatus
	n.must(201, "POST", "/deployments", op, `{"id":"x","routes":[{"host":"x.test"}],"upstreams":["127.0.0.1:1"],"x-owner":{"team":"web"}}`, &st)
	if string(st.Spec.Extra["x-owner"]) != `{"team":"web"}` {
		t.Errorf("the unknown top-level key was not kept: %+v", st.Spec.Extra)
	}
	n.stop()

	s, closeStore := openTestStore(t, dir)
	raw := `{"id":"fed","routes":[{"host":"fed.test"}],"upstreams":["127.0.0.1:1"],"discovery":{"service_id":"svc"}}`
	if _, err := s.PutDeployment(context.Background(), store.Deployment{ID: "fed", Spec: []byte(raw)}, true, 0); err != nil {
		t.Fatal(err)
	}
	closeStore()
	n2, op2, _ := limitsWorld(t, Options{DataDir: dir})
	n2.must(404, "GET", "/deployments/fed", op2, "", nil)
	n2.must(200, "GET", "/deployments/x", op2, "", nil)
}

// TestNestedUnknownFieldRefused: a typo inside a declared object
// (scaling.min_replica) is a 400 naming it, where it used to be dropped
// and the pool run with min 0; maps and the top level stay open.
func TestNestedUnknownFieldRefused(t *testing.T) {
	n, op, _ := limitsWorld(t, Options{})
	for field, doc := range map[string]string{
		"scaling.min_replica":     withScaling(limitsVM("typo", ""), `{"min_replica":1}`),
		"vm.start_comand":         `{"id":"typo","vm":{"driver":"process","start_comand":"true"}}`,
		"routes[0].path_prefx":    `{"id":"typo","routes":[{"path_prefx":"/"}],"upstreams":["127.0.0.1:1"]}`,
		"routes[0].redirect.code": `{"id":"typo","routes":[{"host":"t.test","redirect":{"to":"https://x.test","code":302}}],"upstreams":["127.0.0.1:1"]}`,
	} {
		r := n.call(nil, "POST", "/deployments", op, doc)
		refused(t, r, 400, field)
		if !strings.Contains(string(r.body), field+": unknown field") {
			t.Errorf("%s: %s", field, r)
		}
		r = n.call(nil, "PUT", "/deployments/typo", op, doc)
		if r.code != 400 || !strings.Contains(string(r.body), field+": unknown field") {
			t.Errorf("PUT %s: %s", field, r)
		}
	}
	n.must(404, "GET", "/deployments/typo", op, "", nil)
	var st apitype.DeploymentStatus
	n.must(201, "POST", "/deployments", op, withScaling(limitsVM("ok", `,"env_vars":{"ANY_name":"v"}`), `{"min_replicas":0}`), &st)
	if st.Spec.VM.EnvVars["ANY_name"] != "v" {
		t.Errorf("env_vars keys are the client's: %+v", st.Spec.VM.EnvVars)
	}
}

// TestUnsupportedRouteIs501: a route berth does not have answers 501
// "... is not supported by this server" (app-lb's SDKs read a 404 whose
// message starts with "no " as a missing deployment); a route that exists
// answers 404 for a missing resource, and a known path with another
// method 405 with Allow. The Computer API answers the same way.
func TestUnsupportedRouteIs501(t *testing.T) {
	n, op, _ := limitsWorld(t, Options{})
	n.must(201, "POST", "/deployments", op, staticSpec("x", "team-a"), nil)
	for _, c := range []struct{ method, path, msg string }{
		{"POST", "/deployments/x/update/rollouts", "POST /deployments/x/update/rollouts is not supported by this server"},
		{"GET", "/nope", "GET /nope is not supported by this server"},
		{"POST", "/computers/c/snapshot", "POST /computers/c/snapshot is not supported by this server"},
	} {
		r := n.call(nil, c.method, c.path, op, "")
		var e apitype.Error
		if r.code != 501 || json.Unmarshal(r.body, &e) != nil || e.Message != c.msg {
			t.Errorf("%s %s = %s, want 501 %q", c.method, c.path, r, c.msg)
		}
	}
	if r := n.call(nil, "GET", "/deployments/missing", op, ""); r.code != 404 || !strings.Contains(string(r.body), `no deployment \"missing\"`) {
		t.Errorf("missing deployment: %s", r)
	}
	r := n.call(nil, "PATCH", "/deployments/x", op, "")
	if r.code != 405 || r.header.Get("Allow") == "" || !strings.Contains(string(r.body), "not allowed") {
		t.Errorf("wrong method: %s (Allow %q)", r, r.header.Get("Allow"))
	}
}

// TestVMDriverDefaults: vm.driver defaults to process, as the README
// says, and a process spec may leave vm.port out; both are returned
// filled in. A confined caller, which may not use process by default, gets
// the first driver its namespace may use that the host has, or a refusal
// naming vm.driver. A process spec naming an image is refused at write
// time, not run without it.
func TestVMDriverDefaults(t *testing.T) {
	n, op, nsA := limitsWorld(t, Options{NamespaceDrivers: map[string][]string{"team-a": {"nosuch", "process"}, "team-b": {"nosuch"}}})
	var st apitype.DeploymentStatus
	n.must(201, "POST", "/deployments", op, `{"id":"d","vm":{"start_command":"true"}}`, &st)
	if st.Spec.VM.Driver != apitype.DriverProcess || st.Spec.VM.Port != 0 {
		t.Errorf("driver %q port %d, want process and 0", st.Spec.VM.Driver, st.Spec.VM.Port)
	}
	r := n.call(nil, "GET", "/deployments/d", op, "")
	if !strings.Contains(string(r.body), `"driver":"process"`) || !strings.Contains(string(r.body), `"port":0`) {
		t.Errorf("driver and port not on the wire: %s", r)
	}
	n.must(201, "POST", "/deployments", nsA, `{"id":"a-d","routes":[{"host":"a-d.a.test"}],"vm":{"start_command":"true"}}`, &st)
	if st.Spec.VM.Driver != apitype.DriverProcess || st.Spec.Namespace != "team-a" {
		t.Errorf("confined default: %+v in %q", st.Spec.VM, st.Spec.Namespace)
	}

	n.must(201, "POST", "/namespaces", op, `{"name":"team-b","domains":["b.test"]}`, nil)
	var m struct{ Token string }
	n.must(201, "POST", "/tokens", op, `{"name":"b","admin":"admin","namespace":"team-b","deployments":[]}`, &m)
	refused(t, n.call(nil, "POST", "/deployments", bearer(m.Token), `{"id":"b-d","routes":[{"host":"b-d.b.test"}],"vm":{"start_command":"true"}}`), 403, "vm.driver")

	refused(t, n.call(nil, "POST", "/deployments", op, `{"id":"img","vm":{"driver":"process","image":"busybox","start_command":"true"}}`), 400, "vm.image")
	refused(t, n.call(nil, "POST", "/deployments", op, `{"id":"img","vm":{"image":"busybox","start_command":"true"}}`), 400, "vm.image")
	n.must(404, "GET", "/deployments/img", op, "", nil)
}
