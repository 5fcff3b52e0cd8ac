package libvirt

import (
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"
	"github.com/digitalocean/go-libvirt/socket/dialers"

	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/kvm"
)

// DefaultSocket is libvirtd's read-write socket on Debian (and most
// distributions) when it runs as the system daemon.
const DefaultSocket = "/run/libvirt/libvirt-sock"

// DefaultMachine is the machine type of the guests: libvirt 9 (Debian
// bookworm) cannot drive QEMU's microvm, so guests run on the classic PC
// with virtio-pci devices (see the package doc).
const DefaultMachine = "pc"

// Options configures a Driver. The embedded kvm.Options describe the
// guests exactly as for the kvm driver (Dir, Kernel, Initrd, KernelArgs,
// GuestInit, Images, Net, Accel, LeaseCheck, BootAllowance, Log); QEMUBin,
// when set, becomes the domains' <emulator> (otherwise libvirt picks its
// own), and Hypervisor must be nil: the driver sets it.
type Options struct {
	kvm.Options

	// Socket is libvirtd's read-write unix socket. Empty means
	// DefaultSocket.
	Socket string

	// Machine is the domains' machine type. Empty means DefaultMachine.
	Machine string
}

// Driver runs each replica as a transient libvirt domain named after the
// replica. It is the kvm driver with libvirtd starting, pausing and ending
// QEMU instead of berth: everything else (disks, taps, the config drive,
// the agent's virtio port, logs, leases, re-adoption from Dir) is the kvm
// driver's, so it offers the same abilities. It is safe for concurrent
// use.
type Driver struct {
	*kvm.Driver
	hv *hypervisor
}

// New connects to libvirtd and returns a driver keeping its state under
// o.Dir. It returns an error wrapping vm.ErrUnavailable, saying what is
// missing, when libvirtd cannot be reached or the kvm driver's own
// requirements (kernel, initramfs, image store, network) are not met.
func New(o Options) (*Driver, error) {
	if o.Hypervisor != nil {
		return nil, errors.New("libvirt: Options.Hypervisor must be nil (the driver sets it)")
	}
	sock := o.Socket
	if sock == "" {
		sock = DefaultSocket
	}
	machine := o.Machine
	if machine == "" {
		machine = DefaultMachine
	}
	if !validToken(machine) {
		return nil, fmt.Errorf("libvirt: Machine %q is not a machine type name", machine)
	}
	if _, err := os.Stat(sock); err != nil {
		return nil, fmt.Errorf("libvirt: libvirtd is not running or not installed (no socket %s: %v); on Debian install libvirt-daemon-system and start libvirtd: %w", sock, err, vm.ErrUnavailable)
	}
	hv := &hypervisor{socket: sock, machine: machine, emulator: o.QEMUBin}
	if err := hv.connect(); err != nil {
		return nil, fmt.Errorf("libvirt: cannot reach libvirtd at %s: %v: %w", sock, err, vm.ErrUnavailable)
	}
	ko := o.Options
	ko.Hypervisor = hv
	ko.QEMUBin = ""
	d, err := kvm.New(ko)
	if err != nil {
		hv.close()
		return nil, err
	}
	return &Driver{Driver: d, hv: hv}, nil
}

// Close ends the driver's connection to libvirtd. The guests keep running
// (a new Driver adopts them).
func (d *Driver) Close() error { return d.hv.close() }

// validToken accepts what may stand in a machine type or similar name.
func validToken(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, c := range s {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// callTimeout bounds one call to libvirtd when the caller's context has no
// deadline: go-libvirt's calls take no context, so a wedged daemon must
// not hang berth.
const callTimeout = 2 * time.Minute

// hypervisor is the kvm.Hypervisor that has libvirtd run QEMU.
type hypervisor struct {
	socket   string
	machine  string
	emulator string

	mu sync.Mutex
	l  *golibvirt.Libvirt // nil until connected
}

// connect (re)establishes the connection to libvirtd when it is down:
// libvirtd may have been restarted since (its guests keep running).
func (h *hypervisor) connect() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.l != nil && h.l.IsConnected() {
		return nil
	}
	l := golibvirt.NewWithDialer(dialers.NewLocal(dialers.WithSocket(h.socket), dialers.WithLocalTimeout(5*time.Second)))
	if err := l.ConnectToURI(golibvirt.QEMUSystem); err != nil {
		return err
	}
	h.l = l
	return nil
}

func (h *hypervisor) close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.l == nil {
		return nil
	}
	err := h.l.Disconnect()
	h.l = nil
	return err
}

