package server

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/berth-dev/berth/internal/auth"
	"github.com/berth-dev/berth/internal/store"
)

// limitsWorld is a gated server with a team-a namespace admin token, under
// the options given.
func limitsWorld(t *testing.T, o Options) (n *node, op, nsA string) {
	t.Helper()
	o.AdminPassword = "s3cret"
	o.Brake = auth.BrakeConfig{Threshold: 1 << 30, SlowAfter: 1 << 30}
	n = startNode(t, o)
	op = basic("admin", "s3cret")
	// team-a owns a.test, so its token may route the hosts limitsVM names.
	if r := n.call(nil, "POST", "/namespaces", op, `{"name":"team-a","domains":["a.test"]}`); r.code != 201 && r.code != 200 {
		t.Fatalf("POST /namespaces = %s", r) // 200 when the data dir already has it
	}
	var m auth.MintedView
	n.must(201, "POST", "/tokens", op, `{"name":"team-a admin","admin":"admin","namespace":"team-a","deployments":[]}`, &m)
	return n, op, bearer(m.Token)
}

// limitsVM is a process vm deployment in team-a, routed under its domain, that starts no replica until traffic.
func limitsVM(id, extra string) string {
	return fmt.Sprintf(`{"id":%q,"namespace":"team-a","routes":[{"host":"%s.a.test"}],"vm":{"driver":"process","port":8080,"start_command":"true"%s}}`, id, id, extra)
}

// refused asserts status want and an error naming field.
func refused(t *testing.T, r reply, want int, field string) {
	t.Helper()
	if r.code != want || !strings.Contains(string(r.body), `"error":"`+field+`: `) && !strings.Contains(string(r.body), ": "+field+`: `) {
		t.Fatalf("got %s, want %d naming %s", r, want, field)
	}
}

// TestConfinedDriverRefused: a namespace token may not run a process
// sandbox (it ran as berth's own uid, with the host's /proc) unless the
// operator allows process for its namespace; the operator always may.
func TestConfinedDriverRefused(t *testing.T) {
	n, op, nsA := limitsWorld(t, Options{})
	refused(t, n.call(nil, "POST", "/deployments", nsA, limitsVM("a-vm", "")), 403, "vm.driver")
	n.must(404, "GET", "/deployments/a-vm", op, "", nil)
	// Nor by turning a deployment of its own into a process vm.
	n.must(201, "POST", "/deployments", op, staticSpec("a-st", "team-a"), nil)
	refused(t, n.call(nil, "PUT", "/deployments/a-st", nsA, limitsVM("a-st", "")), 403, "vm.driver")
	n.must(201, "POST", "/deployments", op, limitsVM("op-vm", ""), nil)

	// Computers: the default backing is process, and so is an explicit one.
	refused(t, n.call(nil, "POST", "/computers", nsA, `{"id":"a-comp"}`), 403, "backings")
	refused(t, n.call(nil, "POST", "/computers", nsA, `{"id":"a-comp","backings":[{"kind":"process"}]}`), 403, "backings[0]")
	n.must(201, "POST", "/computers", op, `{"id":"op-comp","namespace":"team-a"}`, nil)
	refused(t, n.call(nil, "PUT", "/computers/op-comp/backings", nsA, `{"backings":[{"kind":"process"}]}`), 403, "backings[0]")

	allowed, _, nsA2 := limitsWorld(t, Options{NamespaceDrivers: map[string][]string{"team-a": {"process"}}})
	allowed.must(201, "POST", "/deployments", nsA2, limitsVM("a-vm", ""), nil)
	allowed.must(201, "POST", "/computers", nsA2, `{"id":"a-comp"}`, nil)
}

// TestReplicaCeiling: no spec may ask for more than the operator's ceiling
// of replicas (default 100), by POST or by PATCH.
func TestReplicaCeiling(t *testing.T) {
	n, op, _ := limitsWorld(t, Options{})
	refused(t, n.call(nil, "POST", "/deployments", op, limitsVM("big", "")[:len(limitsVM("big", ""))-1]+`,"scaling":{"max_replicas":101}}`), 400, "scaling.max_replicas")
	n.must(404, "GET", "/deployments/big", op, "", nil)
	n.must(201, "POST", "/deployments", op, limitsVM("big", "")[:len(limitsVM("big", ""))-1]+`,"scaling":{"max_replicas":100}}`, nil)
	refused(t, n.call(nil, "PATCH", "/deployments/big/scaling", op, `{"max_replicas":101}`), 400, "scaling.max_replicas")

	low, lop, _ := limitsWorld(t, Options{MaxReplicasCeiling: 3})
	low.must(201, "POST", "/deployments", lop, withScaling(limitsVM("small", ""), `{"max_replicas":3}`), nil)
	refused(t, low.call(nil, "PATCH", "/deployments/small/scaling", lop, `{"max_replicas":4}`), 400, "scaling.max_replicas")
}

