package libvirt

import (
	"encoding/xml"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/kvm"
)

func TestNewUnavailable(t *testing.T) {
	dir := t.TempDir()
	// No libvirtd: nothing at the socket, then something that is not
	// libvirtd.
	o := Options{Options: kvm.Options{Dir: filepath.Join(dir, "d")}, Socket: filepath.Join(dir, "none")}
	if _, err := New(o); !errors.Is(err, vm.ErrUnavailable) || !strings.Contains(err.Error(), "libvirtd is not running") {
		t.Errorf("New without libvirtd: %v, want ErrUnavailable saying libvirtd is not running", err)
	}
	o.Socket = filepath.Join(dir, "mute")
	l, err := net.Listen("unix", o.Socket)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close() // hangs up on the handshake
		}
	}()
	defer l.Close()
	if _, err := New(o); !errors.Is(err, vm.ErrUnavailable) || !strings.Contains(err.Error(), "cannot reach libvirtd") {
		t.Errorf("New against a socket that hangs up: %v, want ErrUnavailable", err)
	}
}

func TestNewBadOptions(t *testing.T) {
	for _, o := range []Options{
		{Options: kvm.Options{Dir: t.TempDir(), Hypervisor: &hypervisor{}}},
		{Options: kvm.Options{Dir: t.TempDir()}, Machine: "pc,accel=kvm"},
	} {
		if _, err := New(o); err == nil || errors.Is(err, vm.ErrUnavailable) {
			t.Errorf("New(%+v) = %v, want an error about the options", o, err)
		}
	}
}

func testMachine(accel string) kvm.Machine {
	return kvm.Machine{
		ID: vm.Name("app", 5), Accel: accel, VCPUs: 2, MemoryMB: 512,
		Kernel: "/k/vmlinux", Initrd: "/k/initrd.img", Cmdline: "console=ttyS0 -- /berth-agent agent <&>",
		RootDisk: "/d/rootfs.ext4", ConfigDisk: "/d/config.img", Console: "/d/console.log",
		AgentSocket: "/d/agent.sock", Tap: "bt1234", MAC: "02:b5:00:00:00:05",
	}
}

