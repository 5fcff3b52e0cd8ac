package server

import (
	"context"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/fleet/etcdfleet"
	"github.com/berth-dev/berth/internal/fleet/fleetca"
	"github.com/berth-dev/berth/internal/vm"
)

// startPlacedPair is two berths of one fleet (alpha made it with berth
// fleet init, beta joined it), both with a hop listener and placement on:
// with per-host SQLite stores (each to be given the same deployments), or
// shared, with one store in the fleet's etcd.
func startPlacedPair(t *testing.T, shared bool) (a, b *Server) {
	t.Helper()
	var ports []string
	for range 2 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ports = append(ports, l.Addr().String())
		l.Close()
	}
	d1, d2 := t.TempDir(), t.TempDir()
	ir, err := fleetca.Init(fleetca.InitOptions{DataDir: d1, Advertise: ports[0], PeerAdvertise: ports[1], HostID: "alpha"})
	if err != nil {
		t.Fatal(err)
	}
	o := func(dir string) Options {
		o := Options{DataDir: dir, Fleet: FleetOptions{LeaseTTL: 2 * time.Second, Listen: "127.0.0.1:0"}, placeVMs: !shared}
		if shared {
			// One store for both, in the fleet's etcd: placement is on
			// as berth serve --store etcd:// has it.
			o.StoreEtcd = EtcdStoreOptions{Endpoints: []string{ports[0]}, ClaimTTL: 2 * time.Second}
		}
		o.AgentCommand, o.AgentEnv = agentOptions()
		return o
	}
	a = startHopServer(t, o(d1))
	if _, err := fleetca.Join(context.Background(), fleetca.JoinOptions{DataDir: d2, Server: "http://" + a.AdminAddr(), Token: ir.Token, Pin: ir.Pin, HostID: "beta"}); err != nil {
		t.Fatal(err)
	}
	b = startHopServer(t, o(d2))
	// Before the servers close (berth leaves replicas running at a stop,
	// for the next start to adopt): none of the test's outlives it.
	t.Cleanup(func() {
		for _, s := range []*Server{a, b} {
			d := s.fleet.Driver("process")
			ins, _ := d.List(context.Background())
			for _, in := range ins {
				d.Stop(context.Background(), in.ID, 0)
			}
		}
	})
	return a, b
}

// agentOptions make the test binary the agent of process replicas
// (testOptions' part for them).
func agentOptions() ([]string, []string) {
	var o Options
	testOptions(&o)
	return o.AgentCommand, o.AgentEnv
}

