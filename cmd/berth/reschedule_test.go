package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/fleet/fleetnet"
)

// testRole, in a process's environment, makes this test binary a small
// app (testApp) instead: the vm deployments of the fleet tests run it.
const testRole = "BERTH_TEST_ROLE"

// testApp serves "app" on 127.0.0.1:$PORT, as a process replica does.
func testApp() {
	ln, err := net.Listen("tcp", "127.0.0.1:"+os.Getenv("PORT"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "app") }))
	os.Exit(0)
}

// berthCmd runs this test binary as berth with args.
func berthCmd(t *testing.T, ns *fleetnet.Host, args ...string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := ns.Command(exe, args...)
	cmd.Env = append(os.Environ(), beBerth+"=1")
	return cmd
}

// replicasOf is how many replicas of deployment id h runs itself (a host
// that forwards the deployment lists the hop listener it forwards to).
func (h *fleetHost) replicasOf(t *testing.T, id string) int {
	t.Helper()
	code, b := h.do(t, "GET", "/deployments/"+id, "")
	if code != 200 {
		return -1
	}
	var st struct {
		VMs []struct {
			SandboxID string `json:"sandbox_id"`
		}
	}
	json.Unmarshal(b, &st)
	n := 0
	for _, vm := range st.VMs {
		if strings.HasPrefix(vm.SandboxID, "berth-") {
			n++
		}
	}
	return n
}