func withScaling(spec, scaling string) string {
	return strings.TrimSuffix(spec, "}") + `,"scaling":` + scaling + `}`
}

// TestNamespaceReplicaQuota: a confined caller's vm deployments may not add
// up to more than the namespace's quota of max_replicas (default 20); a
// write that lowers the sum passes even above it; warm_pool and
// min_replicas are bounded by max_replicas, so they cannot go around it.
func TestNamespaceReplicaQuota(t *testing.T) {
	n, op, nsA := limitsWorld(t, Options{NamespaceDrivers: map[string][]string{"team-a": {"process"}}})
	n.must(201, "POST", "/deployments", nsA, withScaling(limitsVM("q1", ""), `{"max_replicas":15}`), nil)
	r := n.call(nil, "POST", "/deployments", nsA, withScaling(limitsVM("q2", ""), `{"max_replicas":6}`))
	refused(t, r, 403, "scaling.max_replicas")
	if !strings.Contains(string(r.body), "quota of 20") {
		t.Errorf("the refusal does not name the quota: %s", r)
	}
	n.must(404, "GET", "/deployments/q2", op, "", nil)
	n.must(201, "POST", "/deployments", nsA, withScaling(limitsVM("q2", ""), `{"max_replicas":5}`), nil)
	refused(t, n.call(nil, "PATCH", "/deployments/q2/scaling", nsA, `{"max_replicas":6}`), 403, "scaling.max_replicas")
	refused(t, n.call(nil, "PATCH", "/deployments/q2/scaling", nsA, `{"warm_pool":6}`), 400, "scaling.warm_pool")
	refused(t, n.call(nil, "PATCH", "/deployments/q2/scaling", nsA, `{"min_replicas":6}`), 400, "scaling.min_replicas")
	// A default policy is 5 replicas: it counts too.
	refused(t, n.call(nil, "POST", "/deployments", nsA, limitsVM("q3", "")), 403, "scaling.max_replicas")

	// The operator is not bound by the quota; the namespace is then above
	// it, and the confined caller can still bring its deployments down.
	n.must(201, "POST", "/deployments", op, withScaling(limitsVM("q4", ""), `{"max_replicas":10}`), nil)
	n.must(200, "PATCH", "/deployments/q1/scaling", nsA, `{"max_replicas":14}`, nil)
	refused(t, n.call(nil, "PATCH", "/deployments/q1/scaling", nsA, `{"max_replicas":15}`), 403, "scaling.max_replicas")
}

// TestBodyShape: a body within 2 MiB made of 400k empty objects is refused
// before it is decoded, and nothing is stored.
func TestBodyShape(t *testing.T) {
	n, op, _ := limitsWorld(t, Options{})
	empties := strings.TrimSuffix(strings.Repeat("{},", 400000), ",")
	body := `{"id":"blob","routes":[{"host":"blob.test"}],"upstreams":["127.0.0.1:1"],"x":[` + empties + `]}`
	if len(body) > 2<<20 {
		t.Fatalf("the body is %d bytes, over the 2 MiB cap this test is about", len(body))
	}
	r := n.call(nil, "POST", "/deployments", op, body)
	if r.code != 400 || !strings.Contains(string(r.body), "more than 10000 values") {
		t.Fatalf("got %d %.200s, want 400 naming the value limit", r.code, r.body)
	}
	n.must(404, "GET", "/deployments/blob", op, "", nil)
	deep := `{"id":"deep","routes":[{"host":"deep.test"}],"upstreams":["127.0.0.1:1"],"x":` + strings.Repeat("[", 40) + strings.Repeat("]", 40) + `}`
	if r := n.call(nil, "POST", "/deployments", op, deep); r.code != 400 || !strings.Contains(string(r.body), "deeper than 32") {
		t.Fatalf("got %s, want 400 naming the depth limit", r)
	}
	n.must(404, "GET", "/deployments/deep", op, "", nil)
}

