package kvm

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/agentbin"
	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/replicadir"
	"github.com/berth-dev/berth/internal/vm/vmtest"
)

// noNet is a Network for tests that never create a tap.
type noNet struct{}

func (noNet) CreateTap(ctx context.Context, id string) (string, string, string, string, error) {
	return "", "", "", "", errors.New("no taps in this test")
}
func (noNet) DeleteTap(ctx context.Context, id string) error { return nil }

func touch(t *testing.T, name string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func validOptions(t *testing.T) Options {
	return Options{
		Dir:     t.TempDir(),
		QEMUBin: "/bin/true",
		Kernel:  touch(t, "vmlinux"),
		Initrd:  touch(t, "initrd.img"),
		Images:  vmtest.FixedImage(touch(t, "rootfs.ext4")),
		Net:     noNet{},
		Accel:   "tcg",
	}
}

func TestNew(t *testing.T) {
	if _, err := New(validOptions(t)); err != nil {
		t.Fatalf("New with valid options: %v", err)
	}
	tests := []struct {
		name        string
		change      func(o *Options)
		unavailable bool // the error wraps vm.ErrUnavailable
		want        string
	}{
		{"no dir", func(o *Options) { o.Dir = "" }, false, "Dir is required"},
		{"no qemu", func(o *Options) { o.QEMUBin = "/nonexistent/qemu-system-x86_64" }, true, "no QEMU"},
		{"no kernel", func(o *Options) { o.Kernel = "" }, true, "no guest kernel"},
		{"missing kernel", func(o *Options) { o.Kernel = "/nonexistent/vmlinux" }, true, "guest kernel"},
		{"no initrd", func(o *Options) { o.Initrd = "" }, true, "initramfs"},
		{"missing initrd", func(o *Options) { o.Initrd = "/nonexistent/initrd" }, true, "initramfs"},
		{"no images", func(o *Options) { o.Images = nil }, true, "image store"},
		{"no network", func(o *Options) { o.Net = nil }, true, "host network"},
		{"bad accel", func(o *Options) { o.Accel = "hvf" }, false, `Accel "hvf"`},
		{"init args", func(o *Options) { o.KernelArgs = "quiet -- sh" }, false, "must not pass init arguments"},
		{"bad init", func(o *Options) { o.GuestInit = "berth agent" }, false, "absolute path"},
	}
	if kvmUsable() != nil {
		tests = append(tests, struct {
			name        string
			change      func(o *Options)
			unavailable bool
			want        string
		}{"kvm without /dev/kvm", func(o *Options) { o.Accel = "kvm" }, true, "no KVM"})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := validOptions(t)
			tt.change(&o)
			_, err := New(o)
			if err == nil {
				t.Fatal("New succeeded, want an error")
			}
			if errors.Is(err, vm.ErrUnavailable) != tt.unavailable {
				t.Errorf("error %q: wraps ErrUnavailable = %v, want %v", err, !tt.unavailable, tt.unavailable)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not say %q", err, tt.want)
			}
		})
	}
	o := validOptions(t)
	o.NoInitrd, o.Initrd = true, ""
	if _, err := New(o); err != nil {
		t.Errorf("New with NoInitrd: %v", err)
	}
}

