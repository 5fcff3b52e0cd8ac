package cli

import (
	"context"
	"errors"
)

// hostCmd documents `berth host`, which the berth binary runs itself
// (package hostcheck): it inspects and prepares this machine, not a
// server, so it needs no --server and works while no berth runs.
var hostCmd = &command{
	name:    "host",
	summary: "Check or prepare this machine for the isolating drivers",
	help: `Usage: berth host check [--data-dir DIR] [--require DRIVER,...] [-o json]
       berth host setup [--data-dir DIR] [--egress]

check reports, for each vm driver (process, container, firecracker, kvm),
whether this machine can run it and what is missing: binaries, kernel
features, /dev/kvm, the bridge, cgroup controllers, privileges. It exits 1
when a driver named by --require is unavailable.

setup creates what berth may create: the guest bridge (BERTH_BRIDGE, default
berth0) with its gateway address on the guest subnet (BERTH_GUEST_SUBNET,
default 10.213.0.0/16), the rules that keep guest egress off (or, with
--egress or BERTH_GUEST_EGRESS=on, NAT for it), berth's directories, and on
hybrid cgroup hosts the cgroup v1 hierarchies crun needs. It is idempotent:
it prints each step, "ok:" when already in place, "changed:" when done.
berth serve, as root, does the same at start-up unless --no-host-setup.
Both run on the machine itself, as root for setup.
`,
	run: func(context.Context, *env, []string) error {
		return errors.New("berth host runs in the berth binary itself; this build does not include it")
	},
}
