package container_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/hostnet"
	"github.com/berth-dev/berth/internal/server"
	"github.com/berth-dev/berth/internal/vm/container"
	"github.com/berth-dev/berth/internal/vm/drivers"
)

// gateway is a berth server whose container driver runs on the tests'
// environment: the bridge of the tests' network namespace, the static
// agent, and busybox imported into the server's own image store.
type gateway struct {
	s            *server.Server
	admin, proxy string
	dir          string
	stop         func() // stops the server (its replicas run on)
}

func startGateway(t testing.TB) *gateway {
	t.Helper()
	dir, err := os.MkdirTemp("", "bg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return startGatewayAt(t, dir)
}

// startGatewayAt starts a server over dir, as a restarted berth would.
func startGatewayAt(t testing.TB, dir string) *gateway {
	t.Helper()
	agent, _, rootfs := container.SharedEnv(t)
	// The server's guest network is the default bridge the shared
	// environment set up. Its allocations are kept in its own data
	// directory, so they could collide with the driver tests' ones: the
	// gateway tests do not run in parallel with those.
	t.Setenv("BERTH_GUEST_SUBNET", hostnet.DefaultSubnet)
	s, err := server.New(context.Background(), server.Options{
		ProxyAddr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0", DataDir: dir,
		Drivers: drivers.Options{ContainerAgent: agent, OCIRuntime: os.Getenv("BERTH_TEST_OCI_RUNTIME")},
		Log:     slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(s.DriverNames(), "container") {
		t.Fatalf("the server has no container driver (drivers %v)", s.DriverNames())
	}
	if err := s.ImportImage(context.Background(), "busybox", rootfs); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); <-done }) }
	// Cleanups run last first. Last of all: the server's addresses come
	// from its own allocator, so the driver tests' next replica may get one
	// of them, and the host's neighbour entry for it would still name the
	// gone replica's MAC (unreachable until the entry aged out): forget
	// them. Before that, after stop: the server leaves its driver's spare
	// containers running.
	t.Cleanup(func() { exec.Command("ip", "neigh", "flush", "dev", hostnet.DefaultBridge).Run() })
	t.Cleanup(func() { container.ReapSpares(t, filepath.Join(dir, "containers")) })
	t.Cleanup(stop)
	return &gateway{s: s, admin: "http://" + s.AdminAddr(), proxy: "http://" + s.ProxyAddr(), dir: dir, stop: stop}
}

func (g *gateway) call(t testing.TB, method, path, body string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, g.admin+path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func (g *gateway) register(t testing.TB, id string, min int) {
	t.Helper()
	spec := fmt.Sprintf(`{"id":%q,"routes":[{"host":"%s.test"}],"vm":{"driver":"container","image":"busybox","port":8080,"start_command":%q},"scaling":{"min_replicas":%d}}`, id, id, container.App, min)
	if code, b := g.call(t, "POST", "/deployments", spec); code/100 != 2 {
		t.Fatalf("registering %s: %d %s", id, code, b)
	}
}

func (g *gateway) get(t testing.TB, id string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", g.proxy+"/", nil)
	req.Host = id + ".test"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// leftovers lists what a deployment's replicas could leave on the host:
// veths on the bridge, cgroups, mounts and replica directories.
func (g *gateway) leftovers(t testing.TB) []string {
	var left []string
	// ip, not /sys/class/net: sysfs shows the host's namespace, and the
	// tests run in one of their own.
	links, err := exec.Command("ip", "-o", "link", "show").Output()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(links)) {
		if f := strings.Fields(line); len(f) > 1 && strings.HasPrefix(f[1], "bv") {
			left = append(left, "veth "+strings.TrimSuffix(f[1], ":"))
		}
	}
	for _, h := range []string{"memory", "pids", "freezer", "cpu"} {
		ents, _ := os.ReadDir(filepath.Join("/sys/fs/cgroup", h, "berth"))
		for _, e := range ents {
			if e.IsDir() && strings.HasPrefix(e.Name(), "berth-gw") {
				left = append(left, "cgroup "+h+"/berth/"+e.Name())
			}
		}
	}
	if ents, err := os.ReadDir("/sys/fs/cgroup/berth"); err == nil { // cgroup v2
		for _, e := range ents {
			if e.IsDir() && strings.HasPrefix(e.Name(), "berth-gw") {
				left = append(left, "cgroup berth/"+e.Name())
			}
		}
	}
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	for line := range strings.Lines(string(mi)) {
		// Spare containers belong to no deployment.
		if strings.Contains(line, g.dir+"/") && !strings.Contains(line, "/.spare-") {
			left = append(left, "mount "+strings.Fields(line)[4])
		}
	}
	reps, _ := os.ReadDir(filepath.Join(g.dir, "containers"))
	for _, e := range reps {
		if strings.HasPrefix(e.Name(), "berth-") {
			left = append(left, "replica dir "+e.Name())
		}
	}
	return left
}

// TestGateway serves a container deployment through berth from zero, runs
// a command in it through the admin API, deletes it and checks that
// nothing of its replicas is left behind.
func TestGateway(t *testing.T) {
	g := startGateway(t)
	g.register(t, "gw", 0)
	if code, body := g.get(t, "gw"); code != http.StatusOK || strings.TrimSpace(body) != "ok" {
		t.Fatalf("GET through the gateway: %d %q", code, body)
	}
	code, b := g.call(t, "POST", "/deployments/gw/exec", `{"command":"cat /etc/passwd; hostname"}`)
	var out apitype.ExecOutput
	if code != http.StatusOK || json.Unmarshal(b, &out) != nil || !strings.Contains(out.Stdout, "root:x:0:0") || !strings.Contains(out.Stdout, "berth-gw-") {
		t.Errorf("exec: %d %s", code, b)
	}
	if len(g.leftovers(t)) == 0 {
		t.Fatal("no replica resources while the deployment runs: the leak check would see nothing")
	}
	if code, b := g.call(t, "DELETE", "/deployments/gw", ""); code/100 != 2 {
		t.Fatalf("delete: %d %s", code, b)
	}
	var left []string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if left = g.leftovers(t); len(left) == 0 {
			break
		}
	}
	if len(left) > 0 {
		t.Errorf("a deleted deployment left %v", left)
	}
	// An image a deployment uses cannot be deleted; one it used can.
	g.register(t, "gwimg", 0)
	if code, _ := g.call(t, "DELETE", "/images/busybox", ""); code != http.StatusConflict {
		t.Errorf("deleting a used image: %d, want 409", code)
	}
	g.call(t, "DELETE", "/deployments/gwimg", "")
	if code, b := g.call(t, "DELETE", "/images/busybox", ""); code != http.StatusNoContent {
		t.Errorf("deleting an unused image: %d %s", code, b)
	}
}