func TestStartRejectsBadSpecs(t *testing.T) {
	d, err := New(validOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	good := vm.Spec{Name: vm.Name("app", 1), Image: "img"}
	tests := []struct {
		name   string
		change func(s *vm.Spec)
		want   string
	}{
		{"bad name", func(s *vm.Spec) { s.Name = "../etc" }, "not a replica name"},
		{"other deployment", func(s *vm.Spec) { s.Deployment = "other" }, "belongs to deployment"},
		{"no image", func(s *vm.Spec) { s.Image = "" }, "needs an image"},
		{"bad port", func(s *vm.Spec) { s.Port = 70000 }, "out of range"},
		{"bad size", func(s *vm.Spec) { s.SizeClass = "huge" }, "unknown size class"},
		{"bad env", func(s *vm.Spec) { s.Env = map[string]string{"A=B": "c"} }, "environment variable"},
		{"nul", func(s *vm.Spec) { s.Command = "a\x00b" }, "NUL"},
		{"negative disk", func(s *vm.Spec) { s.DiskSizeGB = -1 }, "negative"},
		{"relative workspace", func(s *vm.Spec) { s.Workspace = "work" }, "not an absolute path"},
		{"missing workspace", func(s *vm.Spec) { s.Workspace = filepath.Join(t.TempDir(), "none") }, "not a directory"},
		{"file as workspace", func(s *vm.Spec) { s.Workspace = touch(t, "ws") }, "not a directory"},
		{"writable mount", func(s *vm.Spec) { s.Mounts = []vm.Mount{{Source: t.TempDir(), Target: "/data"}} },
			"mounts[0] (mount "},
		{"writable mount says why", func(s *vm.Spec) { s.Mounts = []vm.Mount{{Source: t.TempDir(), Target: "/data"}} },
			"read-only only: a writable 9p share would write the guest's changes through into the host tree that every replica shares"},
		{"mount target with a comma", func(s *vm.Spec) { s.Mounts = []vm.Mount{{Source: t.TempDir(), Target: "/a,b", ReadOnly: true}} },
			`passes it on the kernel command line (it holds ",")`},
		{"mount target with a colon", func(s *vm.Spec) { s.Mounts = []vm.Mount{{Source: t.TempDir(), Target: "/a:b", ReadOnly: true}} },
			`(it holds ":")`},
		{"mount target with a space", func(s *vm.Spec) { s.Mounts = []vm.Mount{{Source: t.TempDir(), Target: "/a b", ReadOnly: true}} },
			`(it holds " ")`},
		{"missing mount source", func(s *vm.Spec) {
			s.Mounts = []vm.Mount{{Source: "/nonexistent/tree", Target: "/data", ReadOnly: true}}
		},
			"mounts[0] (mount /nonexistent/tree at /data): the source"},
		{"mount targets too long for the command line", func(s *vm.Spec) {
			src := t.TempDir()
			for i := range 8 {
				s.Mounts = append(s.Mounts, vm.Mount{Source: src, Target: "/" + strings.Repeat("x", 200) + strconv.Itoa(i), ReadOnly: true})
			}
		}, "more than the 1024 it has room for"},
		{"mount over the workspace", func(s *vm.Spec) {
			s.Workspace = t.TempDir()
			s.Mounts = []vm.Mount{{Source: t.TempDir(), Target: "/workspace/m", ReadOnly: true}}
		}, "collides with the workspace at /workspace"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := good
			tt.change(&spec)
			_, err := d.Start(t.Context(), spec)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Start: error %v, want one saying %q", err, tt.want)
			}
			if _, err := os.Stat(d.replicaDir(spec.Name)); err == nil && replicadir.ValidID(spec.Name) {
				t.Errorf("a rejected Start left %s behind", d.replicaDir(spec.Name))
			}
		})
	}
	// Only the initramfs mounts a workspace.
	o := validOptions(t)
	o.NoInitrd, o.Initrd = true, ""
	nd, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	spec := good
	spec.Workspace = t.TempDir()
	if _, err := nd.Start(t.Context(), spec); err == nil || !strings.Contains(err.Error(), "needs the driver's initramfs") {
		t.Errorf("Start with a workspace and no initramfs: error %v", err)
	}
	spec = good
	spec.Mounts = []vm.Mount{{Source: t.TempDir(), Target: "/data", ReadOnly: true}}
	if _, err := nd.Start(t.Context(), spec); err == nil || !strings.Contains(err.Error(), "mounts need the driver's initramfs") {
		t.Errorf("Start with a mount and no initramfs: error %v", err)
	}
	// A failing tap leaves nothing behind either.
	_, err = d.Start(t.Context(), good)
	if err == nil || !strings.Contains(err.Error(), "no taps") {
		t.Fatalf("Start without a network: error %v", err)
	}
	if _, err := os.Stat(d.replicaDir(good.Name)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a failed Start left its directory: %v", err)
	}
	if _, err := d.Inspect(t.Context(), good.Name); !errors.Is(err, vm.ErrNotFound) {
		t.Errorf("Inspect after a failed Start: %v, want ErrNotFound", err)
	}
}

