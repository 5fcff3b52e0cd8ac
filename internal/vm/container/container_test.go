package container

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/agentbin"
	"github.com/berth-dev/berth/internal/hostnet"
	"github.com/berth-dev/berth/internal/hostnet/netnstest"
	"github.com/berth-dev/berth/internal/image"
	"github.com/berth-dev/berth/internal/store"
	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/proc"
	"github.com/berth-dev/berth/internal/vm/vmtest"
)

// The tests run inside a network namespace of their own (netnstest), so the
// bridge, the veths and every guest address exist only there.
func TestMain(m *testing.M) { os.Exit(netnstest.Main(cleaning{m})) }

// cleaning runs the tests, then removes the shared environment.
type cleaning struct{ m *testing.M }

func (c cleaning) Run() int {
	code := c.m.Run()
	if shared != nil {
		shared.close()
	}
	return code
}

// leaseCheck is how often the test agents read their lease.
const leaseCheck = 50 * time.Millisecond

// testCgroupParent keeps the tests' cgroups apart from a real berth's.
const testCgroupParent = "/berth-test"

// env is what every test of the package shares: the agent binary, an
// image store holding a busybox image, and the guest network.
type env struct {
	agent  string
	images *image.Store
	net    *hostnet.Network
	db     *store.Store
	dir    string // holds everything; removed at the end
}

// close removes the environment: the bridge (in the tests' namespace),
// the store and the directory.
func (e *env) close() {
	if e.net != nil {
		hostnet.Teardown(context.Background(), e.net.Config())
	}
	if e.db != nil {
		e.db.Close()
	}
	os.RemoveAll(e.dir)
}

var (
	envOnce sync.Once
	shared  *env
	skip    string // why the driver cannot be tested on this host
	envErr  error  // why the environment could not be built (a failure)
)

// setup builds the shared environment once, or says why it cannot.
func setup(t testing.TB) *env {
	t.Helper()
	envOnce.Do(func() {
		if skip = canTest(); skip == "" {
			shared, envErr = buildEnv()
		}
	})
	if skip != "" {
		t.Skip(skip)
	}
	if envErr != nil {
		t.Fatal(envErr)
	}
	return shared
}

// canTest says why this host cannot run the driver's tests, or "".
func canTest() string {
	if os.Geteuid() != 0 {
		return "the container driver needs root"
	}
	if netnstest.Inside() == "" {
		return "no network namespace of the tests' own (netnstest): ip or nsenter missing"
	}
	if _, err := FindRuntime(""); err != nil {
		return fmt.Sprintf("no OCI runtime: %v (scripts/test installs crun and runc)", err)
	}
	busybox, err := exec.LookPath("busybox")
	if err != nil {
		return "busybox is missing (Debian package busybox-static; scripts/test installs it)"
	}
	if static, err := agentbin.IsStatic(busybox); err == nil && !static {
		return "busybox must be static (Debian package busybox-static)"
	}
	return ""
}

func buildEnv() (_ *env, err error) {
	dir, err := os.MkdirTemp("", "bct")
	if err != nil {
		return nil, err
	}
	e := &env{dir: dir, agent: filepath.Join(dir, "berth")}
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	// The shared agent is static, the zero-cost way into an image: built
	// without cgo (the test binary, built with -race, is not).
	// TestDynamicAgent tests the other way.
	if err := vmtest.BuildAgent(e.agent, false); err != nil {
		return nil, err
	}
	rootfs := filepath.Join(dir, "busybox-rootfs")
	if err := vmtest.BusyboxRoot(rootfs); err != nil {
		return nil, err
	}
	if e.db, err = store.Open(filepath.Join(dir, "db")); err != nil {
		return nil, err
	}
	if e.images, err = image.New(context.Background(), image.Options{Dir: filepath.Join(dir, "images"), Catalog: e.db}); err != nil {
		return nil, err
	}
	if _, err := e.images.Import(context.Background(), "busybox", rootfs); err != nil {
		return nil, err
	}
	// An image without /bin/sh: its replicas cannot run their command.
	broken := filepath.Join(dir, "broken-rootfs")
	os.MkdirAll(filepath.Join(broken, "etc"), 0o755)
	os.WriteFile(filepath.Join(broken, "etc", "motd"), []byte("no shell here\n"), 0o644)
	if _, err := e.images.Import(context.Background(), "broken", broken); err != nil {
		return nil, err
	}
	cfg := hostnet.Config{Subnet: netip.MustParsePrefix(hostnet.DefaultSubnet), StateDir: filepath.Join(dir, "net")}
	if err := hostnet.Setup(context.Background(), cfg); err != nil {
		return nil, err
	}
	if e.net, err = hostnet.New(cfg); err != nil {
		return nil, err
	}
	return e, nil
}

