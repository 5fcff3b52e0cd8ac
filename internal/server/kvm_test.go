package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/hostnet"
	"github.com/berth-dev/berth/internal/hostnet/netnstest"
	"github.com/berth-dev/berth/internal/image/registrytest"
	"github.com/berth-dev/berth/internal/syncbuf"
	"github.com/berth-dev/berth/internal/vm/guest"
	"github.com/berth-dev/berth/internal/vm/kvm"
	"github.com/berth-dev/berth/internal/vm/libvirt/libvirttest"
	"github.com/berth-dev/berth/internal/vm/vmtest"
)

// kvmApp is the guest app: busybox httpd serving a page that only a kvm
// guest can write (its host name is the replica's, its kernel command line
// the driver's).
const kvmApp = `mkdir -p /www && { echo "hello from $(hostname)"; cat /proc/cmdline; } > /www/index.html && exec httpd -f -p 8080 -h /www`

// TestKVMGateway serves a kvm deployment through the gateway from zero:
// berth serve's kvm driver as package drivers wires it (guest kernel found in
// /boot, initramfs built at the first Start, the agent written into the
// image's disk), QEMU under TCG where there is no /dev/kvm, and a held
// first request answered by the guest's app. It checks the cold start's
// phases in the metrics and logs the boot-to-ready time.
//
// The guest network (a bridge and a tap per replica) exists only in the
// network namespace the package's tests run in (TestMain, netnstest.Main).
func TestKVMGateway(t *testing.T) {
	k := startKVM(t, v1.Config{})
	call, logs, data, ref, dynamic, proxy := k.call, k.logs, k.data, k.ref, k.dynamic, k.proxy
	// A TCG boot takes 5 to 30 s depending on the host's load: the hold
	// and the boot may take up to two minutes.
	spec := fmt.Sprintf(`{"id":"kvmgw","routes":[{"host":"kvmgw.test"}],`+
		`"vm":{"driver":"kvm","image":%q,"port":8080,"start_command":%s},`+
		`"scaling":{"min_replicas":0,"max_replicas":1,"cold_start_timeout_secs":120,"boot_timeout_secs":120}}`, ref, jsonString(kvmApp))
	if code, b := call("POST", "/deployments", spec); code/100 != 2 {
		t.Fatalf("registering: %d %s", code, b)
	}

	// The held request, while the server's log is watched: a replica
	// that fails to be created or to boot fails the test at once, with
	// the reason, instead of after the cold-start timeout.
	rctx, rcancel := context.WithCancel(context.Background())
	defer rcancel()
	req, _ := http.NewRequestWithContext(rctx, "GET", proxy+"/", nil)
	req.Host = "kvmgw.test"
	t0 := time.Now()
	type result struct {
		resp *http.Response
		body []byte
		err  error
	}
	got := make(chan result, 1)
	go func() {
		resp, err := (&http.Client{Timeout: 3 * time.Minute}).Do(req)
		var body []byte
		if err == nil {
			body, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		got <- result{resp, body, err}
	}()
	var r result
	for tick := time.NewTicker(100 * time.Millisecond); ; {
		select {
		case r = <-got:
		case <-tick.C:
			if line := replicaFailure(logs.String()); line != "" {
				t.Fatalf("the replica failed after %v: %s", time.Since(t0).Round(time.Millisecond), line)
			}
			continue
		}
		tick.Stop()
		break
	}
	if r.err != nil {
		t.Fatalf("GET through the gateway: %v", r.err)
	}
	resp, body := r.resp, r.body
	t.Logf("first request answered after %v, %s", time.Since(t0).Round(time.Millisecond), resp.Header.Get("X-Berth-Cold-Start"))
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "hello from berth-kvmgw-") || !strings.Contains(string(body), "berth_root=/dev/vda") {
		t.Fatalf("GET through the gateway: %d %q, want the guest's page", resp.StatusCode, body)
	}
	// The page holds the guest's kernel command line: init is the
	// bundled interpreter exactly when the agent is dynamic.
	viaLoader := strings.Contains(string(body), "--library-path "+guest.LibDir+" "+guest.Init+" agent --vm-init")
	if viaLoader != dynamic {
		t.Errorf("the guest ran its agent through the bundled interpreter: %v, want %v; its command line:\n%s", viaLoader, dynamic, body)
	}
	if h := resp.Header.Get("X-Berth-Cold-Start"); !strings.HasPrefix(h, "held=") {
		t.Errorf("X-Berth-Cold-Start %q: the request was not held for a cold start", h)
	}

	// The held request's phases, boot (Start returned until the probe
	// passed) among them.
	var phases map[string]apitype.Histogram
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		code, b := call("GET", "/metrics/cold-start?deployment=kvmgw", "")
		var out struct {
			Deployments []struct {
				ID     string                       `json:"id"`
				Phases map[string]apitype.Histogram `json:"phases"`
			} `json:"deployments"`
		}
		if code != http.StatusOK || json.Unmarshal(b, &out) != nil || len(out.Deployments) != 1 {
			t.Fatalf("cold-start metrics: %d %s", code, b)
		}
		phases = out.Deployments[0].Phases
		if phases["total"].Count > 0 || time.Now().After(deadline) {
			break
		}
	}
	for _, p := range []string{"create", "boot", "total"} {
		if h := phases[p]; h.Count != 1 || h.Sum <= 0 {
			t.Errorf("cold-start phase %s: count %d, sum %gs; want one held request", p, h.Count, h.Sum)
		}
	}
	t.Logf("cold-start phases: queue %.3fs, create %.3fs, boot %.3fs, first byte %.3fs, total %.3fs",
		phases["queue"].Sum, phases["create"].Sum, phases["boot"].Sum, phases["first_byte"].Sum, phases["total"].Sum)
	for line := range strings.Lines(logs.String()) {
		if strings.Contains(line, "guest ready") || strings.Contains(line, "boot files built") {
			t.Log(strings.TrimSpace(line))
		}
	}

	// Deleting the deployment stops its guest.
	if code, b := call("DELETE", "/deployments/kvmgw", ""); code/100 != 2 {
		t.Fatalf("delete: %d %s", code, b)
	}
	var left []string
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if left = kvmReplicas(filepath.Join(data, "kvm")); len(left) == 0 {
			break
		}
	}
	if len(left) > 0 {
		t.Errorf("the deleted deployment left replicas %v", left)
	}
}