func TestBootArgs(t *testing.T) {
	o := validOptions(t)
	o.KernelArgs = "loglevel=4"
	d, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	d.acc.tscKHz = 2096021
	st := state{ID: vm.Name("app", 7), GuestIP: "10.0.0.2", PrefixLen: 30, HostIP: "10.0.0.1"}
	got := d.bootArgs(st)
	want := "console=ttyS0 reboot=k panic=1 quiet i8042.noaux tsc_early_khz=2096021 " +
		"berth_root=/dev/vda berth_ip=10.0.0.2/30 berth_gw=10.0.0.1 loglevel=4 -- /berth-agent agent --vm-init --config /dev/vdb"
	if got != want {
		t.Errorf("bootArgs =\n%s\nwant\n%s", got, want)
	}
	st.Workspace = "/data/ws"
	got = d.bootArgs(st)
	want = "console=ttyS0 reboot=k panic=1 quiet i8042.noaux tsc_early_khz=2096021 " +
		"berth_root=/dev/vda berth_ip=10.0.0.2/30 berth_gw=10.0.0.1 berth_workspace=berth.workspace loglevel=4 -- /berth-agent agent --vm-init --config /dev/vdb"
	if got != want {
		t.Errorf("bootArgs with a workspace =\n%s\nwant\n%s", got, want)
	}
	st.Mounts = []Mount{{Source: "/t/a", Target: "/opt/model"}, {Source: "/t/b", Target: "/srv/data-1"}}
	got = d.bootArgs(st)
	want = "console=ttyS0 reboot=k panic=1 quiet i8042.noaux tsc_early_khz=2096021 " +
		"berth_root=/dev/vda berth_ip=10.0.0.2/30 berth_gw=10.0.0.1 berth_workspace=berth.workspace " +
		"berth_mounts=berth.m0:/opt/model,berth.m1:/srv/data-1 loglevel=4 -- /berth-agent agent --vm-init --config /dev/vdb"
	if got != want {
		t.Errorf("bootArgs with mounts =\n%s\nwant\n%s", got, want)
	}
	st.Workspace, st.Mounts = "", nil

	o.NoInitrd, o.Initrd, o.KernelArgs = true, "", "tsc_early_khz=1000"
	d, err = New(o)
	if err != nil {
		t.Fatal(err)
	}
	d.acc.tscKHz = 2096021
	got = d.bootArgs(st)
	want = "console=ttyS0 reboot=k panic=1 quiet i8042.noaux " +
		"root=/dev/vda rw init=/berth-agent ip=10.0.0.2::10.0.0.1:255.255.255.252::eth0:off tsc_early_khz=1000 -- agent --vm-init --config /dev/vdb"
	if got != want {
		t.Errorf("bootArgs without an initramfs =\n%s\nwant\n%s", got, want)
	}
}

// argValue returns the value after flag's n-th occurrence in args.
func argValues(args []string, flag string) []string {
	var vs []string
	for i, a := range args {
		if a == flag && i+1 < len(args) {
			vs = append(vs, args[i+1])
		}
	}
	return vs
}