func TestDomainXML(t *testing.T) {
	b, err := domainXML(testMachine("tcg"), "pc", "")
	if err != nil {
		t.Fatal(err)
	}
	var dom domain
	if err := xml.Unmarshal(b, &dom); err != nil {
		t.Fatalf("the domain XML does not parse: %v\n%s", err, b)
	}
	for _, tt := range []struct{ what, got, want string }{
		{"type", dom.Type, "qemu"},
		{"name", dom.Name, vm.Name("app", 5)},
		{"machine", dom.OS.Type.Machine, "pc"},
		{"kernel", dom.OS.Kernel, "/k/vmlinux"},
		{"initrd", dom.OS.Initrd, "/k/initrd.img"},
		{"cmdline (escaped and back)", dom.OS.Cmdline, "console=ttyS0 -- /berth-agent agent <&>"},
		{"cpu", dom.CPU.Mode, "maximum"},
		{"on_reboot", dom.OnReboot, "destroy"},
		{"root disk", dom.Devices.Disks[0].Source.File + " " + dom.Devices.Disks[0].Target.Dev, "/d/rootfs.ext4 vda"},
		{"config disk", dom.Devices.Disks[1].Source.File + " " + dom.Devices.Disks[1].Target.Dev, "/d/config.img vdb"},
		{"tap", dom.Devices.Interface.Target.Dev + " " + dom.Devices.Interface.Target.Managed, "bt1234 no"},
		{"mac", dom.Devices.Interface.MAC.Address, "02:b5:00:00:00:05"},
		{"console", dom.Devices.Serial.Source.Path, "/d/console.log"},
		{"agent socket", dom.Devices.Channel.Source.Path + " " + dom.Devices.Channel.Source.Mode, "/d/agent.sock bind"},
		{"agent port", dom.Devices.Channel.Target.Name, kvm.AgentPortName},
		{"seclabel", dom.SecLabel.Model + " " + dom.SecLabel.Label, "dac +0:+0"},
	} {
		if tt.got != tt.want {
			t.Errorf("%s = %q, want %q", tt.what, tt.got, tt.want)
		}
	}
	if dom.Memory.Value != 512 || dom.Memory.Unit != "MiB" || dom.VCPU != 2 {
		t.Errorf("memory %d %s, %d vCPUs; want 512 MiB, 2", dom.Memory.Value, dom.Memory.Unit, dom.VCPU)
	}
	if dom.Devices.Disks[0].ReadOnly != nil || dom.Devices.Disks[1].ReadOnly == nil {
		t.Error("want the root disk writable and the config drive read-only")
	}
	if len(dom.Devices.Filesystems) != 0 {
		t.Errorf("without a workspace the domain shares %+v, want no <filesystem>", dom.Devices.Filesystems)
	}

	// A workspace is a 9p share under the tag the initramfs mounts.
	m := testMachine("tcg")
	m.Workspace = "/data/computers/c1/work space&"
	if b, err = domainXML(m, "pc", ""); err != nil {
		t.Fatal(err)
	}
	dom = domain{}
	if err := xml.Unmarshal(b, &dom); err != nil {
		t.Fatalf("the domain XML does not parse: %v\n%s", err, b)
	}
	want := fsXML{Type: "mount", AccessMode: "passthrough", Source: fsSource{m.Workspace}, Target: fsSource{kvm.WorkspaceTag}}
	if fs := dom.Devices.Filesystems; len(fs) != 1 || fs[0] != want {
		t.Errorf("workspace share = %+v, want %+v\n%s", fs, want, b)
	}

	// Mounts are read-only 9p shares after it, under the tags the
	// initramfs mounts (berth_mounts=).
	m.Mounts = []kvm.Mount{{Source: "/var/lib/berth/mounts/ab", Target: "/data"}, {Source: "/t/cd", Target: "/opt/model"}}
	if b, err = domainXML(m, "pc", ""); err != nil {
		t.Fatal(err)
	}
	dom = domain{}
	if err := xml.Unmarshal(b, &dom); err != nil {
		t.Fatalf("the domain XML does not parse: %v\n%s", err, b)
	}
	if fs := dom.Devices.Filesystems; len(fs) != 3 || fs[0] != want {
		t.Fatalf("shares = %+v, want the workspace's and two mounts\n%s", fs, b)
	}
	for i, mt := range m.Mounts {
		fs := dom.Devices.Filesystems[1+i]
		if fs.Type != "mount" || fs.AccessMode != "passthrough" || fs.Source.Dir != mt.Source || fs.Target.Dir != kvm.MountTag(i) || fs.ReadOnly == nil {
			t.Errorf("mount %d shared as %+v (readonly %v), want %s under %s, read-only\n%s", i, fs, fs.ReadOnly != nil, mt.Source, kvm.MountTag(i), b)
		}
	}

	b, err = domainXML(testMachine("kvm"), "q35", "/usr/bin/qemu-system-x86_64")
	if err != nil {
		t.Fatal(err)
	}
	dom = domain{}
	if err := xml.Unmarshal(b, &dom); err != nil {
		t.Fatal(err)
	}
	if dom.Type != "kvm" || dom.CPU.Mode != "host-passthrough" || dom.Devices.Emulator != "/usr/bin/qemu-system-x86_64" || dom.OS.Type.Machine != "q35" {
		t.Errorf("with KVM: type %q, cpu %q, emulator %q, machine %q", dom.Type, dom.CPU.Mode, dom.Devices.Emulator, dom.OS.Type.Machine)
	}
	if _, err := domainXML(testMachine("hvf"), "pc", ""); err == nil {
		t.Error("domainXML accepted the accelerator hvf")
	}
}

func TestQEMUPID(t *testing.T) {
	if _, err := qemuPID(vm.Name("nosuch", 1)); err == nil {
		t.Error("qemuPID found a QEMU for a domain that does not exist")
	}
	// A process whose command line names the domain as libvirt's QEMU
	// does (sh ignores the arguments after its script).
	id := vm.Name("pid", uint64(os.Getpid()))
	cmd := exec.Command("sh", "-c", "sleep 60", "-name", "guest="+id+",debug-threads=on")
	if err := cmd.Start(); err != nil {
		t.Skip(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	if pid, err := qemuPID(id); err != nil || pid != cmd.Process.Pid {
		t.Errorf("qemuPID = %d, %v; want %d", pid, err, cmd.Process.Pid)
	}
}
