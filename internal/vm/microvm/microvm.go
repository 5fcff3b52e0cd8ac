// Package microvm is what the microVM drivers (kvm, libvirt through kvm,
// firecracker) share of the host and the guest's network: the image store
// and host network they take (Images, Network), and the guest addresses
// the kernel configures at boot (Addresses, KernelIP, MAC).
//
// It sits below those drivers and above nothing of them; package guest,
// which prepares what they boot, imports kvm, so it cannot be this home.
package microvm

import (
	"cmp"
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/berth-dev/berth/internal/agent"
	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/console"
	"github.com/berth-dev/berth/internal/vm/replicadir"
)

// Images is what a microVM driver needs of the local image store: a
// bootable ext4 disk for an image name, cached; the driver copies it per
// replica.
type Images interface {
	Ext4(name string, sizeGB int) (path string, err error)
}

// Network is what a microVM driver needs of host networking: a tap device
// per replica, attached to berth's bridge, and the addresses around it.
// guestIP is in CIDR notation ("10.77.0.5/24"); a bare address means /24.
// mac may be empty (the driver derives one from the id, see MAC). Deleting
// a tap that is gone must not be an error, so that a retried Stop
// succeeds.
type Network interface {
	CreateTap(ctx context.Context, id string) (tap, guestIP, hostIP, mac string, err error)
	DeleteTap(ctx context.Context, id string) error
}

// Addresses parses what Network.CreateTap returns: the guest's address as
// CIDR (a prefix of 1 to 30 bits) or bare (/24), and the host's, both
// IPv4.
func Addresses(guestIP, hostIP string) (guest netip.Prefix, host netip.Addr, err error) {
	guest, err = parseGuestIP(guestIP)
	if err != nil {
		return guest, host, err
	}
	host, err = netip.ParseAddr(hostIP)
	if err != nil || !host.Is4() {
		return guest, host, fmt.Errorf("host network: host address %q is not IPv4", hostIP)
	}
	return guest, host, nil
}

// parseGuestIP parses the guest's address as CIDR or bare (/24).
func parseGuestIP(s string) (netip.Prefix, error) {
	if p, err := netip.ParsePrefix(s); err == nil && p.Addr().Is4() && p.Bits() > 0 && p.Bits() < 31 {
		return p, nil
	}
	if a, err := netip.ParseAddr(s); err == nil && a.Is4() {
		return netip.PrefixFrom(a, 24), nil
	}
	return netip.Prefix{}, fmt.Errorf("host network: guest address %q is not IPv4 (CIDR with a prefix of 1-30 bits, or bare)", s)
}

// KernelIP is the guest kernel's ip= parameter (CONFIG_IP_PNP) configuring
// eth0 statically: the guest's address, the host's as the gateway and the
// netmask of prefixLen.
func KernelIP(guestIP, hostIP string, prefixLen int) string {
	return fmt.Sprintf("ip=%s::%s:%s::eth0:off", guestIP, hostIP, Mask(prefixLen))
}

// Mask is the dotted netmask of an IPv4 prefix length.
func Mask(bits int) string {
	return net.IP(net.CIDRMask(bits, 32)).String()
}

// MAC derives a stable, locally administered unicast MAC from an id; the
// second octet tells the drivers' apart.
func MAC(driver byte, id string) string {
	s := sha256.Sum256([]byte(id))
	return fmt.Sprintf("02:%02x:%02x:%02x:%02x:%02x", driver, s[0], s[1], s[2], s[3])
}

// CheckSpec is what every microVM driver requires of a spec: what
// replicadir.CheckSpec checks, an image and a disk size that is not
// negative. The error is for the driver to prefix.
func CheckSpec(driver string, spec vm.Spec) (owner string, size vm.Size, err error) {
	if owner, size, err = replicadir.CheckSpec(spec); err != nil {
		return "", size, err
	}
	if spec.Image == "" {
		return "", size, fmt.Errorf("the %s driver needs an image", driver)
	}
	if spec.DiskSizeGB < 0 {
		return "", size, fmt.Errorf("disk size %d GB is negative", spec.DiskSizeGB)
	}
	return owner, size, nil
}