// TestFleetReschedule sets a fleet up as the README does — berth fleet
// init on the first host (which runs the fleet's etcd member), berth fleet
// join on two more, every host on the one store in that etcd with a hop
// listener — each berth in a network namespace of its own. The first host
// is cordoned, so a vm deployment (process driver) is placed on one of the
// other two, and every gateway routes it there. Then, under continuous
// load through the first host's gateway to that deployment and to a
// static one, the host running the replica is killed (kill -9, its
// replicas with it):
//   - the static deployment sees no error;
//   - the vm deployment is placed on the other host once the dead host's
//     lease lapses, and answers from a replica there (the time from the
//     kill to the first answer is logged: issue 19's reschedule figure);
//     meanwhile its requests are held, not failed: only the one in flight
//     on the dead host may fail;
//   - the killed host, started again, runs none: the deployment stays
//     where it was moved, on one host only;
//   - the host running it then is partitioned (its traffic dropped): app
//     moves back to the first host it ran on, and no two hosts ever run
//     it at once, counted on both throughout; healed, the partitioned
//     host runs none.
func TestFleetReschedule(t *testing.T) {
	nt := fleetnet.New(t, 3)
	up, err := net.Listen("tcp", nt.Gateway+":0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "static") }), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(up)
	t.Cleanup(func() { srv.Close() })

	ns0 := nt.Hosts[0]
	store := "etcd://" + ns0.IP + ":2379"
	serveArgs := func(h *fleetHost) []string {
		return []string{"serve",
			"--proxy-addr", h.ns.IP + ":6188", "--admin-addr", h.ns.IP + ":9090",
			"--data-dir", filepath.Join(h.dir, "data"), "--egress-addr", "off", "--no-host-setup",
			"--store", store, "--fleet-listen", h.ns.IP + ":7443", "--host-id", h.id}
	}
	h0 := newFleetHost(t, ns0, "h0", nil)
	out, err := berthCmd(t, ns0, "fleet", "init", "--data-dir", filepath.Join(h0.dir, "data"), "--host-id", "h0",
		"--advertise", ns0.IP+":2379", "--server", h0.admin).CombinedOutput()
	if err != nil {
		t.Fatalf("berth fleet init: %v\n%s", err, out)
	}
	h0.args = serveArgs(h0)
	h0.start(t)
	hosts := []*fleetHost{h0}
	join := regexp.MustCompile(`berth fleet join (.*)`)
	for i, ns := range nt.Hosts[1:] {
		h := newFleetHost(t, ns, fmt.Sprintf("h%d", i+1), nil)
		if i > 0 {
			out, err = berthCmd(t, ns0, "fleet", "init", "--data-dir", filepath.Join(h0.dir, "data")).CombinedOutput()
			if err != nil {
				t.Fatalf("berth fleet init again: %v\n%s", err, out)
			}
		}
		m := join.FindSubmatch(out)
		if m == nil {
			t.Fatalf("no join command in:\n%s", out)
		}
		args := append([]string{"fleet", "join", "--data-dir", filepath.Join(h.dir, "data"), "--host-id", h.id}, strings.Fields(string(m[1]))...)
		if out, err := berthCmd(t, ns, args...).CombinedOutput(); err != nil {
			t.Fatalf("berth fleet join on %s: %v\n%s", h.id, err, out)
		}
		h.args = serveArgs(h)
		h.start(t)
		hosts = append(hosts, h)
	}
	for _, h := range hosts {
		waitUntil(t, h.id+" to list the three hosts", func() bool { return h.hostIDs(t) == "h0 h1 h2" })
	}
	if code, b := h0.do(t, "POST", "/fleet/hosts/h0/cordon", ""); code != 200 && code != 204 {
		t.Fatalf("cordon h0: %d %s", code, b)
	}
	exe, _ := os.Executable()
	app := fmt.Sprintf(`{"id":"app","routes":[{"host":"app.test"}],"vm":{"driver":"process","port":8080,"start_command":%q}}`,
		"exec env "+testRole+"=app "+exe+" -test.run=^$")
	if code, b := h0.do(t, "POST", "/deployments", app); code != 201 {
		t.Fatalf("app: %d %s", code, b)
	}
	if code, b := h0.do(t, "POST", "/deployments", fmt.Sprintf(`{"id":"static","routes":[{"host":"static.test"}],"upstreams":["%s"]}`, up.Addr())); code != 201 {
		t.Fatalf("static: %d %s", code, b)
	}
	for _, h := range hosts {
		waitUntil(t, h.id+" to answer app.test", func() bool { code, b := h.get("app.test"); return code == 200 && b == "app" })
	}
	var runner, other *fleetHost
	for _, h := range hosts {
		if n := h.replicasOf(t, "app"); n > 0 {
			if runner != nil {
				_, b1 := runner.do(t, "GET", "/deployments/app", "")
				_, b2 := h.do(t, "GET", "/deployments/app", "")
				t.Fatalf("both %s and %s run app:\n%s\n%s", runner.id, h.id, b1, b2)
			}
			runner = h
		}
	}
	if runner == nil || runner == h0 {
		t.Fatalf("app runs on %v, want one of h1, h2 (h0 is cordoned)", runner)
	}
	for _, h := range hosts[1:] {
		if h != runner {
			other = h
		}
	}

	var staticSent, staticFailed, appSent, appFailed atomic.Int64
	var lastStaticErr atomic.Value
	var appBack atomic.Int64 // unix nanos of the first answer after the kill
	var killedAt atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	load(&wg, stop, func() {
		staticSent.Add(1)
		if code, b := h0.get("static.test"); code != 200 || b != "static" {
			staticFailed.Add(1)
			lastStaticErr.Store(fmt.Sprintf("%d %s", code, b))
		}
	})
	load(&wg, stop, func() {
		appSent.Add(1)
		code, b := h0.get("app.test")
		if code != 200 || b != "app" {
			appFailed.Add(1)
			time.Sleep(20 * time.Millisecond)
			return
		}
		if k := killedAt.Load(); k != 0 && appBack.Load() == 0 && other.replicasOf(t, "app") > 0 {
			appBack.Store(time.Now().UnixNano())
		}
	})
	for staticSent.Load() < 100 || appSent.Load() < 100 {
		time.Sleep(10 * time.Millisecond)
	}
	killedAt.Store(time.Now().UnixNano())
	if runner.ns.KillAll() == 0 {
		t.Fatalf("nothing ran in %s's namespace", runner.id)
	}
	<-runner.done
	runner.cmd = nil
	waitUntil(t, "app to answer from "+other.id, func() bool { return appBack.Load() != 0 })
	at := staticSent.Load()
	for staticSent.Load() < at+100 {
		time.Sleep(10 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	t.Logf("rescheduled: app answered from %s %v after %s was killed (lease TTL 5 s); app requests failed meanwhile: %d of %d",
		other.id, time.Duration(appBack.Load()-killedAt.Load()).Round(time.Millisecond), runner.id, appFailed.Load(), appSent.Load())
	// One client, one request at a time: at most the one in flight on the
	// dead host may fail; the rest are held until app runs elsewhere.
	if n := appFailed.Load(); n > 1 {
		t.Fatalf("%d of %d requests to app failed while %s was killed; at most the one in flight there may", n, appSent.Load(), runner.id)
	}
	if n := staticFailed.Load(); n != 0 {
		t.Fatalf("%d of %d requests to the static deployment failed while %s was killed (last: %v)", n, staticSent.Load(), runner.id, lastStaticErr.Load())
	}

	// The killed host comes back: it does not run app again.
	runner.start(t)
	waitUntil(t, runner.id+" to list the three hosts again", func() bool { return runner.hostIDs(t) == "h0 h1 h2" })
	waitUntil(t, runner.id+" to answer app.test", func() bool { code, b := runner.get("app.test"); return code == 200 && b == "app" })
	if n := runner.replicasOf(t, "app"); n != 0 {
		t.Fatalf("%s runs %d replicas of app after coming back; it was moved to %s", runner.id, n, other.id)
	}
	if n := other.replicasOf(t, "app"); n == 0 {
		t.Fatalf("%s runs no replica of app", other.id)
	}

	// Partition the host running app now: it fences itself (stops app)
	// before its lease lapses and app is placed on the third host, so no
	// two hosts ever run it at once — sampled throughout on both hosts,
	// the partitioned one through its own namespace; healed, it runs none.
	stopWatch := make(chan struct{})
	overlap := make(chan string, 1)
	var watch sync.WaitGroup
	watch.Go(func() {
		for {
			select {
			case <-stopWatch:
				return
			default:
			}
			// other, runner, other again: a replica on runner between two
			// on other is an overlap, whatever moved in between.
			a, b, c := other.replicasOf(t, "app"), runner.replicasOf(t, "app"), other.replicasOf(t, "app")
			if a > 0 && b > 0 && c > 0 {
				select {
				case overlap <- fmt.Sprintf("%s and %s both ran app", other.id, runner.id):
				default:
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	other.ns.Partition()
	waitUntil(t, "app to answer from "+runner.id+" while "+other.id+" is cut off", func() bool {
		code, b := h0.get("app.test")
		return code == 200 && b == "app" && runner.replicasOf(t, "app") > 0
	})
	other.ns.Heal()
	waitUntil(t, other.id+" to list the three hosts after the heal", func() bool { return other.hostIDs(t) == "h0 h1 h2" })
	waitUntil(t, other.id+" to forward app after the heal", func() bool { code, b := other.get("app.test"); return code == 200 && b == "app" })
	close(stopWatch)
	watch.Wait()
	select {
	case msg := <-overlap:
		t.Fatal(msg)
	default:
	}
	if n := other.replicasOf(t, "app"); n != 0 {
		t.Fatalf("%s runs %d replicas of app after the partition healed; it was moved to %s", other.id, n, runner.id)
	}
}