// shortTempDir is a temporary directory with a short path: agent sockets
// live in it, and unix socket paths are limited to 107 bytes.
func shortTempDir(t testing.TB) string {
	dir, err := os.MkdirTemp("", "bc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func newDriverAt(t testing.TB, e *env, dir string) *Driver {
	t.Helper()
	d, err := New(Options{
		Dir: dir, Images: e.images, Net: e.net, Agent: e.agent,
		AgentArgs: []string{"--lease-check=" + leaseCheck.String()}, CgroupParent: testCgroupParent,
		// crun, else runc; BERTH_TEST_OCI_RUNTIME=runc tests the other.
		Runtime: os.Getenv("BERTH_TEST_OCI_RUNTIME"),
	})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	// Its spare containers end with it; replicas do not.
	t.Cleanup(func() { d.Close() })
	return d
}

func newDriver(t testing.TB) *Driver {
	e := setup(t)
	return newDriverAt(t, e, shortTempDir(t))
}

// app serves "ok" with busybox httpd on $PORT.
const app = "mkdir -p /www && echo ok > /www/index.html && exec httpd -f -p $PORT -h /www"

// envApp serves what vmtest.Options.EnvApp specifies, computed at start.
const envApp = `mkdir -p /www && printf '%s\n%s\n%s\n%s\n' "$GREETING" "$(pwd)" "$(cat hook.txt)" "$(cat /proc/sys/kernel/random/uuid)" > /www/index.html && exec httpd -f -p $PORT -h /www`

func TestConformance(t *testing.T) {
	setup(t)
	vmtest.RunDriverTests(t, func(t *testing.T) vm.Driver { return newDriver(t) }, vmtest.Options{
		App:     app,
		EnvApp:  envApp,
		Image:   "busybox",
		WorkDir: "/srv/app",
		Reopen: func(t *testing.T, old vm.Driver) vm.Driver {
			return newDriverAt(t, shared, old.(*Driver).dir)
		},
		LeaseCheck: leaseCheck,
	})
}

func spec(deployment, command string) vm.Spec {
	return vm.Spec{
		Name: vm.Name(deployment, uint64(time.Now().UnixNano())), Deployment: deployment,
		Image: "busybox", Command: command,
	}
}

// start starts a replica and stops it when the test ends.
func start(t *testing.T, d *Driver, s vm.Spec) vm.Instance {
	t.Helper()
	inst, err := d.Start(t.Context(), s)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { d.Stop(context.Background(), s.Name, time.Second) })
	return inst
}

// eventually polls cond for up to 30 s (a hang guard, not a timing
// assertion).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
	}
}

