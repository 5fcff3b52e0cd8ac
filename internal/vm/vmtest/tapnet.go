package vmtest

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
)

// TapNet is a minimal host network for the microVM drivers' tests (their
// Network): one tap per replica with a /30 of its own
// (<Net>.<n>.0/30: host .1, guest .2), no bridge and no NAT, which is all
// the conformance suite needs (berth reaches the guest). It needs root.
type TapNet struct {
	// Prefix starts each tap's name ("kvmt"): the drivers' runs may
	// overlap on one host.
	Prefix string
	// Net is the first two octets of the taps' subnets ("172.31").
	Net string
	// Base offsets the third octet (e.g. by the pid), so that concurrent
	// runs take different subnets.
	Base int

	mu   sync.Mutex
	taps map[string]string
	n    atomic.Int32
}

// CreateTap makes id's tap with its host address and returns it and the
// guest's address.
func (n *TapNet) CreateTap(ctx context.Context, id string) (tap, guestIP, hostIP, mac string, err error) {
	sub := (n.Base + int(n.n.Add(1))) % 256
	tap = fmt.Sprintf("%s%d", n.Prefix, sub)
	host := fmt.Sprintf("%s.%d.1", n.Net, sub)
	exec.CommandContext(ctx, "ip", "link", "del", tap).Run() // left over by a killed run
	for _, args := range [][]string{
		{"tuntap", "add", "dev", tap, "mode", "tap"},
		{"addr", "add", host + "/30", "dev", tap},
		{"link", "set", tap, "up"},
	} {
		if out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput(); err != nil {
			exec.Command("ip", "link", "del", tap).Run()
			return "", "", "", "", fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	n.mu.Lock()
	if n.taps == nil {
		n.taps = map[string]string{}
	}
	n.taps[id] = tap
	n.mu.Unlock()
	return tap, fmt.Sprintf("%s.%d.2/30", n.Net, sub), host, "", nil
}

// DeleteTap deletes id's tap; one that is gone is not an error.
func (n *TapNet) DeleteTap(ctx context.Context, id string) error {
	n.mu.Lock()
	tap, ok := n.taps[id]
	delete(n.taps, id)
	n.mu.Unlock()
	if !ok {
		return nil
	}
	if out, err := exec.CommandContext(ctx, "ip", "link", "del", tap).CombinedOutput(); err != nil && !strings.Contains(string(out), "Cannot find") {
		return fmt.Errorf("ip link del %s: %v: %s", tap, err, out)
	}
	return nil
}

// FixedImage serves one disk for every image name (the microVM drivers'
// Images).
type FixedImage string

// Ext4 returns the disk.
func (i FixedImage) Ext4(name string, sizeGB int) (string, error) { return string(i), nil }