func TestQEMUArgs(t *testing.T) {
	o := validOptions(t)
	o.Dir = filepath.Join(t.TempDir(), "a,b") // commas must be doubled
	d, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	st := state{ID: vm.Name("app", 9), Tap: "tap9", MAC: "02:b5:00:00:00:09", GuestIP: "10.0.0.2", PrefixLen: 24, HostIP: "10.0.0.1"}
	args := d.qemuArgs(st, vm.Size{VCPUs: 2, MemoryMB: 512})
	dir := strings.ReplaceAll(d.replicaDir(st.ID), ",", ",,")
	for _, tt := range []struct{ flag, want string }{
		{"-machine", "microvm,isa-serial=on,rtc=on"},
		{"-accel", "tcg"},
		{"-cpu", "max"},
		{"-m", "512"},
		{"-smp", "2"},
		{"-pidfile", d.path(st.ID, pidFile)},
		{"-qmp", "unix:" + dir + "/qmp.sock,server=on,wait=off"},
		{"-serial", "chardev:console"},
		{"-kernel", d.kernel},
		{"-initrd", d.initrd},
		{"-append", d.bootArgs(st)},
	} {
		if got := argValues(args, tt.flag); len(got) != 1 || got[0] != tt.want {
			t.Errorf("%s = %q, want [%q]", tt.flag, got, tt.want)
		}
	}
	// The root disk is the first virtio disk (vda), the config drive the
	// second (vdb), read-only.
	wantDevices := []string{
		"i8042",
		"virtio-blk-device,drive=root",
		"virtio-blk-device,drive=config",
		"virtio-net-device,netdev=net0,mac=02:b5:00:00:00:09",
		"virtio-serial-device,max_ports=2",
		"virtserialport,chardev=agent,name=berth.agent",
	}
	if got := argValues(args, "-device"); !slices.Equal(got, wantDevices) {
		t.Errorf("-device = %q, want %q", got, wantDevices)
	}
	wantDrives := []string{
		"if=none,id=root,format=raw,file=" + dir + "/rootfs.ext4",
		"if=none,id=config,format=raw,readonly=on,file=" + dir + "/config.img",
	}
	if got := argValues(args, "-drive"); !slices.Equal(got, wantDrives) {
		t.Errorf("-drive = %q, want %q", got, wantDrives)
	}
	if got := argValues(args, "-netdev"); !slices.Equal(got, []string{"tap,id=net0,script=no,downscript=no,ifname=tap9"}) {
		t.Errorf("-netdev = %q", got)
	}
	for _, f := range []string{"-daemonize", "-no-reboot", "-nodefaults", "-no-user-config"} {
		if !slices.Contains(args, f) {
			t.Errorf("args lack %s", f)
		}
	}
	if got := argValues(args, "-fsdev"); len(got) != 0 {
		t.Errorf("without a workspace: -fsdev %q", got)
	}

	// A workspace is the last device, a 9p share; its path's commas are
	// doubled too.
	st.Workspace = "/data/a,b/ws"
	args = d.qemuArgs(st, vm.Size{VCPUs: 2, MemoryMB: 512})
	if got, want := argValues(args, "-fsdev"), []string{"local,id=ws,security_model=passthrough,path=/data/a,,b/ws"}; !slices.Equal(got, want) {
		t.Errorf("-fsdev = %q, want %q", got, want)
	}
	if got := argValues(args, "-device"); !slices.Equal(got, append(wantDevices, "virtio-9p-device,fsdev=ws,mount_tag=berth.workspace")) {
		t.Errorf("-device with a workspace = %q", got)
	}
	if got := argValues(args, "-append"); len(got) != 1 || !strings.Contains(got[0], " berth_workspace=berth.workspace ") {
		t.Errorf("-append with a workspace = %q, want berth_workspace=", got)
	}
	if m := d.machine(st, vm.Size{VCPUs: 1, MemoryMB: 256}); m.Workspace != st.Workspace || !strings.Contains(m.Cmdline, "berth_workspace=") {
		t.Errorf("Machine with a workspace: Workspace %q, Cmdline %q", m.Workspace, m.Cmdline)
	}

	// Mounts follow it: read-only 9p shares, tagged berth.m<i>.
	st.Mounts = []Mount{{Source: "/t/a,b", Target: "/opt/model"}, {Source: "/t/c", Target: "/data"}}
	args = d.qemuArgs(st, vm.Size{VCPUs: 2, MemoryMB: 512})
	if got, want := argValues(args, "-fsdev"), []string{
		"local,id=ws,security_model=passthrough,path=/data/a,,b/ws",
		"local,id=m0,security_model=passthrough,readonly=on,path=/t/a,,b",
		"local,id=m1,security_model=passthrough,readonly=on,path=/t/c",
	}; !slices.Equal(got, want) {
		t.Errorf("-fsdev with mounts = %q, want %q", got, want)
	}
	if got := argValues(args, "-device"); !slices.Equal(got, append(wantDevices, "virtio-9p-device,fsdev=ws,mount_tag=berth.workspace",
		"virtio-9p-device,fsdev=m0,mount_tag=berth.m0", "virtio-9p-device,fsdev=m1,mount_tag=berth.m1")) {
		t.Errorf("-device with mounts = %q", got)
	}
	if got := argValues(args, "-append"); len(got) != 1 || !strings.Contains(got[0], " berth_mounts=berth.m0:/opt/model,berth.m1:/data ") {
		t.Errorf("-append with mounts = %q, want berth_mounts=", got)
	}
	if m := d.machine(st, vm.Size{VCPUs: 1, MemoryMB: 256}); !slices.Equal(m.Mounts, st.Mounts) {
		t.Errorf("Machine with mounts: Mounts %+v", m.Mounts)
	}
}