// Ended describes in inst a replica whose guest is gone: a guest whose
// agent ended reboots, which ends the VMM, and the agent's last log line on
// the console ("exit N: reason") says how the app ended: exited, with that
// code and reason and the app's last lines. Without one it failed, with
// the console's last lines; vmm names the VMM for a start interrupted
// before it ran (pid 0). Ended reports whether the app exited.
func Ended(inst *vm.Instance, consoleLog string, pid int, vmm string) (exited bool) {
	inst.PID = 0
	if code, reason, ok := console.Exit(consoleLog); ok {
		inst.State = vm.StateExited
		inst.ExitCode = &code
		inst.Reason = replicadir.WithTail(reason, console.AppTail(consoleLog, replicadir.TailLines))
		return true
	}
	inst.State = vm.StateFailed
	inst.Reason = "the guest ended without the agent recording an exit"
	if pid == 0 {
		inst.Reason = "the start of this replica was interrupted before " + vmm + " ran"
	}
	if tail := console.Tail(consoleLog, replicadir.TailLines); len(tail) > 0 {
		inst.Reason += "; console:\n" + strings.Join(tail, "\n")
	}
	return false
}

// Common is what every microVM driver's Options hold alike.
type Common struct {
	// Dir is the state root; created if missing. Required.
	Dir string
	// Kernel is the guest kernel. Required.
	Kernel string
	// GuestInit is berth's path in the guest disk, the guest's init.
	// Empty means /berth-agent.
	GuestInit string
	// Images and Net are required.
	Images Images
	Net    Network
	// Log nil discards.
	Log *slog.Logger
}

