// Package microvm is what the microVM drivers (kvm, libvirt through kvm,
// firecracker) share of the host and the guest's network: the image store
// and host network they take (Images, Network), and the guest addresses
// the kernel configures at boot (Addresses, KernelIP, MAC).
//
// It sits below those drivers and above nothing of them; package guest,
// which prepares what they boot, imports kvm, so it cannot be this home.
package microvm

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net"
	"net/netip"
	"strings"

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