func TestGuestConfig(t *testing.T) {
	o := validOptions(t)
	o.LeaseCheck = 2 * time.Second
	o.BootAllowance = 7 * time.Second
	d, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	started := time.Unix(1_700_000_000, 0)
	st := state{ID: vm.Name("app", 3), Port: 9000, StartedAt: started}
	spec := vm.Spec{
		Command: "exec app", WorkDir: "srv", SetupHooks: []string{"make"}, TTL: time.Minute,
		Env: map[string]string{"B": "2", "A": "1", "PORT": "1"},
	}
	c := d.guestConfig(spec, st)
	wantArgs := []string{"--listen", "virtio:berth.agent", "--log", "/dev/ttyS0", "--lease-file", "/run/berth/lease",
		"--workdir", "/srv", "--lease-check", "2s", "--setup", "make", "--", "/bin/sh", "-c", "exec app"}
	if !slices.Equal(c.Args, wantArgs) {
		t.Errorf("Args = %q, want %q", c.Args, wantArgs)
	}
	wantEnv := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root",
		"HOSTNAME=" + st.ID, "A=1", "B=2", "PORT=9000"}
	if !slices.Equal(c.Env, wantEnv) {
		t.Errorf("Env = %q, want %q", c.Env, wantEnv)
	}
	// TTL plus the boot allowance, in unix seconds.
	if got, want := c.Files["/run/berth/lease"], strconv.FormatInt(started.Unix()+67, 10)+"\n"; got != want {
		t.Errorf("initial lease = %q, want %q", got, want)
	}
	spec.TTL = 0
	if c := d.guestConfig(spec, st); len(c.Files) != 0 {
		t.Errorf("without a TTL the config writes %v, want no lease file", c.Files)
	}

	// With a workspace, the agent is rooted in it, and it is HOME and the
	// base of a relative WorkDir, as in a container.
	st.Workspace = "/data/ws"
	for _, tt := range []struct{ workDir, want string }{
		{"", "/workspace"},
		{"srv", "/workspace/srv"},
		{"/srv", "/srv"},
	} {
		spec.WorkDir = tt.workDir
		c := d.guestConfig(spec, st)
		if i := slices.Index(c.Args, "--workdir"); i < 0 || c.Args[i+1] != tt.want {
			t.Errorf("WorkDir %q: Args %q, want --workdir %s", tt.workDir, c.Args, tt.want)
		}
		if i := slices.Index(c.Args, "--root"); i < 0 || c.Args[i+1] != "/workspace" || i > slices.Index(c.Args, "--") {
			t.Errorf("Args %q, want --root /workspace among the agent's flags", c.Args)
		}
		if !slices.Contains(c.Env, "HOME=/workspace") {
			t.Errorf("Env %q, want HOME=/workspace", c.Env)
		}
	}
}

// staticELF returns a statically linked ELF binary on this host, or skips.
func staticELF(t *testing.T) string {
	t.Helper()
	bb, err := exec.LookPath("busybox")
	if err != nil {
		t.Skip("no busybox")
	}
	static, err := agentbin.IsStatic(bb)
	if err != nil {
		t.Skipf("busybox: %v", err)
	}
	if !static {
		t.Skip("busybox is dynamically linked (install busybox-static)")
	}
	return bb
}

// cpioEntry is one entry read back from a newc archive.
type cpioEntry struct {
	mode       uint32
	rmaj, rmin int
	data       []byte
}

// readCpio parses a newc archive, independently of cpioWriter.
func readCpio(t *testing.T, b []byte) map[string]cpioEntry {
	t.Helper()
	out := map[string]cpioEntry{}
	pad := func(n int) int { return (n + 3) &^ 3 }
	for off := 0; ; {
		if len(b)-off < 110 || string(b[off:off+6]) != "070701" {
			t.Fatalf("cpio: bad header at %d", off)
		}
		field := func(i int) int {
			v, err := strconv.ParseUint(string(b[off+6+8*i:off+14+8*i]), 16, 32)
			if err != nil {
				t.Fatalf("cpio: field %d at %d: %v", i, off, err)
			}
			return int(v)
		}
		mode, size, rmaj, rmin, nameSize := field(1), field(6), field(9), field(10), field(11)
		name := string(b[off+110 : off+110+nameSize-1])
		off = pad(off + 110 + nameSize)
		data := b[off : off+size]
		off = pad(off + size)
		if name == "TRAILER!!!" {
			return out
		}
		out[name] = cpioEntry{uint32(mode), rmaj, rmin, data}
	}
}