// call runs fn with a connection to libvirtd, giving up when ctx ends (fn
// then finishes in the background).
func (h *hypervisor) call(ctx context.Context, fn func(l *golibvirt.Libvirt) error) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, callTimeout)
		defer cancel()
	}
	done := make(chan error, 1)
	go func() {
		if err := h.connect(); err != nil {
			done <- fmt.Errorf("libvirtd at %s: %w", h.socket, err)
			return
		}
		h.mu.Lock()
		l := h.l
		h.mu.Unlock()
		if l == nil {
			done <- errors.New("libvirt: the connection was closed")
			return
		}
		done <- fn(l)
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("libvirtd did not answer: %w", ctx.Err())
	}
}

// onDomain runs fn on the domain named id.
func (h *hypervisor) onDomain(ctx context.Context, id string, fn func(l *golibvirt.Libvirt, dom golibvirt.Domain) error) error {
	return h.call(ctx, func(l *golibvirt.Libvirt) error {
		dom, err := l.DomainLookupByName(id)
		if err != nil {
			return err
		}
		return fn(l, dom)
	})
}

// Launch creates the transient domain and finds its QEMU process.
func (h *hypervisor) Launch(ctx context.Context, m kvm.Machine) (int, error) {
	b, err := domainXML(m, h.machine, h.emulator)
	if err != nil {
		return 0, err
	}
	err = h.call(ctx, func(l *golibvirt.Libvirt) error {
		_, err := l.DomainCreateXML(string(b), golibvirt.DomainNone)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("libvirt: creating domain %s: %w", m.ID, err)
	}
	pid, err := qemuPID(m.ID)
	if err != nil {
		h.Kill(context.WithoutCancel(ctx), m.ID)
		return 0, fmt.Errorf("libvirt: domain %s runs, but %w", m.ID, err)
	}
	return pid, nil
}

// Linux key codes of Ctrl-Alt-Del (virDomainSendKey, codeset linux).
var ctrlAltDel = []uint32{29, 56, 111} // KEY_LEFTCTRL, KEY_LEFTALT, KEY_DELETE

// Shutdown sends Ctrl-Alt-Del, which the agent as init receives as SIGINT.
func (h *hypervisor) Shutdown(ctx context.Context, id string) error {
	return h.onDomain(ctx, id, func(l *golibvirt.Libvirt, dom golibvirt.Domain) error {
		return l.DomainSendKey(dom, uint32(golibvirt.KeycodeSetLinux), 0, ctrlAltDel, 0)
	})
}

// Pause suspends the domain's vCPUs.
func (h *hypervisor) Pause(ctx context.Context, id string) error {
	return h.onDomain(ctx, id, func(l *golibvirt.Libvirt, dom golibvirt.Domain) error { return l.DomainSuspend(dom) })
}

// Continue resumes them.
func (h *hypervisor) Continue(ctx context.Context, id string) error {
	return h.onDomain(ctx, id, func(l *golibvirt.Libvirt, dom golibvirt.Domain) error { return l.DomainResume(dom) })
}

// Kill destroys the domain; one that is gone already is no error.
func (h *hypervisor) Kill(ctx context.Context, id string) error {
	err := h.onDomain(ctx, id, func(l *golibvirt.Libvirt, dom golibvirt.Domain) error { return l.DomainDestroy(dom) })
	if golibvirt.IsNotFound(err) {
		return nil
	}
	return err
}

// qemuPID finds the QEMU process libvirtd started for domain id: libvirt
// names it with "-name guest=<id>,...". libvirtd's own pid file for it is
// under its run directory, which need not be visible to berth (libvirtd
// may run in a mount namespace of its own).
func qemuPID(id string) (int, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	want := "guest=" + id + ","
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		for i := 0; i+1 < len(args); i++ {
			if args[i] == "-name" && (strings.HasPrefix(args[i+1], want) || args[i+1] == "guest="+id) {
				return pid, nil
			}
		}
	}
	return 0, errors.New("no QEMU process of it is to be found in /proc")
}