// TestNoLeftovers checks that a stopped replica leaves no veth, cgroup,
// mount (rootfs, netns, disk), loop device, address, runtime state,
// process or directory behind: without a disk size, with one, and with
// one when a new Driver (a restarted berth) adopts and stops the replica.
func TestNoLeftovers(t *testing.T) {
	e := setup(t)
	for _, tt := range []struct {
		name   string
		diskGB int
		reopen bool
	}{
		{"plain", 0, false},
		{"disk", 1, false},
		{"disk-reopened", 1, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := newDriver(t)
			s := spec("leak", app)
			s.DiskSizeGB = tt.diskGB
			inst := start(t, d, s)
			ctx := t.Context()
			if inst.PID == 0 {
				t.Fatal("Start returned no pid")
			}
			dir, img := d.path(s.Name), d.path(s.Name, diskFile)
			veth := hostnet.VethName(s.Name)
			if exec.Command("ip", "link", "show", "dev", veth).Run() != nil {
				t.Fatalf("no veth %s while the replica runs", veth)
			}
			cgroups := func() []string {
				var found []string
				for _, m := range cgroupMounts() {
					if _, err := os.Stat(filepath.Join(m, testCgroupParent, s.Name)); err == nil {
						found = append(found, filepath.Join(m, testCgroupParent, s.Name))
					}
				}
				return found
			}
			if len(cgroups()) == 0 {
				t.Fatal("the replica has no cgroup while it runs")
			}
			if !mountedAt(d.path(s.Name, rootfsDir)) || !mountedAt(d.path(s.Name, netnsFile)) {
				t.Fatal("the replica's rootfs or netns is not mounted while it runs")
			}
			if got := mountedAt(d.path(s.Name, diskDir)); got != (tt.diskGB > 0) {
				t.Errorf("disk mounted = %v with disk size %d GB", got, tt.diskGB)
			}
			if got := len(loopsOf(img)); got != min(tt.diskGB, 1) {
				t.Errorf("%d loop devices back the replica's disk while it runs, want %d", got, min(tt.diskGB, 1))
			}
			if _, err := os.Stat(img); (err == nil) != (tt.diskGB > 0) {
				t.Errorf("disk image with disk size %d GB: %v", tt.diskGB, err)
			}
			if tt.reopen {
				d = newDriverAt(t, e, d.dir)
				if got, err := d.Inspect(ctx, s.Name); err != nil || got.State != vm.StateRunning {
					t.Fatalf("the new driver's Inspect: %+v, %v; want it running", got, err)
				}
			}
			if err := d.Stop(ctx, s.Name, time.Second); err != nil {
				t.Fatalf("Stop: %v", err)
			}
			if exec.Command("ip", "link", "show", "dev", veth).Run() == nil {
				t.Errorf("veth %s outlived its replica", veth)
			}
			if left := cgroups(); len(left) > 0 {
				t.Errorf("cgroups outlived the replica: %v", left)
			}
			if mounted(dir) {
				t.Error("a mount (rootfs, netns or disk) outlived the replica")
			}
			// The loop device detaches itself once the filesystem's last
			// reference goes, which may be after the lazy unmount returns.
			eventually(t, "the replica's loop device to be released", func() bool { return len(loopsOf(img)) == 0 })
			if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the replica directory outlived it: %v", err)
			}
			if _, err := os.Stat(filepath.Join(d.rt.root, s.Name)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the runtime still knows the replica: %v", err)
			}
			if ids, _ := shared.net.Allocated(); contains(ids, s.Name) {
				t.Error("the replica's address is still allocated")
			}
			if proc.Alive(inst.PID, mustStat(inst.PID)) {
				t.Errorf("the init %d outlived its replica", inst.PID)
			}
		})
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func mustStat(pid int) uint64 {
	ps, err := proc.ReadStat(pid)
	if err != nil {
		return 0
	}
	return ps.StartTicks
}

// mountedAt reports whether something is mounted at path.
func mountedAt(path string) bool {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	for line := range strings.Lines(string(b)) {
		if f := strings.Fields(line); len(f) > 4 && unescapeMount(f[4]) == path {
			return true
		}
	}
	return false
}

// mounted reports whether anything is mounted at or below dir.
func mounted(dir string) bool {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			return true
		}
	}
	return false
}