// replicasOf lists the process replicas s runs of deployment id.
func replicasOf(t *testing.T, s *Server, id string) []vm.Instance {
	t.Helper()
	ins, err := s.fleet.Driver("process").List(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	var out []vm.Instance
	for _, in := range ins {
		if in.Owner.Kind == vm.OwnerDeployment && in.Owner.ID == id && !in.State.Terminal() {
			out = append(out, in)
		}
	}
	return out
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// assignedHost is the host the fleet's scheduler gave deployment id to
// ("" while none).
func assignedHost(t *testing.T, s *Server, id string) string {
	t.Helper()
	as, err := s.fleetHost.m.Assignments(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range as {
		if a.Unit == "deployment/"+id {
			return a.Host
		}
	}
	return ""
}

// TestPlacedVMDeployment: two hosts hold the same vm deployment; the
// scheduler gives it to one, and a request through either host's gateway
// is answered by a replica there, the other host running none. When the
// host that runs it loses its lease, the deployment moves: the survivor
// answers from a replica of its own, and the old host stops its replicas.
func TestPlacedVMDeployment(t *testing.T) {
	t.Run("per-host stores", func(t *testing.T) { testPlaced(t, false) })
	t.Run("shared store", func(t *testing.T) { testPlaced(t, true) })
}

func testPlaced(t *testing.T, shared bool) {
	a, b := startPlacedPair(t, shared)
	byID := map[string]*Server{"alpha": a, "beta": b}
	post := func(spec string) {
		hopPost(t, a, "/deployments", spec)
		if !shared {
			hopPost(t, b, "/deployments", spec)
		}
	}
	post(vmSpec("pl", ""))

	var host string
	waitFor(t, "the scheduler to place pl", func() bool { host = assignedHost(t, a, "pl"); return host != "" })
	runs, other := byID[host], a
	if host == "alpha" {
		other = b
	}
	otherID := "alpha"
	if other == b {
		otherID = "beta"
	}
	c := &http.Client{Timeout: 30 * time.Second}
	for _, s := range []*Server{other, runs, other} {
		var code int
		var body string
		waitFor(t, "pl answered through "+s.ProxyAddr(), func() bool {
			code, body = hopGet(c, "http://"+s.ProxyAddr()+"/x", "pl.test")
			return code == 200
		})
		if !strings.HasPrefix(body, "app ") || !strings.Contains(body, "/x hi") {
			t.Fatalf("pl through %s: %d %q, want the app's answer", s.ProxyAddr(), code, body)
		}
		if n, m := len(replicasOf(t, runs, "pl")), len(replicasOf(t, other, "pl")); n == 0 || m != 0 {
			t.Fatalf("after a request through %s: %s runs %d replicas of pl, %s %d; want some on %s only", s.ProxyAddr(), host, n, otherID, m, host)
		}
		answeredBy(t, body, runs)
	}
	// The other host forwards: it has no pool of pl at all, and still
	// describes it.
	if _, ok := other.fleet.Pool("pl"); ok {
		t.Fatalf("%s has a replica pool of pl, which runs on %s", otherID, host)
	}
	if code, body := hopGet(c, "http://"+other.AdminAddr()+"/deployments/pl", ""); code != 200 || !strings.Contains(body, `"pl"`) {
		t.Fatalf("GET /deployments/pl on %s: %d %s", otherID, code, body)
	}

	// A fence (the host's lease may have lapsed) stops pl's replicas at
	// once; the assignment still names the host, so the next request
	// starts one there again.
	runs.fleetHost.fenced(runs.log, nil)
	waitFor(t, "the fence to stop pl's replicas on "+host, func() bool { return len(replicasOf(t, runs, "pl")) == 0 })
	waitFor(t, "pl answered again after the fence", func() bool {
		code, body := hopGet(c, "http://"+other.ProxyAddr()+"/f", "pl.test")
		return code == 200 && strings.Contains(body, "/f hi")
	})
	if n, m := len(replicasOf(t, runs, "pl")), len(replicasOf(t, other, "pl")); n == 0 || m != 0 {
		t.Fatalf("after the fence: %s runs %d replicas of pl, %s %d", host, n, otherID, m)
	}

	// A deployment no host has room for is never placed: both hosts
	// refuse its requests, saying it is being placed, and run none.
	hs, err := a.fleetHost.m.Hosts(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if slices.IndexFunc(hs, func(h etcdfleet.HostView) bool { return h.Capacity.CPUs >= 8 }) < 0 {
		post(bigSpec())
		waitFor(t, "big to be unplaced", func() bool {
			un, err := a.fleetHost.m.Unplaced(ctxT(t))
			return err == nil && slices.ContainsFunc(un, func(u etcdfleet.UnplacedUnit) bool { return u.Unit == "deployment/big" })
		})
		for _, s := range []*Server{a, b} {
			req, _ := http.NewRequest("GET", "http://"+s.ProxyAddr()+"/", nil)
			req.Host = "big.test"
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(body), "being placed") {
				t.Fatalf("big through %s: %d (Retry-After %q) %q, want 503 being placed", s.ProxyAddr(), resp.StatusCode, resp.Header.Get("Retry-After"), body)
			}
			if n := len(replicasOf(t, s, "big")); n != 0 {
				t.Fatalf("%s runs %d replicas of the unplaced big", s.fleetHost.m.ID(), n)
			}
		}
	} else {
		t.Log("this machine has room for an xlarge replica: the unplaced deployment is not tried")
	}

	// The host that runs pl loses its lease (as when cut off from etcd).
	cli := a.fleetHost.cli
	g, err := cli.Get(ctxT(t), etcdfleet.DefaultPrefix+"hosts/"+host)
	if err != nil || len(g.Kvs) != 1 || g.Kvs[0].Lease == 0 {
		t.Fatalf("%s's host key: %v %v", host, g, err)
	}
	if _, err := cli.Revoke(ctxT(t), clientv3.LeaseID(g.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "pl to move to "+otherID, func() bool { return assignedHost(t, a, "pl") == otherID })
	var code int
	var body string
	waitFor(t, "pl answered through the survivor", func() bool {
		code, body = hopGet(c, "http://"+other.ProxyAddr()+"/y", "pl.test")
		return code == 200
	})
	if !strings.Contains(body, "/y hi") {
		t.Fatalf("pl through the survivor: %d %q", code, body)
	}
	if n := len(replicasOf(t, other, "pl")); n == 0 {
		t.Fatalf("pl answered through %s, which runs no replica of it", otherID)
	}
	answeredBy(t, body, other)
	waitFor(t, host+" to stop its replicas of pl", func() bool { return len(replicasOf(t, runs, "pl")) == 0 })
	if _, ok := runs.fleet.Pool("pl"); ok {
		t.Fatalf("%s still has a replica pool of pl, which moved to %s", host, otherID)
	}
	// Through the old host too, once it follows: it forwards to the
	// survivor, and starts none of its own.
	waitFor(t, "pl answered through "+host, func() bool {
		code, body = hopGet(c, "http://"+runs.ProxyAddr()+"/z", "pl.test")
		return code == 200
	})
	if n := len(replicasOf(t, runs, "pl")); n != 0 {
		t.Fatalf("%s runs %d replicas of pl after it moved", host, n)
	}
	answeredBy(t, body, other)

	// Deleted: its unit is withdrawn, its assignment goes, and no host
	// runs it.
	for _, s := range []*Server{other, runs} {
		if s == runs && shared {
			break
		}
		req, _ := http.NewRequest("DELETE", "http://"+s.AdminAddr()+"/deployments/pl", nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 204 && resp.StatusCode != 200 {
			t.Fatalf("DELETE /deployments/pl: %d", resp.StatusCode)
		}
	}
	waitFor(t, "pl's assignment to go", func() bool { return assignedHost(t, a, "pl") == "" })
	waitFor(t, "no host to run pl", func() bool { return len(replicasOf(t, other, "pl")) == 0 && len(replicasOf(t, runs, "pl")) == 0 })
}

// bigSpec is a vm deployment of size xlarge (8 CPUs).
func bigSpec() string {
	return `{"id":"big","routes":[{"host":"big.test"}],"vm":{"driver":"process","port":8080,"size_class":"xlarge","start_command":` + jsonString(appCommand()) + `}}`
}

// answeredBy checks that the test app's answer body ("app HOSTNAME ...")
// came from one of s's replicas of pl, when the app's host name is its
// replica's (a sandboxed process replica has a UTS namespace of its own).
func answeredBy(t *testing.T, body string, s *Server) {
	t.Helper()
	name, _, _ := strings.Cut(strings.TrimPrefix(body, "app "), " ")
	if !strings.HasPrefix(name, "berth-pl-") {
		return // an unsandboxed replica: the machine's host name
	}
	for _, in := range replicasOf(t, s, "pl") {
		if vm.Hostname(in.ID) == name {
			return
		}
	}
	t.Fatalf("answered by replica %s, not one of %s's", name, s.fleetHost.m.ID())
}

// TestUnitRequest: a vm deployment's unit asks for its driver and image,
// and for its size class's CPU and memory when it names one.
func TestUnitRequest(t *testing.T) {
	s := &apitype.DeploymentSpec{ID: "web", VM: &apitype.VmSpec{Driver: apitype.DriverProcess, Image: "app:1"}}
	r := unitRequest(s)
	if r.Unit != "deployment/web" || r.Group != "web" || r.Driver != "process" || r.Image != "app:1" || r.CPUMillis != 0 || r.MemoryBytes != 0 {
		t.Fatalf("without a size class: %+v", r)
	}
	s.VM.SizeClass = apitype.SizeMedium
	if r := unitRequest(s); r.CPUMillis != 2000 || r.MemoryBytes != 2048<<20 {
		t.Fatalf("medium: %+v, want 2 CPUs and 2 GiB", r)
	}
}