// The domain XML, as far as the driver writes it.
type (
	domain struct {
		XMLName    xml.Name `xml:"domain"`
		Type       string   `xml:"type,attr"`
		Name       string   `xml:"name"`
		Memory     memory   `xml:"memory"`
		VCPU       int      `xml:"vcpu"`
		OS         osXML    `xml:"os"`
		Features   features `xml:"features"`
		CPU        cpu      `xml:"cpu"`
		Clock      clock    `xml:"clock"`
		OnPoweroff string   `xml:"on_poweroff"`
		OnReboot   string   `xml:"on_reboot"`
		OnCrash    string   `xml:"on_crash"`
		Devices    devices  `xml:"devices"`
		SecLabel   secLabel `xml:"seclabel"`
	}
	memory struct {
		Unit  string `xml:"unit,attr"`
		Value int    `xml:",chardata"`
	}
	osXML struct {
		Type    osType `xml:"type"`
		Kernel  string `xml:"kernel"`
		Initrd  string `xml:"initrd,omitempty"`
		Cmdline string `xml:"cmdline"`
	}
	osType struct {
		Arch    string `xml:"arch,attr"`
		Machine string `xml:"machine,attr"`
		Value   string `xml:",chardata"`
	}
	features struct {
		ACPI *struct{} `xml:"acpi"`
	}
	cpu struct {
		Mode string `xml:"mode,attr"`
	}
	clock struct {
		Offset string `xml:"offset,attr"`
	}
	devices struct {
		Emulator    string     `xml:"emulator,omitempty"`
		Disks       []disk     `xml:"disk"`
		Filesystems []fsXML    `xml:"filesystem"`
		Interface   iface      `xml:"interface"`
		Serial      serial     `xml:"serial"`
		Channel     channel    `xml:"channel"`
		Controller  controller `xml:"controller"`
		MemBalloon  modelOnly  `xml:"memballoon"`
		Video       video      `xml:"video"`
	}
	disk struct {
		Type     string    `xml:"type,attr"`
		Device   string    `xml:"device,attr"`
		Driver   driverXML `xml:"driver"`
		Source   source    `xml:"source"`
		Target   target    `xml:"target"`
		ReadOnly *struct{} `xml:"readonly"`
	}
	fsXML struct {
		Type       string    `xml:"type,attr"`
		AccessMode string    `xml:"accessmode,attr"`
		Source     fsSource  `xml:"source"`
		Target     fsSource  `xml:"target"`
		ReadOnly   *struct{} `xml:"readonly"`
	}
	fsSource struct {
		Dir string `xml:"dir,attr"`
	}
	driverXML struct {
		Name string `xml:"name,attr"`
		Type string `xml:"type,attr"`
	}
	source struct {
		File   string `xml:"file,attr,omitempty"`
		Path   string `xml:"path,attr,omitempty"`
		Mode   string `xml:"mode,attr,omitempty"`
		Append string `xml:"append,attr,omitempty"`
	}
	target struct {
		Dev     string `xml:"dev,attr,omitempty"`
		Bus     string `xml:"bus,attr,omitempty"`
		Managed string `xml:"managed,attr,omitempty"`
		Type    string `xml:"type,attr,omitempty"`
		Name    string `xml:"name,attr,omitempty"`
		Port    string `xml:"port,attr,omitempty"`
	}
	iface struct {
		Type   string    `xml:"type,attr"`
		MAC    mac       `xml:"mac"`
		Target target    `xml:"target"`
		Model  modelType `xml:"model"`
	}
	mac struct {
		Address string `xml:"address,attr"`
	}
	modelType struct {
		Type string `xml:"type,attr"`
	}
	modelOnly struct {
		Model string `xml:"model,attr"`
	}
	video struct {
		Model modelType `xml:"model"`
	}
	serial struct {
		Type   string `xml:"type,attr"`
		Source source `xml:"source"`
		Target target `xml:"target"`
	}
	channel struct {
		Type   string `xml:"type,attr"`
		Source source `xml:"source"`
		Target target `xml:"target"`
	}
	controller struct {
		Type  string `xml:"type,attr"`
		Model string `xml:"model,attr"`
	}
	secLabel struct {
		Type    string `xml:"type,attr"`
		Model   string `xml:"model,attr"`
		Relabel string `xml:"relabel,attr"`
		Label   string `xml:"label"`
	}
)