// BenchmarkGatewayScaleFromZero measures the first request through berth
// to a container deployment with no replica (busybox httpd), with the
// spare container its registration prewarmed ready: time to first byte,
// with the pool, the container driver and the proxy.
func BenchmarkGatewayScaleFromZero(b *testing.B) {
	g := startGateway(b)
	var ds []time.Duration
	for i := 0; b.Loop(); i++ {
		id := fmt.Sprintf("gwb%d", i)
		b.StopTimer()
		g.register(b, id, 0)
		container.WaitSpares(b, filepath.Join(g.dir, "containers"), container.DefaultSpares)
		b.StartTimer()
		t0 := time.Now()
		code, body := g.get(b, id)
		ds = append(ds, time.Since(t0))
		if code != http.StatusOK {
			b.Fatalf("%d %q", code, body)
		}
		b.StopTimer()
		g.call(b, "DELETE", "/deployments/"+id, "")
		b.StartTimer()
	}
	slices.Sort(ds)
	b.ReportMetric(float64(ds[len(ds)/2].Microseconds())/1000, "ttfb-p50-ms")
	b.ReportMetric(float64(ds[len(ds)*9/10].Microseconds())/1000, "ttfb-p90-ms")
}

// BenchmarkGatewayExec measures POST /deployments/:id/exec of `true`
// against a running container replica.
func BenchmarkGatewayExec(b *testing.B) {
	g := startGateway(b)
	g.register(b, "gwx", 1)
	g.get(b, "gwx")
	var ds []time.Duration
	for b.Loop() {
		t0 := time.Now()
		if code, body := g.call(b, "POST", "/deployments/gwx/exec", `{"command":"true"}`); code != http.StatusOK {
			b.Fatalf("%d %s", code, body)
		}
		ds = append(ds, time.Since(t0))
	}
	slices.Sort(ds)
	b.ReportMetric(float64(ds[len(ds)/2].Microseconds())/1000, "exec-p50-ms")
	g.call(b, "DELETE", "/deployments/gwx", "")
}

// status is the part of GET /deployments/:id this file reads.
func (g *gateway) status(t testing.TB, id string) apitype.DeploymentStatus {
	t.Helper()
	code, b := g.call(t, "GET", "/deployments/"+id, "")
	var st apitype.DeploymentStatus
	if code != http.StatusOK || json.Unmarshal(b, &st) != nil {
		t.Fatalf("GET /deployments/%s: %d %s", id, code, b)
	}
	return st
}

// readyVM waits until the deployment has one ready replica other than
// not, and returns its id.
func (g *gateway) readyVM(t testing.TB, id, not string) string {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		for _, vm := range g.status(t, id).VMs {
			if vm.Healthy && vm.SandboxID != not {
				return vm.SandboxID
			}
		}
	}
	t.Fatalf("%s never had a ready replica other than %q", id, not)
	return ""
}

// TestGatewayKillAndRestart kills a replica's init from outside (the pool
// must replace it) and restarts berth while a replica runs (the new berth
// must adopt it, not start another).
func TestGatewayKillAndRestart(t *testing.T) {
	g := startGateway(t)
	g.register(t, "gwk", 1)
	first := g.readyVM(t, "gwk", "")
	b, err := os.ReadFile(filepath.Join(g.dir, "containers", first, "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	var st struct{ PID int }
	if err := json.Unmarshal(b, &st); err != nil || st.PID == 0 {
		t.Fatalf("state.json of %s: %s", first, b)
	}
	if err := syscall.Kill(st.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	second := g.readyVM(t, "gwk", first)
	if code, body := g.get(t, "gwk"); code != http.StatusOK {
		t.Fatalf("after the kill: %d %q", code, body)
	}

	g.stop()
	g2 := startGatewayAt(t, g.dir)
	if got := g2.readyVM(t, "gwk", ""); got != second {
		t.Errorf("the restarted berth serves %s, want the adopted %s", got, second)
	}
	if vms := g2.status(t, "gwk").VMs; len(vms) != 1 {
		t.Errorf("after a restart the pool has %d replicas, want the 1 it adopted", len(vms))
	}
	if code, body := g2.get(t, "gwk"); code != http.StatusOK {
		t.Errorf("after the restart: %d %q", code, body)
	}
	g2.call(t, "DELETE", "/deployments/gwk", "")
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if len(g2.leftovers(t)) == 0 {
			return
		}
	}
	t.Errorf("a deleted deployment left %v", g2.leftovers(t))
}