// TestKilledFromOutside checks that an init killed by someone else is
// reported failed, with a reason ending in the replica's last output, so
// the pool replaces it.
func TestKilledFromOutside(t *testing.T) {
	d := newDriver(t)
	s := spec("killed", "echo about to be killed; "+app)
	inst := start(t, d, s)
	eventually(t, "the app's first output line", func() bool {
		return slices.Contains(d.tail(d.path(s.Name)), "about to be killed")
	})
	if err := syscall.Kill(inst.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var got vm.Instance
	eventually(t, "the killed replica to be reported failed", func() bool {
		var err error
		if got, err = d.Inspect(t.Context(), s.Name); err != nil {
			t.Fatal(err)
		}
		return got.State.Terminal()
	})
	if got.State != vm.StateFailed || !strings.Contains(got.Reason, "without recording an exit") || !strings.Contains(got.Reason, "about to be killed") {
		t.Errorf("state %s, reason %q; want failed, without an exit record, with the last output", got.State, got.Reason)
	}
	if err := d.Stop(t.Context(), s.Name, time.Second); err != nil {
		t.Errorf("Stop of a killed replica: %v", err)
	}
}

// TestBrokenImage checks that an image that cannot run the command ends
// the replica with a reason instead of leaving it starting.
func TestBrokenImage(t *testing.T) {
	d := newDriver(t)
	s := spec("broken", app)
	s.Image = "broken"
	start(t, d, s)
	var got vm.Instance
	eventually(t, "the replica of a broken image to end", func() bool {
		var err error
		if got, err = d.Inspect(t.Context(), s.Name); err != nil {
			t.Fatal(err)
		}
		return got.State.Terminal()
	})
	if !strings.Contains(got.Reason, "/bin/sh") || got.ExitCode == nil && got.State != vm.StateFailed {
		t.Errorf("state %s, exit %v, reason %q; want a reason naming the missing /bin/sh", got.State, got.ExitCode, got.Reason)
	}
	t.Logf("reason: %s", got.Reason)

	s = spec("broken", app)
	s.Image = "no-such-image"
	if _, err := d.Start(t.Context(), s); !errors.Is(err, image.ErrNotFound) {
		t.Errorf("Start with an unknown image: %v, want image.ErrNotFound", err)
	}
	if _, err := os.Stat(d.path(s.Name)); !errors.Is(err, os.ErrNotExist) {
		t.Error("a refused start left its directory")
	}
	s.Image = ""
	if _, err := d.Start(t.Context(), s); err == nil {
		t.Error("Start without an image succeeded")
	}
}

// TestLimits checks the size class's cgroup limits, the hostname and the
// namespaces of a replica.
func TestLimits(t *testing.T) {
	d := newDriver(t)
	// Written aside and renamed, so the test never reads it half written.
	s := spec("limits", "hostname > /.berth/run/hostname.tmp && mv /.berth/run/hostname.tmp /.berth/run/hostname; "+app)
	s.SizeClass = "micro"
	inst := start(t, d, s)
	eventually(t, "the app to start", func() bool {
		_, err := os.Stat(d.path(s.Name, runDir, "hostname"))
		return err == nil
	})
	v2, mem, _ := cgroupDirs(inst.PID)
	var limit string
	if v2 != "" {
		b, _ := os.ReadFile(filepath.Join(v2, "memory.max"))
		limit = strings.TrimSpace(string(b))
	} else if mem != "" {
		b, _ := os.ReadFile(filepath.Join(mem, "memory.limit_in_bytes"))
		limit = strings.TrimSpace(string(b))
	}
	if want := strconv.Itoa(256 << 20); limit != want {
		t.Errorf("memory limit of a micro replica = %q, want %s", limit, want)
	}
	if b, _ := os.ReadFile(d.path(s.Name, runDir, "hostname")); strings.TrimSpace(string(b)) != s.Name {
		t.Errorf("hostname in the container = %q, want %q", b, s.Name)
	}
	for _, ns := range []string{"pid", "mnt", "uts", "ipc", "net"} {
		mine, _ := os.Readlink("/proc/self/ns/" + ns)
		theirs, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", inst.PID, ns))
		if err != nil || mine == theirs {
			t.Errorf("the replica shares the %s namespace (%v)", ns, err)
		}
	}
}

var httpClient = &http.Client{Timeout: 2 * time.Second}

// TestPortsAndEnv checks PORT, an explicit port and an extra open port.
func TestPortsAndEnv(t *testing.T) {
	d := newDriver(t)
	s := spec("ports", "mkdir -p /extra && echo extra > /extra/index.html && (httpd -f -p 9229 -h /extra &) && "+app)
	s.Port = 8000
	s.Env = map[string]string{"PORT": "1", "X": "y"}
	s.OpenPorts = []int{9229}
	inst := start(t, d, s)
	if !strings.HasSuffix(inst.Addr, ":8000") {
		t.Fatalf("Addr = %q, want port 8000", inst.Addr)
	}
	host, _, _ := strings.Cut(inst.Addr, ":")
	for _, addr := range []string{inst.Addr, host + ":9229"} {
		eventually(t, addr+" to answer", func() bool {
			resp, err := httpClient.Get("http://" + addr + "/")
			if err != nil {
				return false
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode == http.StatusOK && len(bytes.TrimSpace(b)) > 0
		})
	}
}

// TestStopSuspendedAsksFirst: stopping a suspended (frozen) replica thaws
// it before SIGTERM (the one stop order, proc.End), so its app handles
// SIGTERM instead of being killed while it cannot run.
func TestStopSuspendedAsksFirst(t *testing.T) {
	d := newDriver(t)
	ws := t.TempDir()
	s := spec("termapp", `trap 'echo term > /workspace/mark; exit 0' TERM; mkdir -p /www && echo ok > /www/index.html && httpd -f -p $PORT -h /www & wait`)
	s.Workspace = ws
	inst := start(t, d, s)
	awaitServing(t, inst)
	if err := d.Suspend(t.Context(), s.Name); err != nil {
		t.Fatal(err)
	}
	if err := d.Stop(t.Context(), s.Name, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(ws, "mark"))
	if err != nil || strings.TrimSpace(string(b)) != "term" {
		t.Fatalf("the suspended app did not handle SIGTERM (mark: %q, %v)", b, err)
	}
}

// TestWorkspaceNoSuidNoDev: the replica's /workspace, a host directory
// (a deployment's durable workspace, a Computer's files), is mounted
// nosuid and nodev, as the other writable mounts are: a setuid file or a
// device node made there confers nothing inside, and the host directory
// is captured and restored by berth as root.
func TestWorkspaceNoSuidNoDev(t *testing.T) {
	d := newDriver(t)
	ws := t.TempDir()
	s := spec("wsopts", `grep ' /workspace ' /proc/mounts > /workspace/mnt; mkdir -p /www && echo ok > /www/index.html && exec httpd -f -p $PORT -h /www`)
	s.Workspace = ws
	inst := start(t, d, s)
	awaitServing(t, inst)
	b, err := os.ReadFile(filepath.Join(ws, "mnt"))
	if err != nil {
		t.Fatal(err)
	}
	fields := strings.Fields(string(b))
	if len(fields) < 4 {
		t.Fatalf("/workspace in the replica's /proc/mounts: %q", b)
	}
	opts := "," + fields[3] + ","
	for _, o := range []string{"nosuid", "nodev", "rw"} {
		if !strings.Contains(opts, ","+o+",") {
			t.Errorf("/workspace is mounted %s, without %s", fields[3], o)
		}
	}
}

// TestWorkspaceHandedToUser: a replica that runs as a user (Spec.User, an
// image's config user) owns its workspace copy, seeded by berth as root,
// so it can write it and the files berth restored into it.
func TestWorkspaceHandedToUser(t *testing.T) {
	d := newDriver(t)
	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "restored"), []byte("from a snapshot\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := spec("wsuser", `echo more >> /workspace/restored && echo new > /workspace/new && mkdir -p /tmp/www && echo ok > /tmp/www/index.html && exec httpd -f -p $PORT -h /tmp/www`)
	s.Workspace = ws
	s.User = &vm.User{UID: 1000, GID: 1000}
	inst := start(t, d, s)
	awaitServing(t, inst)
	for name, want := range map[string]string{"restored": "from a snapshot\nmore\n", "new": "new\n"} {
		p := filepath.Join(ws, name)
		b, err := os.ReadFile(p)
		if err != nil || string(b) != want {
			t.Errorf("%s: %q %v, want %q written by the user", name, b, err, want)
			continue
		}
		fi, _ := os.Stat(p)
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != 1000 || st.Gid != 1000 {
			t.Errorf("%s is owned by %d:%d, want the user 1000:1000", name, st.Uid, st.Gid)
		}
	}
}

// awaitServing waits until inst's app answers GET / with 200.
func awaitServing(t *testing.T, inst vm.Instance) {
	t.Helper()
	eventually(t, "the app to serve", func() bool {
		resp, err := http.Get("http://" + inst.Addr + "/")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}