func TestWriteInitrd(t *testing.T) {
	bb := staticELF(t)
	dir := t.TempDir()
	mods := map[string]string{
		"kernel/drivers/virtio/virtio.ko":                "",
		"kernel/drivers/virtio/virtio_ring.ko":           "",
		"kernel/drivers/virtio/virtio_mmio.ko":           "kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko",
		"kernel/drivers/virtio/virtio_pci.ko":            "kernel/drivers/virtio/virtio_pci_modern_dev.ko kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko",
		"kernel/drivers/virtio/virtio_pci_modern_dev.ko": "",
		"kernel/drivers/block/virtio_blk.ko":             "kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko",
		"kernel/drivers/net/virtio_net.ko.gz":            "kernel/net/core/failover.ko kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko",
		"kernel/net/core/failover.ko":                    "",
		"kernel/crypto/crc32c_generic.ko":                "",
		"kernel/lib/crc16.ko":                            "",
		"kernel/fs/jbd2/jbd2.ko":                         "",
		"kernel/fs/ext4/ext4.ko":                         "kernel/lib/crc16.ko kernel/fs/jbd2/jbd2.ko",
		"kernel/drivers/char/hw_random/extra-a.ko":       "",
		"kernel/net/9p/9pnet.ko":                         "",
		"kernel/net/9p/9pnet_virtio.ko":                  "kernel/net/9p/9pnet.ko kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko",
		"kernel/fs/netfs/netfs.ko":                       "",
		"kernel/fs/9p/9p.ko":                             "kernel/net/9p/9pnet.ko kernel/fs/netfs/netfs.ko",
	}
	var dep strings.Builder
	for m, deps := range mods {
		dep.WriteString(m + ": " + deps + "\n")
		p := filepath.Join(dir, m)
		os.MkdirAll(filepath.Dir(p), 0o755)
		content := []byte("module " + moduleName(m))
		if strings.HasSuffix(m, ".gz") {
			var z bytes.Buffer
			zw := gzip.NewWriter(&z)
			zw.Write(content)
			zw.Close()
			content = z.Bytes()
		}
		if err := os.WriteFile(p, content, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(dir, "modules.dep"), []byte(dep.String()), 0o644)
	// virtio_console is built into this kernel.
	os.WriteFile(filepath.Join(dir, "modules.builtin"), []byte("kernel/drivers/char/virtio_console.ko\n"), 0o644)

	var buf bytes.Buffer
	if err := WriteInitrd(&buf, InitrdOptions{ModulesDir: dir, Busybox: bb, Modules: []string{"extra-a"}}); err != nil {
		t.Fatalf("WriteInitrd: %v", err)
	}
	zr, err := gzip.NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	files := readCpio(t, raw)
	order := strings.Fields(string(files["lib/modules/order"].data))
	want := []string{"virtio_ring.ko", "virtio.ko", "virtio_mmio.ko", "virtio_pci_modern_dev.ko", "virtio_pci.ko", "virtio_blk.ko", "failover.ko", "virtio_net.ko",
		"crc32c_generic.ko", "jbd2.ko", "crc16.ko", "ext4.ko", "extra_a.ko"}
	if !slices.Equal(order, want) {
		t.Errorf("load order %q, want %q", order, want)
	}
	// The workspace's modules load after the others, without what those
	// loaded (virtio).
	wsOrder := strings.Fields(string(files["lib/modules/order.workspace"].data))
	wantWS := []string{"9pnet.ko", "9pnet_virtio.ko", "netfs.ko", "9p.ko"}
	if !slices.Equal(wsOrder, wantWS) {
		t.Errorf("workspace load order %q, want %q", wsOrder, wantWS)
	}
	for _, m := range append(want, wantWS...) {
		e, ok := files["lib/modules/"+m]
		if !ok || string(e.data) != "module "+strings.TrimSuffix(m, ".ko") {
			t.Errorf("module %s: present %v with %q", m, ok, e.data)
		}
	}
	if e := files["init"]; e.mode != 0o100755 || string(e.data) != initScript {
		t.Errorf("init: mode %o, script matches %v", e.mode, string(e.data) == initScript)
	}
	if e := files["dev/console"]; e.mode != 0o020600 || e.rmaj != 5 || e.rmin != 1 {
		t.Errorf("dev/console: mode %o, device %d:%d", e.mode, e.rmaj, e.rmin)
	}
	if e := files["bin/sh"]; e.mode != 0o120777 || string(e.data) != "busybox" {
		t.Errorf("bin/sh: mode %o, target %q", e.mode, e.data)
	}
	if want, _ := os.ReadFile(bb); !bytes.Equal(files["bin/busybox"].data, want) {
		t.Error("bin/busybox differs from busybox")
	}
	for _, d := range []string{"dev", "proc", "sys", "newroot", "lib/modules"} {
		if files[d].mode != 0o040755 {
			t.Errorf("%s: mode %o, want a directory", d, files[d].mode)
		}
	}

	// A kernel without 9p still gets an initramfs, whose workspace list
	// is empty (a guest with a workspace then fails to mount it).
	var no9p strings.Builder
	for l := range strings.Lines(dep.String()) {
		if !strings.Contains(l, "9p") {
			no9p.WriteString(l)
		}
	}
	os.WriteFile(filepath.Join(dir, "modules.dep"), []byte(no9p.String()), 0o644)
	buf.Reset()
	if err := WriteInitrd(&buf, InitrdOptions{ModulesDir: dir, Busybox: bb}); err != nil {
		t.Fatalf("WriteInitrd without 9p: %v", err)
	}
	if zr, err = gzip.NewReader(&buf); err != nil {
		t.Fatal(err)
	}
	if raw, err = io.ReadAll(zr); err != nil {
		t.Fatal(err)
	}
	files = readCpio(t, raw)
	if e, ok := files["lib/modules/order.workspace"]; !ok || len(e.data) != 0 {
		t.Errorf("without 9p: order.workspace present %v, holding %q; want it empty", ok, e.data)
	}
	if _, ok := files["lib/modules/9p.ko"]; ok {
		t.Error("without 9p in modules.dep the initramfs has 9p.ko")
	}

	// What cannot work is said so.
	for _, tt := range []struct {
		o    InitrdOptions
		want string
	}{
		{InitrdOptions{ModulesDir: dir, Busybox: bb, Modules: []string{"nosuch"}}, "module nosuch"},
		{InitrdOptions{ModulesDir: t.TempDir(), Busybox: bb}, "modules.dep"},
		{InitrdOptions{ModulesDir: dir}, "required"},
		{InitrdOptions{ModulesDir: dir, Busybox: filepath.Join(dir, "modules.dep")}, "busybox"},
	} {
		if err := WriteInitrd(io.Discard, tt.o); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("WriteInitrd(%+v): error %v, want one saying %q", tt.o, err, tt.want)
		}
	}
}

