package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/fleet/etcdtest"
	"github.com/berth-dev/berth/internal/fleet/fleetnet"
)

// beBerth, set in a process's environment, makes this test binary run as
// berth itself (TestMain calls main): what the fleet tests start in each
// host's namespace.
const beBerth = "BERTH_TEST_BE_BERTH"

const fleetPassword = "fleet-test-password"

// fleetHost is one berth serve in a namespace of its own.
type fleetHost struct {
	id    string
	ns    *fleetnet.Host
	dir   string // its data dir and log, kept across restarts
	args  []string
	cmd   *exec.Cmd
	done  chan struct{} // closed when cmd has exited
	admin string        // http://ip:9090
	proxy string        // http://ip:6188
	// client reaches the host from inside its namespace (through its
	// partition, too).
	client *http.Client
}

// startFleetHost runs berth serve as host id of the fleet on etcd, in ns.
func startFleetHost(t *testing.T, ns *fleetnet.Host, id string, endpoints []string, extra ...string) *fleetHost {
	t.Helper()
	h := newFleetHost(t, ns, id, endpoints, extra...)
	h.start(t)
	return h
}

// newFleetHost is startFleetHost's host, not started yet (its data dir,
// <dir>/data, not made).
func newFleetHost(t *testing.T, ns *fleetnet.Host, id string, endpoints []string, extra ...string) *fleetHost {
	t.Helper()
	h := &fleetHost{id: id, ns: ns, dir: t.TempDir(),
		admin: "http://" + ns.IP + ":9090", proxy: "http://" + ns.IP + ":6188", client: ns.Client()}
	h.args = append([]string{"serve",
		"--proxy-addr", ns.IP + ":6188", "--admin-addr", ns.IP + ":9090",
		"--data-dir", filepath.Join(h.dir, "data"), "--egress-addr", "off", "--no-host-setup",
		"--etcd", strings.Join(endpoints, ","), "--host-id", id,
	}, extra...)
	t.Cleanup(func() {
		if h.cmd != nil {
			h.cmd.Process.Kill()
			<-h.done
		}
		if t.Failed() {
			b, _ := os.ReadFile(h.logPath())
			t.Logf("log of %s:\n%s", id, b)
		}
	})
	return h
}

func (h *fleetHost) logPath() string { return filepath.Join(h.dir, "berth.log") }

