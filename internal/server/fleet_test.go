package server

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/computer"
	"github.com/berth-dev/berth/internal/fleet/etcdtest"
)

func fleetHostsOf(t *testing.T, h *harness, hdr ...string) apitype.FleetHosts {
	t.Helper()
	r := h.do("GET", "/fleet/hosts", "", "", hdr...)
	if r.code != 200 {
		t.Fatalf("GET /fleet/hosts: %d %s", r.code, r.body)
	}
	var out apitype.FleetHosts
	if err := json.Unmarshal(r.body, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func hostIDsOf(hs apitype.FleetHosts) string {
	var ids []string
	for _, h := range hs.Hosts {
		ids = append(ids, h.ID+":"+h.State)
	}
	return strings.Join(ids, " ")
}

// waitForCond polls cond until it holds, failing after a generous bound.
func waitForCond(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// TestFleetHosts: two berths on one etcd see each other in GET
// /fleet/hosts; a cordon through one shows in the other's list and stops
// Computer starts on the cordoned host; the fleet's one Computer slot is
// held by one host at a time (429 with Retry-After on the other, or a
// queued start that runs once the slot is free); a
// namespace token is refused; a berth that stops leaves the list and frees
// its slot.
func TestFleetHosts(t *testing.T) {
	c := etcdtest.Start(t, 1)
	fleet := func(id string) func(*Options) {
		return func(o *Options) {
			o.Fleet = FleetOptions{Endpoints: c.Endpoints(), HostID: id, Slots: 1, LeaseTTL: 2 * time.Second}
		}
	}
	a := startWith(t, "", fleet("alpha"))
	b := startWith(t, "", fleet("beta"))

	hs := fleetHostsOf(t, a)
	if hostIDsOf(hs) != "alpha:active beta:active" || hs.Self != "alpha" || hs.Slots != (apitype.FleetSlots{Held: 0, Limit: 1}) {
		t.Fatalf("hosts through alpha: %+v", hs)
	}
	if hs.Hosts[1].Address != strings.TrimPrefix(b.admin, "http://") || hs.Hosts[1].StartedAt == 0 || hs.Hosts[1].Capacity.CPUs < 1 || len(hs.Hosts[1].Drivers) == 0 {
		t.Fatalf("beta as listed: %+v", hs.Hosts[1])
	}
	if got := fleetHostsOf(t, b); hostIDsOf(got) != "alpha:active beta:active" || got.Self != "beta" {
		t.Fatalf("hosts through beta: %+v", got)
	}

	// One fleet slot: alpha's Computer takes it, beta's start is told to
	// come back later, through the Computer API.
	ctx := context.Background()
	if _, err := a.s.computers.Create(ctx, computer.CreateRequest{ID: "one", Start: true}); err != nil {
		t.Fatal(err)
	}
	if r := b.json("POST", "/computers", `{"id":"two","backings":[{"kind":"process"}]}`); r.code != 201 && r.code != 200 {
		t.Fatalf("create two: %d %s", r.code, r.body)
	}
	r := b.json("POST", "/computers/two/start", `{}`)
	if r.code != 429 || r.header.Get("Retry-After") != "5" {
		t.Fatalf("start on a full fleet: %d %v %s", r.code, r.header, r.body)
	}
	if got := fleetHostsOf(t, b); got.Slots.Held != 1 || got.Hosts[0].Slots != 1 || got.Hosts[1].Slots != 0 {
		t.Fatalf("slots while alpha holds one: %+v", got)
	}
	// With wait the start queues on beta, and starts by itself once
	// alpha's Computer gives the fleet slot back.
	if r := b.json("POST", "/computers/two/start?wait=true", `{}`); r.code != 202 || !strings.Contains(string(r.body), `"queued"`) {
		t.Fatalf("start with wait on a full fleet: %d %s", r.code, r.body)
	}
	if err := a.s.computers.Stop(ctx, "one"); err != nil {
		t.Fatal(err)
	}
	waitForCond(t, "beta's queued Computer to run", func() bool {
		c, err := b.s.computers.Get(ctx, "two")
		return err == nil && c.State.State == computer.StateRunning
	})
	var ce *computer.CapacityError
	if _, err := a.s.computers.Start(ctx, "one", false); !errors.As(err, &ce) || ce.Limit != 1 {
		t.Fatalf("alpha's start while beta holds the slot: %v", err)
	}
	if err := b.s.computers.Stop(ctx, "two"); err != nil {
		t.Fatal(err)
	}

	// Cordon beta through alpha: beta lists it too, and starts nothing.
	if r := a.do("POST", "/fleet/hosts/beta/cordon", "", ""); r.code != 200 || !strings.Contains(string(r.body), `"state":"cordoned"`) {
		t.Fatalf("cordon: %d %s", r.code, r.body)
	}
	if got := fleetHostsOf(t, b); hostIDsOf(got) != "alpha:active beta:cordoned" || got.Hosts[1].StateSince == 0 {
		t.Fatalf("hosts after the cordon: %+v", got)
	}
	if r := b.json("POST", "/computers/two/start", `{}`); r.code != 503 || !strings.Contains(string(r.body), "cordoned") {
		t.Fatalf("start on a cordoned host: %d %s", r.code, r.body)
	}
	if r := a.do("POST", "/fleet/hosts/beta/drain", "", ""); r.code != 200 || !strings.Contains(string(r.body), `"state":"draining"`) {
		t.Fatalf("drain: %d %s", r.code, r.body)
	}
	if r := b.do("POST", "/fleet/hosts/beta/uncordon", "", ""); r.code != 200 || !strings.Contains(string(r.body), `"state":"active"`) {
		t.Fatalf("uncordon: %d %s", r.code, r.body)
	}
	if r := a.do("POST", "/fleet/hosts/gamma/cordon", "", ""); r.code != 404 {
		t.Fatalf("cordon of an unknown host: %d %s", r.code, r.body)
	}

	// A namespace-confined token gets the fleet-wide 403 on every route.
	var minted apitype.MintedToken
	if r := a.json("POST", "/tokens", `{"name":"ns","admin":"admin","namespace":"team-a","deployments":[]}`); r.code != 201 {
		t.Fatalf("mint: %d %s", r.code, r.body)
	} else if err := json.Unmarshal(r.body, &minted); err != nil {
		t.Fatal(err)
	}
	for _, route := range []string{"GET /fleet/hosts", "POST /fleet/hosts/beta/cordon", "POST /fleet/hosts/gamma/uncordon"} {
		method, path, _ := strings.Cut(route, " ")
		if r := a.do(method, path, "", "", "Authorization", "Bearer "+minted.Token); r.code != 403 || !strings.Contains(errMsg(t, r), "fleet-wide") {
			t.Fatalf("%s with a namespace token: %d %s", route, r.code, r.body)
		}
	}
	if got := fleetHostsOf(t, a); hostIDsOf(got) != "alpha:active beta:active" {
		t.Fatalf("the refused cordon changed the hosts: %+v", got)
	}

	// beta takes the slot again and stops cleanly: it leaves the list and
	// its slot is free for alpha.
	if _, err := b.s.computers.Start(ctx, "two", false); err != nil {
		t.Fatal(err)
	}
	b.stop()
	if got := fleetHostsOf(t, a); hostIDsOf(got) != "alpha:active" || got.Slots.Held != 0 {
		t.Fatalf("hosts after beta stopped: %+v", got)
	}
	if _, err := a.s.computers.Start(ctx, "one", false); err != nil {
		t.Fatalf("alpha's start after beta left: %v", err)
	}
}

// TestNoFleet: without --etcd the fleet routes answer 409
// fleet_not_configured, and fleet flags alone are refused.
func TestNoFleet(t *testing.T) {
	h := start(t, "")
	for _, route := range []string{"GET /fleet/hosts", "POST /fleet/hosts/x/cordon"} {
		method, path, _ := strings.Cut(route, " ")
		r := h.do(method, path, "", "")
		var env struct{ Error, Code string }
		json.Unmarshal(r.body, &env)
		if r.code != 409 || env.Code != "fleet_not_configured" || !strings.Contains(env.Error, "--etcd") {
			t.Fatalf("%s without a fleet: %d %s", route, r.code, r.body)
		}
	}
	if h.s.fleetHost != nil {
		t.Fatal("a fleet member without --etcd")
	}
	// The fleet views too, to a caller with a credential.
	var minted apitype.MintedToken
	if r := h.json("POST", "/tokens", `{"name":"v","admin":"admin","deployments":["*"]}`); r.code != 201 || json.Unmarshal(r.body, &minted) != nil {
		t.Fatalf("mint: %d %s", r.code, r.body)
	}
	for _, route := range []string{"GET /fleet", "GET /fleet/deployments", "GET /fleet/gateways/x/metrics", "GET /fleet/network", "GET /services", "GET /control-plane/config", "PUT /control-plane/config"} {
		method, path, _ := strings.Cut(route, " ")
		r := h.json(method, path, `{"expected_revision":0,"config":{}}`, "Authorization", "Bearer "+minted.Token)
		var env struct{ Error, Code string }
		json.Unmarshal(r.body, &env)
		if r.code != 409 || env.Code != "fleet_not_configured" {
			t.Fatalf("%s without a fleet: %d %s", route, r.code, r.body)
		}
	}
	for _, f := range []FleetOptions{{Slots: 3}, {HostID: "x"}, {Dev: true, Endpoints: []string{"http://127.0.0.1:1"}}, {Endpoints: []string{"http://127.0.0.1:1"}, Slots: -1}} {
		o := Options{DataDir: t.TempDir(), ProxyAddr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0", Fleet: f}
		testOptions(&o)
		if s, err := New(context.Background(), o); err == nil {
			s.closeStore()
			t.Fatalf("fleet options %+v were accepted", f)
		}
	}
}

// TestFleetDevMode: --etcd-dev embeds an etcd member in <data-dir>/etcd;
// the berth registers itself under the host id it keeps in the data dir,
// and after a restart it has the same id, and etcd still holds the state
// it was given.
func TestFleetDevMode(t *testing.T) {
	ports, err := freeTCPPorts(2)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	dev := func(o *Options) {
		o.Fleet = FleetOptions{Dev: true, DevClientURL: "http://127.0.0.1:" + ports[0], DevPeerURL: "http://127.0.0.1:" + ports[1], Slots: 2}
	}
	h := startWith(t, dir, dev)
	hs := fleetHostsOf(t, h)
	if len(hs.Hosts) != 1 || hs.Hosts[0].ID != hs.Self || hs.Slots.Limit != 2 {
		t.Fatalf("hosts in dev mode: %+v", hs)
	}
	id := hs.Self
	if b, err := os.ReadFile(filepath.Join(dir, "host-id")); err != nil || strings.TrimSpace(string(b)) != id {
		t.Fatalf("host-id file: %q %v, want %q", b, err, id)
	}
	if r := h.do("POST", "/fleet/hosts/"+id+"/cordon", "", ""); r.code != 200 {
		t.Fatalf("cordon: %d %s", r.code, r.body)
	}
	h.stop()
	if _, err := os.Stat(filepath.Join(dir, "etcd", "member")); err != nil {
		t.Fatalf("the dev member's data: %v", err)
	}
	h = startWith(t, dir, dev)
	if hs := fleetHostsOf(t, h); hostIDsOf(hs) != id+":cordoned" {
		t.Fatalf("hosts after a restart: %+v", hs)
	}
}

func freeTCPPorts(n int) ([]string, error) {
	var out []string
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		out = append(out, strconv.Itoa(l.Addr().(*net.TCPAddr).Port))
	}
	return out, nil
}

// TestFleetSlotAfterRestart: a berth that stops leaves the fleet (its
// lease revoked, its Computers' fleet slots freed) while its Computers run
// on; started again, it re-adopts them and takes their slots again.
func TestFleetSlotAfterRestart(t *testing.T) {
	c := etcdtest.Start(t, 1)
	dir := t.TempDir()
	fleet := func(o *Options) {
		o.Fleet = FleetOptions{Endpoints: c.Endpoints(), HostID: "alpha", Slots: 2, LeaseTTL: 2 * time.Second}
	}
	h := startWith(t, dir, fleet)
	ctx := context.Background()
	if _, err := h.s.computers.Create(ctx, computer.CreateRequest{ID: "desk", Start: true}); err != nil {
		t.Fatal(err)
	}
	if hs := fleetHostsOf(t, h); hs.Slots.Held != 1 || hs.Hosts[0].Slots != 1 {
		t.Fatalf("slots while desk runs: %+v", hs)
	}
	h.stop()
	cli := c.Client(t)
	g, err := cli.Get(ctx, "/berth/fleet/slots/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || g.Count != 0 {
		t.Fatalf("fleet slots after alpha stopped: %v %v, want 0", g, err)
	}
	h = startWith(t, dir, fleet)
	got, err := h.s.computers.Get(ctx, "desk")
	if err != nil || got.State.State != computer.StateRunning {
		t.Fatalf("desk after the restart: %+v %v", got, err)
	}
	if hs := fleetHostsOf(t, h); hs.Slots.Held != 1 || hs.Hosts[0].Slots != 1 {
		t.Fatalf("slots after the restart: %+v", hs)
	}
	if err := h.s.computers.Stop(ctx, "desk"); err != nil {
		t.Fatal(err)
	}
	if hs := fleetHostsOf(t, h); hs.Slots.Held != 0 {
		t.Fatalf("slots after desk stopped: %+v", hs)
	}
}