func TestModuleOrderLoop(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "modules.dep"), []byte("a.ko: b.ko\nb.ko: a.ko\n"), 0o644)
	order, err := moduleOrder(dir, []string{"a"})
	// A cycle is cut where it closes; each module appears once.
	if err != nil || !slices.Equal(order, []string{"b.ko", "a.ko"}) {
		t.Errorf("moduleOrder with a cycle = %q, %v", order, err)
	}
}

// qmpServer serves the QMP protocol on a unix socket like QEMU does, for
// one client at a time, and records the commands it was sent.
type qmpServer struct {
	path     string
	commands chan string
	answer   func(cmd string, args json.RawMessage) any
}

func startQMP(t *testing.T, answer func(string, json.RawMessage) any) *qmpServer {
	t.Helper()
	s := &qmpServer{path: filepath.Join(t.TempDir(), "qmp.sock"), commands: make(chan string, 100), answer: answer}
	ln, err := net.Listen("unix", s.path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.serve(c)
		}
	}()
	return s
}

func (s *qmpServer) serve(c net.Conn) {
	defer c.Close()
	enc := json.NewEncoder(c)
	enc.Encode(map[string]any{"QMP": map[string]any{"version": map[string]any{}, "capabilities": []string{"oob"}}})
	sc := bufio.NewScanner(c)
	negotiated := false
	for sc.Scan() {
		var req struct {
			Execute   string          `json:"execute"`
			Arguments json.RawMessage `json:"arguments"`
		}
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			enc.Encode(map[string]any{"error": map[string]string{"class": "GenericError", "desc": "JSON parse error"}})
			continue
		}
		s.commands <- req.Execute + " " + string(req.Arguments)
		switch {
		case req.Execute == "qmp_capabilities":
			negotiated = true
			enc.Encode(map[string]any{"return": map[string]any{}})
		case !negotiated:
			enc.Encode(map[string]any{"error": map[string]string{"class": "CommandNotFound", "desc": "Expecting capabilities negotiation with 'qmp_capabilities'"}})
		default:
			// An event first, as QEMU may send at any time.
			enc.Encode(map[string]any{"event": "STOP", "timestamp": map[string]int{"seconds": 1}})
			enc.Encode(s.answer(req.Execute, req.Arguments))
		}
	}
}