// start runs the host's berth (again, on the same data dir, appending to
// its log) and waits until it listens.
func (h *fleetHost) start(t *testing.T) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	lf, err := os.OpenFile(h.logPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lf.Close() })
	before, _ := os.ReadFile(h.logPath())
	h.cmd = h.ns.Command(exe, h.args...)
	h.cmd.Env = append(os.Environ(), beBerth+"=1", "BERTH_ADMIN_PASSWORD="+fleetPassword)
	h.cmd.Stdout, h.cmd.Stderr = lf, lf
	if err := h.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	h.done = done
	go func(cmd *exec.Cmd) { cmd.Wait(); close(done) }(h.cmd)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		b, _ := os.ReadFile(h.logPath())
		if bytes.Contains(b[len(before):], []byte("berth listening")) {
			return
		}
		select {
		case <-done:
			t.Fatalf("berth %s exited before listening:\n%s", h.id, b)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("berth %s did not listen:\n%s", h.id, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop ends the host's berth as an operator does (SIGTERM: it drains) and
// waits for it to exit.
func (h *fleetHost) stop(t *testing.T) {
	t.Helper()
	h.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-h.done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("berth %s did not stop on SIGTERM", h.id)
	}
	h.cmd = nil
}

// do sends an admin request as the operator, from inside the host's
// namespace.
func (h *fleetHost) do(t *testing.T, method, path, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, h.admin+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.SetBasicAuth("admin", fleetPassword)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// hostIDs is GET /fleet/hosts through h: the live hosts' ids.
func (h *fleetHost) hostIDs(t *testing.T) string {
	t.Helper()
	code, b := h.do(t, "GET", "/fleet/hosts", "")
	if code != 200 {
		return fmt.Sprintf("%d %s", code, b)
	}
	var v struct{ Hosts []struct{ ID string } }
	json.Unmarshal(b, &v)
	var ids []string
	for _, x := range v.Hosts {
		ids = append(ids, x.ID)
	}
	return strings.Join(ids, " ")
}

// fleetDeployments is GET /fleet/deployments through h: id@hosts each.
func (h *fleetHost) fleetDeployments(t *testing.T) string {
	t.Helper()
	code, b := h.do(t, "GET", "/fleet/deployments", "")
	if code != 200 {
		return fmt.Sprintf("%d %s", code, b)
	}
	var v struct {
		Deployments []struct {
			ID    string
			Hosts []string
		}
	}
	json.Unmarshal(b, &v)
	var out []string
	for _, d := range v.Deployments {
		out = append(out, d.ID+"@"+strings.Join(d.Hosts, ","))
	}
	return strings.Join(out, " ")
}

// running is how many of h's Computers are running, as h lists them.
func (h *fleetHost) running(t *testing.T) int {
	t.Helper()
	n := 0
	for _, state := range h.computers(t) {
		if state == "running" {
			n++
		}
	}
	return n
}

// computers lists h's Computers: id → state.
func (h *fleetHost) computers(t *testing.T) map[string]string {
	t.Helper()
	code, b := h.do(t, "GET", "/computers", "")
	if code != 200 {
		t.Fatalf("GET /computers on %s: %d %s", h.id, code, b)
	}
	var v struct {
		Computers []struct {
			ID    string
			State struct{ State string }
		}
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, c := range v.Computers {
		out[c.ID] = c.State.State
	}
	return out
}

// startSome starts up to n stopped Computers of hs, taking turns, and
// returns how many started (200); a full fleet (429) ends the round.
func startSome(t *testing.T, n int, hs ...*fleetHost) int {
	t.Helper()
	got := 0
	for _, h := range hs {
		for id, state := range h.computers(t) {
			if got == n {
				return got
			}
			if state == "running" {
				continue
			}
			code, _ := h.do(t, "POST", "/computers/"+id+"/start", "{}")
			if code == 200 {
				got++
			} else if code == 429 {
				break
			}
		}
	}
	return got
}

// stopSome stops up to n running Computers of h.
func stopSome(t *testing.T, n int, h *fleetHost) int {
	t.Helper()
	got := 0
	for id, state := range h.computers(t) {
		if got == n {
			break
		}
		if state == "running" {
			if code, b := h.do(t, "POST", "/computers/"+id+"/stop", "{}"); code != 200 {
				t.Fatalf("stop %s on %s: %d %s", id, h.id, code, b)
			}
			got++
		}
	}
	return got
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestFleetThreeHosts runs a fleet as it runs on machines: three berths,
// each in a network namespace of its own on a bridge, on a 3-member etcd
// cluster, with a fleet-wide limit of 10 Computers.
//   - 100 concurrent Computer starts spread over the three hosts: exactly
//     10 run.
//   - Every gateway's fleet view shows every host's deployment.
//   - Under continuous load through every gateway, one host's berth and
//     everything it runs are killed (kill -9): the other gateways answer
//     every request, the dead host leaves the list and the fleet view, and
//     its Computers' slots go back to the fleet.
//   - A host is partitioned: it stops its own Computers before the fleet
//     hands their slots out, so the fleet never runs more than 10 (counted
//     on every host, the partitioned one too, through its namespace); healed,
//     it registers again.
//   - etcd's leader is stopped: writes pause and resume, and no
//     acknowledged Computer start is lost.
func TestFleetThreeHosts(t *testing.T) {
	nt := fleetnet.New(t, 3)
	etcd := etcdtest.Start(t, 3, etcdtest.Options{Host: nt.Gateway})
	// An upstream for each host's static deployment, on the test's side of
	// the bridge.
	up, err := net.Listen("tcp", nt.Gateway+":0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(up)
	t.Cleanup(func() { srv.Close() })

	var hosts []*fleetHost
	for i, ns := range nt.Hosts {
		hosts = append(hosts, startFleetHost(t, ns, fmt.Sprintf("h%d", i), etcd.Endpoints(), "--fleet-slots", "10"))
	}
	for _, h := range hosts {
		waitUntil(t, h.id+" to list the three hosts", func() bool { return h.hostIDs(t) == "h0 h1 h2" })
	}
	for _, h := range hosts {
		spec := fmt.Sprintf(`{"id":"web-%s","routes":[{"host":"web-%s.test"}],"upstreams":["%s"]}`, h.id, h.id, up.Addr())
		if code, b := h.do(t, "POST", "/deployments", spec); code != 201 {
			t.Fatalf("deployment on %s: %d %s", h.id, code, b)
		}
	}

	// Every gateway sees every host's deployment (the hosts' reports).
	for _, h := range hosts {
		waitUntil(t, h.id+"'s fleet view to show every deployment", func() bool {
			return h.fleetDeployments(t) == "web-h0@h0 web-h1@h1 web-h2@h2"
		})
	}

	// 100 concurrent starts against a fleet-wide limit of 10.
	var started, refused atomic.Int32
	var wg sync.WaitGroup
	for i := range 100 {
		h := hosts[i%3]
		id := fmt.Sprintf("c%02d", i)
		if code, b := h.do(t, "POST", "/computers", `{"id":"`+id+`","backings":[{"kind":"process"}]}`); code != 201 {
			t.Fatalf("create %s on %s: %d %s", id, h.id, code, b)
		}
		wg.Go(func() {
			code, b := h.do(t, "POST", "/computers/"+id+"/start", "{}")
			switch code {
			case 200:
				started.Add(1)
			case 429:
				refused.Add(1)
			default:
				t.Errorf("start %s on %s: %d %s", id, h.id, code, b)
			}
		})
	}
	wg.Wait()
	total := func() int { return hosts[0].running(t) + hosts[1].running(t) + hosts[2].running(t) }
	if started.Load() != 10 || refused.Load() != 90 || total() != 10 {
		t.Fatalf("100 starts against a limit of 10: %d started, %d refused, %d running (%d %d %d)",
			started.Load(), refused.Load(), total(), hosts[0].running(t), hosts[1].running(t), hosts[2].running(t))
	}

	// Continuous load through every gateway; kill -9 host 2.
	type tally struct{ ok, failed atomic.Int64 }
	var tallies [3]tally
	ctx, stopLoad := context.WithCancel(context.Background())
	var load sync.WaitGroup
	for i, h := range hosts {
		for range 2 {
			load.Go(func() {
				c := h.ns.Client()
				for ctx.Err() == nil {
					req, _ := http.NewRequestWithContext(ctx, "GET", h.proxy+"/", nil)
					req.Host = "web-" + h.id + ".test"
					resp, err := c.Do(req)
					if ctx.Err() != nil {
						return
					}
					if err == nil {
						b, _ := io.ReadAll(resp.Body)
						resp.Body.Close()
						if resp.StatusCode == 200 && string(b) == "ok" {
							tallies[i].ok.Add(1)
							continue
						}
					}
					tallies[i].failed.Add(1)
					time.Sleep(10 * time.Millisecond)
				}
			})
		}
	}
	waitUntil(t, "load through every gateway", func() bool {
		return tallies[0].ok.Load() > 50 && tallies[1].ok.Load() > 50 && tallies[2].ok.Load() > 50
	})
	onDead := hosts[2].running(t)
	if n := nt.Hosts[2].KillAll(); n == 0 {
		t.Fatal("nothing was running in host 2's namespace")
	}
	waitUntil(t, "the dead host to leave the list", func() bool { return hosts[0].hostIDs(t) == "h0 h1" })
	waitUntil(t, "the dead host's deployment to leave the fleet view", func() bool {
		return hosts[1].fleetDeployments(t) == "web-h0@h0 web-h1@h1"
	})
	before := [2]int64{tallies[0].ok.Load(), tallies[1].ok.Load()}
	waitUntil(t, "more load through the live gateways", func() bool {
		return tallies[0].ok.Load() > before[0]+50 && tallies[1].ok.Load() > before[1]+50
	})
	stopLoad()
	load.Wait()
	if f0, f1 := tallies[0].failed.Load(), tallies[1].failed.Load(); f0 != 0 || f1 != 0 {
		t.Fatalf("requests through the live gateways failed while host 2 died: %d on h0, %d on h1", f0, f1)
	}
	// The dead host's slots are the fleet's again: as many new starts
	// succeed on the live hosts.
	if got := startSome(t, onDead, hosts[0], hosts[1]); got != onDead || hosts[0].running(t)+hosts[1].running(t) != 10 {
		t.Fatalf("after host 2 died with %d running: %d started again, %d running", onDead, got, hosts[0].running(t)+hosts[1].running(t))
	}

	// Partition host 1: it stops its Computers before their slots are
	// handed out; host 0 fills the fleet again; never more than 10 run,
	// counting the partitioned host through its namespace.
	onPart := hosts[1].running(t)
	if onPart == 0 {
		t.Fatal("host 1 runs no Computer to partition")
	}
	nt.Hosts[1].Partition()
	got := 0
	waitUntil(t, "host 0 to start what host 1 held", func() bool {
		got += startSome(t, onPart-got, hosts[0])
		if n := hosts[0].running(t) + hosts[1].running(t); n > 10 {
			t.Fatalf("%d Computers run across the fleet during the partition", n)
		}
		return got == onPart
	})
	if n := hosts[1].running(t); n != 0 {
		t.Fatalf("the partitioned host still runs %d Computers after the fleet handed their slots out", n)
	}
	nt.Hosts[1].Heal()
	waitUntil(t, "host 1 to register again", func() bool { return hosts[0].hostIDs(t) == "h0 h1" })
	if n := hosts[0].running(t) + hosts[1].running(t); n != 10 {
		t.Fatalf("%d Computers run after the heal, want 10", n)
	}

	// Stop etcd's leader: starts pause, then go through; none acknowledged
	// is lost. Two of host 0's Computers stop first, and two of host 1's
	// start while the old leader is gone.
	if n := stopSome(t, 2, hosts[0]); n != 2 {
		t.Fatalf("stopped %d of host 0's Computers, want 2", n)
	}
	leader := etcd.Leader()
	if leader < 0 {
		t.Fatal("etcd has no leader")
	}
	etcd.Members[leader].Close()
	acked := 0
	waitUntil(t, "two starts through host 1 with the old leader gone", func() bool {
		acked += startSome(t, 2-acked, hosts[1])
		return acked == 2
	})
	if n := hosts[0].running(t) + hosts[1].running(t); n != 10 {
		t.Fatalf("%d Computers run after the leader change, want 10", n)
	}
	var slots struct{ Slots struct{ Held, Limit int } }
	_, b := hosts[0].do(t, "GET", "/fleet/hosts", "")
	json.Unmarshal(b, &slots)
	if slots.Slots.Held != 10 || slots.Slots.Limit != 10 {
		t.Fatalf("the fleet's slots after the leader change: %+v (%s)", slots.Slots, b)
	}
}

// TestFleetRollingUpgrade restarts berth on one host after another, as an
// upgrade does, under continuous load through a third host whose
// discovery-backed deployment is served by the two: each host is drained
// first (its service members drain, so the front stops sending to it),
// stopped with SIGTERM, started again on its data dir and uncordoned. No
// request through the front fails, and both hosts serve again at the end.
func TestFleetRollingUpgrade(t *testing.T) {
	nt := fleetnet.New(t, 3)
	etcd := etcdtest.Start(t, 1, etcdtest.Options{Host: nt.Gateway})
	var hosts []*fleetHost
	for i, ns := range nt.Hosts {
		hosts = append(hosts, startFleetHost(t, ns, fmt.Sprintf("h%d", i), etcd.Endpoints()))
	}
	for i, h := range hosts[1:] {
		name := fmt.Sprintf("h%d", i+1)
		up, err := net.Listen("tcp", nt.Gateway+":0")
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, name) }), ReadHeaderTimeout: 5 * time.Second}
		go srv.Serve(up)
		t.Cleanup(func() { srv.Close() })
		spec := fmt.Sprintf(`{"id":"api","routes":[{"host":"api.test"}],"upstreams":["%s"]}`, up.Addr())
		if code, b := h.do(t, "POST", "/deployments", spec); code != 201 {
			t.Fatalf("api on %s: %d %s", h.id, code, b)
		}
	}
	front := hosts[0]
	if code, b := front.do(t, "POST", "/deployments", `{"id":"front","routes":[{"host":"api.test"}],"discovery":{"service_id":"api"}}`); code != 201 {
		t.Fatalf("front: %d %s", code, b)
	}
	// members is front's discovery status: peer → draining, for h1 and h2.
	members := func() map[string]bool {
		code, b := front.do(t, "GET", "/deployments/front/discovery-status", "")
		if code != 200 {
			t.Fatalf("discovery status: %d %s", code, b)
		}
		var ds struct {
			Upstreams []struct {
				Peer     string
				Draining bool
			}
		}
		json.Unmarshal(b, &ds)
		out := map[string]bool{}
		for _, u := range ds.Upstreams {
			out[u.Peer] = u.Draining
		}
		return out
	}
	peer := func(h *fleetHost) string { return strings.TrimPrefix(h.proxy, "http://") }
	waitUntil(t, "front to see both api hosts", func() bool {
		m := members()
		d1, ok1 := m[peer(hosts[1])]
		d2, ok2 := m[peer(hosts[2])]
		return ok1 && ok2 && !d1 && !d2
	})

	var mu sync.Mutex
	served := map[string]int{}
	var failed atomic.Int64
	var lastErr atomic.Value
	ctx, stopLoad := context.WithCancel(context.Background())
	var load sync.WaitGroup
	for range 4 {
		load.Go(func() {
			c := front.ns.Client()
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, "GET", front.proxy+"/", nil)
				req.Host = "api.test"
				resp, err := c.Do(req)
				if ctx.Err() != nil {
					return
				}
				if err != nil {
					failed.Add(1)
					lastErr.Store(err.Error())
					continue
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					failed.Add(1)
					lastErr.Store(fmt.Sprintf("%d %s", resp.StatusCode, b))
					continue
				}
				mu.Lock()
				served[string(b)]++
				mu.Unlock()
			}
		})
	}
	count := func(name string) int { mu.Lock(); defer mu.Unlock(); return served[name] }
	waitUntil(t, "load served by both hosts", func() bool { return count("h1") > 20 && count("h2") > 20 })

	for _, h := range hosts[1:] {
		if code, b := front.do(t, "POST", "/fleet/hosts/"+h.id+"/drain", ""); code != 200 {
			t.Fatalf("drain %s: %d %s", h.id, code, b)
		}
		waitUntil(t, "front to see "+h.id+" draining", func() bool { d, ok := members()[peer(h)]; return !ok || d })
		h.stop(t)
		h.start(t)
		waitUntil(t, h.id+" back in the list", func() bool { return strings.Contains(front.hostIDs(t), h.id) })
		if code, b := front.do(t, "POST", "/fleet/hosts/"+h.id+"/uncordon", ""); code != 200 {
			t.Fatalf("uncordon %s: %d %s", h.id, code, b)
		}
		waitUntil(t, "front to send to "+h.id+" again", func() bool { d, ok := members()[peer(h)]; return ok && !d })
		n := count(h.id)
		waitUntil(t, h.id+" serving again", func() bool { return count(h.id) > n+20 })
	}
	stopLoad()
	load.Wait()
	if n := failed.Load(); n != 0 {
		t.Fatalf("%d requests through the front failed during the rolling restart (last: %v)", n, lastErr.Load())
	}
}