// kvmServer is a berth server with the kvm or the libvirt driver, as
// startKVM or startGuests makes it.
type kvmServer struct {
	s       *Server
	logs    *syncbuf.Buffer
	data    string // its DataDir
	driver  string // kvm or libvirt
	ref     string // the busybox guest image, in a registry on loopback
	dynamic bool   // whether the guest agent is dynamically linked
	proxy   string // the gateway's URL
	// call makes a request of the admin API, returning its status and body.
	call func(method, path, body string) (int, []byte)
}

// startKVM starts a server whose kvm driver boots the busybox image
// (with image config config) from a registry on loopback, or skips t
// where no guest can boot. The server and whatever QEMU is left stop
// when t ends.
func startKVM(t *testing.T, config v1.Config) *kvmServer {
	t.Helper()
	return startGuests(t, "kvm", config)
}

// startGuests is startKVM for driver kvm or libvirt. For libvirt it
// starts a libvirtd of the test's own (libvirttest), which the server's
// libvirt driver connects to, and stops it when t ends, killing any QEMU
// of its domains left then.
func startGuests(t *testing.T, driver string, config v1.Config) *kvmServer {
	t.Helper()
	skipShort(t, "boots a guest (TCG here)")
	if why := kvmSkip(); why != "" {
		t.Skip(why)
	}
	var libvirtd string
	if driver == "libvirt" {
		var err error
		if libvirtd, err = libvirttest.Bin(); err != nil {
			t.Skipf("no libvirtd (%v); scripts/test installs libvirt-daemon and libvirt-daemon-driver-qemu", err)
		}
	}
	netnstest.Require(t)
	dir, err := os.MkdirTemp("", "bk") // short: QEMU's sockets live below
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })

	// The guests' agent is built dynamically linked where there is a C
	// compiler, as `go build` builds berth there: the guest then runs it
	// through the interpreter and libc bundled into its disk, which the
	// busybox image lacks. The static agent's way into a guest is the kvm
	// package's tests' (and TestAgentDisks's).
	agent := filepath.Join(dir, "agent")
	cgo := vmtest.HaveCC()
	if err := vmtest.BuildAgent(agent, cgo); err != nil {
		t.Fatal(err)
	}
	dynamic := guest.CheckStatic(agent) != nil
	if dynamic != cgo {
		t.Fatalf("the agent built with cgo %v is dynamic: %v", cgo, dynamic)
	}
	t.Logf("guest agent dynamically linked: %v", dynamic)

	// The host's side of the guest network, as `berth host setup` makes
	// it, in this namespace.
	data := filepath.Join(dir, "data")
	t.Setenv("BERTH_GUEST_SUBNET", hostnet.DefaultSubnet)
	cfg, err := hostnet.ConfigFromEnv(data)
	if err != nil {
		t.Fatal(err)
	}
	if err := hostnet.Setup(context.Background(), cfg); err != nil {
		t.Fatalf("guest network: %v", err)
	}
	t.Cleanup(func() { hostnet.Teardown(context.Background(), cfg) })

	// The drivers' accelerator probe answers from the machine's cache that
	// the vm/kvm and vm/libvirt tests share, so that it probes /boot's
	// kernel once, not in every test package.
	shared := filepath.Join(os.TempDir(), "berth-kvm-probe")
	for _, d := range []string{shared, data} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(shared, kvm.ProbeCacheDir(data)); err != nil {
		t.Fatal(err)
	}

	var libvirtSocket string
	if driver == "libvirt" {
		stop, sock, err := libvirttest.Start(libvirtd, filepath.Join(dir, "libvirt"))
		if err != nil {
			t.Fatal(err)
		}
		libvirtSocket = sock
		// Registered before the server's cleanup, so run after it:
		// the deployment's deletion has stopped its domains by then, and
		// a QEMU left over (its disk under dir) is killed.
		t.Cleanup(func() {
			stop()
			killQEMUsUnder(t, dir)
		})
	}

	var logs syncbuf.Buffer
	o := Options{
		ProxyAddr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0", DataDir: data, RegistryAllowInsecure: []string{"127.0.0.1"},
		Log: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	testOptions(&o)
	o.Drivers.GuestAgent = agent
	o.Drivers.GuestKernel.Path = os.Getenv("BERTH_KVM_KERNEL") // as the kvm package's tests
	o.Drivers.LibvirtSocket = libvirtSocket
	s, err := New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("server log:\n%s", logs.String())
		}
	})
	if !slices.Contains(s.fleet.DriverNames(), driver) {
		t.Fatalf("berth has no %s driver (drivers %v); its log:\n%s", driver, s.fleet.DriverNames(), logs.String())
	}
	rootfs := filepath.Join(dir, "rootfs")
	if err := vmtest.BusyboxRoot(rootfs); err != nil {
		t.Fatal(err)
	}
	// The image comes from a registry on loopback, as a user's would:
	// the first replica's create pulls it (the cold start's pull phase)
	// and the kvm driver makes its disk from the pulled tree.
	reg := registrytest.Start(t, registrytest.Options{})
	ref := reg.Push(t, "guests/busybox:1", registrytest.Image(t, config, registrytest.DirLayer(t, rootfs)))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	admin, proxy := "http://"+s.AdminAddr(), "http://"+s.ProxyAddr()
	// Replicas outlive the server (QEMU is a daemon of its own); the
	// deployment's deletion stops them, and whatever QEMU is left then is
	// killed, so that none outlives the test.
	t.Cleanup(func() {
		cancel()
		<-done
		killQEMUs(t, filepath.Join(data, "kvm"))
	})

	k := &kvmServer{s: s, logs: &logs, data: data, driver: driver, ref: ref, dynamic: dynamic, proxy: proxy}
	k.call = func(method, path, body string) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequest(method, admin+path, strings.NewReader(body))
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
	return k
}