// TestLoaderEnvConfined: a confined caller may not set LD_PRELOAD and its
// kin in env_vars (the agent starts with them); the operator may.
func TestLoaderEnvConfined(t *testing.T) {
	n, op, nsA := limitsWorld(t, Options{NamespaceDrivers: map[string][]string{"team-a": {"process"}}})
	for _, v := range []string{"LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "GCONV_PATH"} {
		refused(t, n.call(nil, "POST", "/deployments", nsA, limitsVM("a-env", `,"env_vars":{"`+v+`":"/tmp/x.so"}`)), 400, "vm.env_vars."+v)
	}
	n.must(404, "GET", "/deployments/a-env", op, "", nil)
	n.must(201, "POST", "/deployments", nsA, limitsVM("a-env", `,"env_vars":{"TMPDIR":"/tmp"}`), nil)
	n.must(201, "POST", "/deployments", op, limitsVM("op-env", `,"env_vars":{"LD_PRELOAD":"/tmp/x.so"}`), nil)
}

// TestGateStored: a gate is validated field by field (a bad one is
// refused naming its field, and not stored), and a gated deployment
// stored before a restart is loaded and served with its gate.
func TestGateStored(t *testing.T) {
	dir := t.TempDir()
	n, op, _ := limitsWorld(t, Options{DataDir: dir})
	refused(t, n.call(nil, "POST", "/deployments", op, `{"id":"gated","routes":[{"host":"g.test"}],"upstreams":["127.0.0.1:1"],"auth":{"provider":"jwt","jwt":{"public_key":"k","algorithms":["RS256"],"issuer":"i"}}}`), 400, "auth.jwt.public_key")
	n.must(404, "GET", "/deployments/gated", op, "", nil)
	n.stop()

	st, closeStore := openTestStore(t, dir)
	raw := `{"id":"gated","routes":[{"host":"g.test"}],"upstreams":["127.0.0.1:1"],"auth":{"provider":"app-token"}}`
	if _, err := st.PutDeployment(context.Background(), store.Deployment{ID: "gated", Spec: []byte(raw)}, true, 0); err != nil {
		t.Fatal(err)
	}
	closeStore()
	n2, op2, _ := limitsWorld(t, Options{DataDir: dir})
	n2.must(200, "GET", "/deployments/gated", op2, "", nil)
	req, _ := http.NewRequest("GET", "http://"+strings.TrimPrefix(n2.s.ProxyAddr(), "http://")+"/", nil)
	req.Host = "g.test"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Errorf("the stored gated deployment answered %d without a credential, want 401", resp.StatusCode)
	}
}

// TestUpstreamRefusedAtWrite: static upstreams at berth's own listeners
// (by address, by name, or by 0.0.0.0) and at link-local or metadata
// addresses are refused naming the upstream; link-local ones are let
// through when the operator allows them, berth's own listeners never.
func TestUpstreamRefusedAtWrite(t *testing.T) {
	n, op, _ := limitsWorld(t, Options{})
	_, adminPort, _ := net.SplitHostPort(n.s.AdminAddr())
	static := func(id string, ups ...string) string {
		return fmt.Sprintf(`{"id":%q,"routes":[{"host":"%s.test"}],"upstreams":["%s"]}`, id, id, strings.Join(ups, `","`))
	}
	for _, up := range []string{
		n.s.AdminAddr(), n.s.ProxyAddr(), "localhost:" + adminPort, "0.0.0.0:" + adminPort,
		"169.254.169.254:80", "169.254.10.1:8080", "[fe80::1]:80", "[fd00:ec2::254]:80", "100.100.100.200:80",
	} {
		refused(t, n.call(nil, "POST", "/deployments", op, static("loop", "127.0.0.1:1", up)), 400, "upstreams[1]")
		refused(t, n.call(nil, "PUT", "/deployments/loop", op, static("loop", up)), 400, "upstreams[0]")
	}
	n.must(404, "GET", "/deployments/loop", op, "", nil)
	// Another port of the same address, and a name that does not resolve,
	// are not berth's (the dial-time check has the last word).
	n.must(201, "POST", "/deployments", op, static("fine", "127.0.0.1:1", "no-such-name.invalid:80"), nil)

	ll, llop, _ := limitsWorld(t, Options{AllowLinkLocalUpstreams: true})
	ll.must(201, "POST", "/deployments", llop, static("meta", "169.254.169.254:80"), nil)
	refused(t, ll.call(nil, "POST", "/deployments", llop, static("self", ll.s.AdminAddr())), 400, "upstreams[0]")
}