// domainXML is the transient domain of a guest: direct kernel boot with the
// kvm driver's command line; the root disk as vda and the config drive as
// vdb (read-only), virtio; the tap berth made as eth0 (libvirt neither
// creates nor deletes it); ttyS0 appended to the console file; the agent's
// virtio serial port behind a unix socket libvirt's QEMU listens on; every
// way the guest ends (power off, reboot, crash) destroying the domain, as
// -no-reboot does for the kvm driver; and the workspace, if any, shared
// over virtio 9p (virtio-9p-pci on the pc machine) under the tag
// kvm.WorkspaceTag, with the passthrough access mode as the kvm driver's
// QEMU shares it, and each mount likewise, under kvm.MountTag(i) and
// <readonly/> (QEMU's readonly=on). QEMU runs as root with the files
// left as they are (a static DAC label): the replica's directory is
// berth's, mode 0700.
func domainXML(m kvm.Machine, machine, emulator string) ([]byte, error) {
	typ := "qemu"
	cpuMode := "maximum"
	switch m.Accel {
	case "kvm":
		typ, cpuMode = "kvm", "host-passthrough"
	case "tcg":
	default:
		return nil, fmt.Errorf("libvirt: accelerator %q: want kvm or tcg", m.Accel)
	}
	dom := domain{
		Type:   typ,
		Name:   m.ID,
		Memory: memory{Unit: "MiB", Value: m.MemoryMB},
		VCPU:   m.VCPUs,
		OS: osXML{
			Type:    osType{Arch: "x86_64", Machine: machine, Value: "hvm"},
			Kernel:  m.Kernel,
			Initrd:  m.Initrd,
			Cmdline: m.Cmdline,
		},
		Features:   features{ACPI: &struct{}{}},
		CPU:        cpu{Mode: cpuMode},
		Clock:      clock{Offset: "utc"},
		OnPoweroff: "destroy",
		OnReboot:   "destroy",
		OnCrash:    "destroy",
		Devices: devices{
			Emulator: emulator,
			Disks: []disk{
				{Type: "file", Device: "disk", Driver: driverXML{"qemu", "raw"}, Source: source{File: m.RootDisk}, Target: target{Dev: "vda", Bus: "virtio"}},
				{Type: "file", Device: "disk", Driver: driverXML{"qemu", "raw"}, Source: source{File: m.ConfigDisk}, Target: target{Dev: "vdb", Bus: "virtio"}, ReadOnly: &struct{}{}},
			},
			Interface: iface{Type: "ethernet", MAC: mac{m.MAC}, Target: target{Dev: m.Tap, Managed: "no"}, Model: modelType{"virtio"}},
			Serial:    serial{Type: "file", Source: source{Path: m.Console, Append: "on"}, Target: target{Port: "0"}},
			Channel: channel{Type: "unix", Source: source{Mode: "bind", Path: m.AgentSocket},
				Target: target{Type: "virtio", Name: kvm.AgentPortName}},
			Controller: controller{Type: "usb", Model: "none"},
			MemBalloon: modelOnly{Model: "none"},
			Video:      video{Model: modelType{"none"}},
		},
		SecLabel: secLabel{Type: "static", Model: "dac", Relabel: "no", Label: "+0:+0"},
	}
	if m.Workspace != "" {
		dom.Devices.Filesystems = append(dom.Devices.Filesystems, fsXML{Type: "mount", AccessMode: "passthrough",
			Source: fsSource{m.Workspace}, Target: fsSource{kvm.WorkspaceTag}})
	}
	for i, mt := range m.Mounts {
		dom.Devices.Filesystems = append(dom.Devices.Filesystems, fsXML{Type: "mount", AccessMode: "passthrough",
			Source: fsSource{mt.Source}, Target: fsSource{kvm.MountTag(i)}, ReadOnly: &struct{}{}})
	}
	return xml.MarshalIndent(dom, "", "  ")
}

// Check reports whether guests can still start: libvirtd answers (a
// libvirtd that died after berth started is noticed here; the connection
// is re-established once it is back) and the kvm driver's own needs are
// met.
func (d *Driver) Check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err := d.hv.call(ctx, func(l *golibvirt.Libvirt) error {
		_, err := l.ConnectGetLibVersion()
		return err
	})
	if err != nil {
		d.hv.close()
		return fmt.Errorf("libvirt: libvirtd at %s does not answer: %v: %w", d.hv.socket, err, vm.ErrUnavailable)
	}
	return d.Driver.Check(ctx)
}