// TestStoreOnEtcdSurvivesKill: berth serve --store etcd://… keeps what it
// acknowledged through a kill -9 of the berth (and everything it ran): a
// deployment and a token written before are there after the restart, and
// the deployment routes; a second berth with h0's host id on the same
// store is refused (exit 1, naming the holder), and one of another host
// (with h0's secret key) starts beside it and shares the deployment.
func TestStoreOnEtcdSurvivesKill(t *testing.T) {
	nt := fleetnet.New(t, 2)
	etcd := etcdtest.Start(t, 1, etcdtest.Options{Host: nt.Gateway, Fsync: true})
	storeURL := "etcd://" + strings.Join(trimSchemes(etcd.Endpoints()), ",")
	up, err := net.Listen("tcp", nt.Gateway+":0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "kept") }), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(up)
	t.Cleanup(func() { srv.Close() })

	h := startFleetHost(t, nt.Hosts[0], "h0", etcd.Endpoints(), "--store", storeURL)
	if code, b := h.do(t, "POST", "/deployments", fmt.Sprintf(`{"id":"kept","routes":[{"host":"kept.test"}],"upstreams":["%s"]}`, up.Addr())); code != 201 {
		t.Fatalf("deployment: %d %s", code, b)
	}
	code, b := h.do(t, "POST", "/tokens", `{"name":"ci","admin":"admin","deployments":["*"]}`)
	var minted struct{ Token string }
	if code != 201 || json.Unmarshal(b, &minted) != nil {
		t.Fatalf("token: %d %s", code, b)
	}
	if nt.Hosts[0].KillAll() == 0 {
		t.Fatal("nothing ran in h0's namespace")
	}
	<-h.done
	h.cmd = nil
	h.start(t)
	if code, b := h.do(t, "GET", "/deployments/kept", ""); code != 200 {
		t.Fatalf("the deployment after kill -9: %d %s", code, b)
	}
	req, _ := http.NewRequest("GET", h.admin+"/tokens", nil)
	req.Header.Set("Authorization", "Bearer "+minted.Token)
	if resp, err := h.client.Do(req); err != nil || resp.StatusCode != 200 {
		t.Fatalf("the token after kill -9: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	waitUntil(t, "the kept deployment to route", func() bool {
		req, _ := http.NewRequest("GET", h.proxy+"/", nil)
		req.Host = "kept.test"
		resp, err := h.client.Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode == 200 && string(b) == "kept"
	})

	// A second berth with host id h0 on the same store is refused.
	exe, _ := os.Executable()
	cmd := nt.Hosts[1].Command(exe, "serve", "--proxy-addr", nt.Hosts[1].IP+":6188", "--admin-addr", nt.Hosts[1].IP+":9090",
		"--data-dir", t.TempDir(), "--egress-addr", "off", "--no-host-setup", "--store", storeURL,
		"--etcd", strings.Join(etcd.Endpoints(), ","), "--host-id", "h0")
	cmd.Env = append(os.Environ(), beBerth+"=1", "BERTH_ADMIN_PASSWORD="+fleetPassword)
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "in use by another berth") || !strings.Contains(string(out), "holds host h0") {
		t.Fatalf("a second berth of host h0 on the store: %v\n%s", err, out)
	}
	// One of host h1, sealing with h0's key, shares the store.
	h1 := newFleetHost(t, nt.Hosts[1], "h1", etcd.Endpoints(), "--store", storeURL)
	key, err := os.ReadFile(filepath.Join(h.dir, "data", "secret.key"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(h1.dir, "data"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(h1.dir, "data", "secret.key"), key, 0o600); err != nil {
		t.Fatal(err)
	}
	h1.start(t)
	if code, b := h1.do(t, "GET", "/deployments/kept", ""); code != 200 {
		t.Fatalf("the deployment on host h1: %d %s", code, b)
	}
}

func trimSchemes(urls []string) []string {
	out := make([]string, len(urls))
	for i, u := range urls {
		out[i] = strings.TrimPrefix(strings.TrimPrefix(u, "http://"), "https://")
	}
	return out
}