// replicaFailure is the first line of the server's log that says a
// replica could not be created or failed to boot, or "".
func replicaFailure(log string) string {
	for line := range strings.Lines(log) {
		if strings.Contains(line, "replica create failed") || strings.Contains(line, "replica failed to boot") {
			return strings.TrimSpace(line)
		}
	}
	return ""
}

// kvmSkip says why this host cannot run a kvm guest at all, or "".
func kvmSkip() string {
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		return "the kvm driver's guests are x86_64 Linux"
	}
	if os.Geteuid() != 0 {
		return "not root: the guest network (a bridge, taps) needs CAP_NET_ADMIN"
	}
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		return "no qemu-system-x86_64 (Debian: qemu-system-x86; scripts/test installs it)"
	}
	if os.Getenv("BERTH_KVM_KERNEL") == "" {
		if k, _ := kvm.FindKernel(""); k == "" {
			return "no guest kernel in /boot with its modules (Debian: linux-image-amd64; scripts/test installs it)"
		}
	}
	return ""
}

// kvmReplicas lists the replica directories under the kvm driver's Dir.
func kvmReplicas(dir string) []string {
	var ids []string
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.IsDir() && strings.HasPrefix(e.Name(), "berth-") {
			ids = append(ids, e.Name())
		}
	}
	return ids
}

// killQEMUs kills the QEMU of every replica left under dir (by the pid
// file QEMU wrote there, if that process is still a QEMU).
func killQEMUs(t *testing.T, dir string) {
	for _, id := range kvmReplicas(dir) {
		b, err := os.ReadFile(filepath.Join(dir, id, "qemu.pid"))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 1 {
			continue
		}
		if cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); bytes.Contains(cmd, []byte("qemu")) {
			t.Logf("killing the QEMU of %s (pid %d)", id, pid)
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// killQEMUsUnder kills every QEMU whose command line names a path under
// dir (libvirtd's domains of a test, whose disks live there).
func killQEMUsUnder(t *testing.T, dir string) {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		cmd, err := os.ReadFile(p)
		if err != nil || !bytes.Contains(cmd, []byte("qemu")) || !bytes.Contains(cmd, []byte(dir+"/")) {
			continue
		}
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		if err != nil || pid <= 1 || pid == os.Getpid() {
			continue
		}
		t.Logf("killing QEMU pid %d, left by libvirtd", pid)
		syscall.Kill(pid, syscall.SIGKILL)
	}
}