// Check returns c with absolute paths, the state directory made, the
// defaults filled in and the logger set. An error names driver; one
// wrapping vm.ErrUnavailable says what this host lacks (the kernel, the
// image store or the host network).
func (c Common) Check(driver string) (Common, error) {
	fail := func(err error) (Common, error) { return Common{}, fmt.Errorf("%s: %w", driver, err) }
	unavailable := func(format string, args ...any) (Common, error) {
		return Common{}, fmt.Errorf("%s: "+format+": %w", append([]any{driver}, append(args, vm.ErrUnavailable)...)...)
	}
	if c.Kernel == "" {
		return unavailable("no guest kernel configured")
	}
	var err error
	if c.Kernel, err = filepath.Abs(c.Kernel); err != nil {
		return fail(err)
	}
	if _, err := os.Stat(c.Kernel); err != nil {
		return unavailable("guest kernel: %v", err)
	}
	if c.Images == nil {
		return unavailable("no image store")
	}
	if c.Net == nil {
		return unavailable("no host network for tap devices")
	}
	if c.Dir, err = filepath.Abs(c.Dir); err != nil {
		return fail(err)
	}
	if err := os.MkdirAll(c.Dir, 0o700); err != nil {
		return fail(err)
	}
	if c.GuestInit == "" {
		c.GuestInit = "/berth-agent"
	}
	if strings.ContainsAny(c.GuestInit, " \t\n") || !strings.HasPrefix(c.GuestInit, "/") {
		return Common{}, fmt.Errorf("%s: GuestInit %q must be an absolute path without spaces", driver, c.GuestInit)
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

// LookBin finds executable bin (def when empty) in PATH and returns its
// absolute path.
func LookBin(bin, def string) (string, error) {
	if bin == "" {
		bin = def
	}
	p, err := exec.LookPath(bin)
	if err != nil {
		return "", err
	}
	return filepath.Abs(p)
}

// CopyRootDisk copies the ext4 disk of spec's image to dst: copy-on-write
// where the file system can (btrfs, xfs), a sparse copy elsewhere, so that
// every replica writes its own disk.
func CopyRootDisk(ctx context.Context, images Images, spec vm.Spec, dst string) error {
	img, err := images.Ext4(spec.Image, spec.DiskSizeGB)
	if err != nil {
		return fmt.Errorf("image %q: %w", spec.Image, err)
	}
	if out, err := exec.CommandContext(ctx, "cp", "--reflink=auto", "--sparse=always", img, dst).CombinedOutput(); err != nil {
		return fmt.Errorf("copying the root disk: %v: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Tap is a replica's tap device and the addresses around it.
type Tap struct {
	Name, GuestIP, HostIP, MAC string
	PrefixLen                  int
}

// CreateTap makes replica id's tap through n and calls created with its
// name as soon as it exists, for the driver to record it (so that cleanup
// and a later Stop delete it); then it parses the addresses (Addresses)
// and derives the MAC (MAC, with driver) when n gives none.
func CreateTap(ctx context.Context, n Network, id string, driver byte, created func(tap string) error) (Tap, error) {
	name, guestIP, hostIP, mac, err := n.CreateTap(ctx, id)
	if err != nil {
		return Tap{}, fmt.Errorf("tap device: %w", err)
	}
	if err := created(name); err != nil {
		return Tap{}, err
	}
	guest, host, err := Addresses(guestIP, hostIP)
	if err != nil {
		return Tap{}, err
	}
	if mac == "" {
		mac = MAC(driver, id)
	}
	return Tap{Name: name, GuestIP: guest.Addr().String(), PrefixLen: guest.Bits(), HostIP: host.String(), MAC: mac}, nil
}

// Guest is how a driver's guests run the agent, for GuestConfig.
type Guest struct {
	// Listen is the agent's --listen ("vsock:10052").
	Listen string
	// Console is its --log, the guest's console.
	Console string
	// LeaseFile is its --lease-file, passed always, so that Renew can give
	// a lease to a replica started without one (a missing file means no
	// lease).
	LeaseFile string
	// Home is the app's HOME and its working directory by default.
	Home string
	// Base is what a relative Spec.WorkDir is inside; empty means /.
	Base string
	// Root is the agent's --root; empty for none.
	Root string
	// LeaseCheck is its --lease-check; zero means the agent's default.
	LeaseCheck time.Duration
	// Lease is the deadline the guest boots with; zero for none.
	Lease time.Time
}

// GuestConfig is the agent's configuration for replica id of spec, whose
// app listens on port: its flags (the setup hooks, the command under
// /bin/sh -c), and the app's environment: PATH, HOME, HOSTNAME, spec.Env
// and PORT (vm.AppEnv).
func GuestConfig(spec vm.Spec, id string, port int, g Guest) agent.GuestConfig {
	base := cmp.Or(g.Base, "/")
	workDir := spec.WorkDir
	if workDir == "" {
		workDir = g.Home
	} else if !filepath.IsAbs(workDir) {
		workDir = filepath.Join(base, workDir)
	}
	args := []string{
		"--listen", g.Listen,
		"--log", g.Console,
		"--lease-file", g.LeaseFile,
		"--workdir", workDir,
	}
	if g.Root != "" {
		args = append(args, "--root", g.Root)
	}
	if g.LeaseCheck > 0 {
		args = append(args, "--lease-check", g.LeaseCheck.String())
	}
	if spec.User != nil {
		// The image's user: the agent (root, the guest's init) starts
		// everything as it.
		args = append(args, "--user", spec.User.AgentFlag())
	}
	for _, h := range spec.SetupHooks {
		args = append(args, "--setup", h)
	}
	if spec.Command != "" {
		args = append(args, "--", "/bin/sh", "-c", spec.Command)
	}
	env := []string{
		"PATH=" + vm.StdPath,
		"HOME=" + g.Home,
		"HOSTNAME=" + vm.Hostname(id),
	}
	c := agent.GuestConfig{Args: args, Env: vm.AppEnv(env, spec.Env, port), Hostname: vm.Hostname(id)}
	if !g.Lease.IsZero() {
		c.Files = map[string]string{g.LeaseFile: string(agent.FormatLease(g.Lease))}
	}
	return c
}