func TestQMP(t *testing.T) {
	s := startQMP(t, func(cmd string, args json.RawMessage) any {
		switch cmd {
		case "query-status":
			return map[string]any{"return": map[string]any{"status": "paused", "running": false}}
		case "send-key", "stop", "cont":
			return map[string]any{"return": map[string]any{}}
		}
		return map[string]any{"error": map[string]string{"class": "CommandNotFound", "desc": "The command " + cmd + " has not been found"}}
	})
	ctx := t.Context()
	if err := qmpRun(ctx, s.path, "send-key", ctrlAltDel); err != nil {
		t.Fatalf("send-key: %v", err)
	}
	if got, want := <-s.commands, "qmp_capabilities "; got != want {
		t.Errorf("first command %q, want %q", got, want)
	}
	if got, want := <-s.commands, `send-key {"keys":[{"data":"ctrl","type":"qcode"},{"data":"alt","type":"qcode"},{"data":"delete","type":"qcode"}]}`; got != want {
		t.Errorf("command %q, want %q", got, want)
	}
	status, err := qmpStatus(ctx, s.path)
	if err != nil || status != "paused" {
		t.Errorf("qmpStatus = %q, %v; want paused", status, err)
	}
	err = qmpRun(ctx, s.path, "nosuch", nil)
	var qe *qmpError
	if !errors.As(err, &qe) || qe.Class != "CommandNotFound" {
		t.Errorf("unknown command: error %v, want a CommandNotFound qmpError", err)
	}
	if err := qmpRun(ctx, filepath.Join(t.TempDir(), "none.sock"), "stop", nil); err == nil {
		t.Error("qmpRun without a socket succeeded")
	}
}

func TestQMPSilentServer(t *testing.T) {
	path := filepath.Join(t.TempDir(), "qmp.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			defer c.Close()
			io.Copy(io.Discard, c) // never greets
		}
	}()
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	if err := qmpRun(ctx, path, "stop", nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("qmpRun against a silent server: error %v, want a deadline error", err)
	}
}

// TestConsole checks how the console (kernel lines, the agent's JSON lines
// with CRLF, the exit record) becomes logs, an exit and a reason.
func TestConsole(t *testing.T) {
	d, err := New(validOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	id := vm.Name("app", 5)
	os.Mkdir(d.replicaDir(id), 0o700)
	if err := replicadir.WriteState(d.replicaDir(id), state{ID: id, Deployment: "app", PID: 0}); err != nil {
		t.Fatal(err)
	}
	// As the agent writes them: t, s, m.
	line := func(s, m string) string {
		return fmt.Sprintf(`{"t":"2026-01-02T03:04:05Z","s":%q,"m":%q}`+"\r\n", s, m)
	}
	console := "[    0.000000] Linux version 6.1.0\r\n" +
		line("agent", "agent listening on virtio:berth.agent (pid 1)") +
		line("stdout", "hello") +
		"[    3.2] random: crng init done\r\n" + line("stderr", "oops") +
		line("agent", "exit 3: exited with code 3") +
		"[    4.1] reboot: Restarting system\r\n"
	if err := os.WriteFile(d.path(id, consoleFile), []byte(console), 0o600); err != nil {
		t.Fatal(err)
	}
	logs, err := d.Logs(t.Context(), id, 10)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range logs {
		got = append(got, l.Stream+":"+l.Text)
	}
	if want := []string{"stdout:hello", "stderr:oops"}; !slices.Equal(got, want) {
		t.Errorf("Logs = %q, want %q", got, want)
	}
	inst, err := d.Inspect(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if inst.State != vm.StateExited || inst.ExitCode == nil || *inst.ExitCode != 3 || !strings.Contains(inst.Reason, "exited with code 3") || !strings.Contains(inst.Reason, "oops") {
		t.Errorf("Inspect = %+v, want exited with code 3 and the last output", inst)
	}
	if _, err := d.DialAgent(t.Context(), id); err == nil {
		t.Error("DialAgent to an ended replica succeeded")
	}
	if err := d.Renew(t.Context(), id, time.Now()); err != nil {
		t.Errorf("Renew of an ended replica: %v, want nil (nothing to tell)", err)
	}
	if err := d.Renew(t.Context(), vm.Name("app", 6), time.Now()); !errors.Is(err, vm.ErrNotFound) {
		t.Errorf("Renew of an unknown replica: %v, want ErrNotFound", err)
	}
	if err := d.Stop(t.Context(), id, time.Second); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if _, err := d.Inspect(t.Context(), id); !errors.Is(err, vm.ErrNotFound) {
		t.Errorf("Inspect after Stop: %v, want ErrNotFound", err)
	}
}
