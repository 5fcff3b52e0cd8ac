package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/berth-dev/berth/apitype"
)

// hostCmd is `berth host`: check and setup, which the berth binary runs
// itself (package hostcheck: they inspect and prepare this machine, not a
// server, so they need no --server and work while no berth runs), and
// cordon, drain and uncordon, which change a host of the server's fleet.
var hostCmd = &command{
	name:    "host",
	summary: "Check or prepare this machine; cordon, drain or uncordon a fleet host",
	help: `Usage: berth host check [--data-dir DIR] [--require DRIVER,...] [-o json]
       berth host setup [--data-dir DIR] [--egress]
       berth host cordon|drain|uncordon ID
       berth get hosts [ID] [-o json|yaml|name|wide]

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

cordon, drain and uncordon act on a host of the fleet the server belongs
to (berth serve --etcd): a cordoned or draining host starts no new
Computers (those running keep running and keep their fleet slots; drain
does not move work yet), and uncordon makes it active again. The state is
kept in etcd and outlives the host's restarts. get hosts lists the live
hosts: STATE, the fleet SLOTS their Computers hold, their capacity
(--computer-max-active) and age. These need a fleet-wide credential.
`,
	run: runHost,
}

func runHost(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 {
		return usagef("missing subcommand (check, setup, cordon, drain or uncordon)")
	}
	sub, rest := args[0], args[1:]
	switch sub {
	case "cordon", "drain", "uncordon":
	case "check", "setup":
		return errors.New("berth host " + sub + " runs in the berth binary itself, before any global flag; this build does not include it")
	default:
		return usagef("unknown subcommand %q (check, setup, cordon, drain or uncordon)", sub)
	}
	pos, err := e.parse(e.flagSet("host "+sub), rest)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("want one host ID")
	}
	c, err := e.client()
	if err != nil {
		return err
	}
	var h *apitype.FleetHost
	switch sub {
	case "cordon":
		h, err = c.CordonHost(ctx, pos[0])
	case "drain":
		h, err = c.DrainHost(ctx, pos[0])
	default:
		h, err = c.UncordonHost(ctx, pos[0])
	}
	if err != nil {
		return err
	}
	if e.structured() {
		return e.printValue("host", h)
	}
	fmt.Fprintf(e.stdout, "host/%s %s\n", h.ID, h.State)
	return nil
}

// listHosts prints the fleet's live hosts (`get hosts`), or one.
func (e *env) listHosts(ctx context.Context, id string) error {
	c, err := e.client()
	if err != nil {
		return err
	}
	if e.structured() {
		if id == "" {
			var raw json.RawMessage
			if _, err := c.Do(ctx, "GET", "/fleet/hosts", nil, &raw); err != nil {
				return err
			}
			return e.printDocs("host", []json.RawMessage{raw}, false)
		}
		return e.printItem(ctx, c, "/fleet/hosts", "hosts", "host", "id", id)
	}
	fl, err := c.FleetHosts(ctx)
	if err != nil {
		return err
	}
	hs := fl.Hosts
	if id != "" {
		hs = nil
		for _, h := range fl.Hosts {
			if h.ID == id {
				hs = append(hs, h)
			}
		}
		if len(hs) == 0 {
			return fmt.Errorf("no host %q in the fleet (a host that is down is not listed)", id)
		}
	}
	if len(hs) == 0 {
		fmt.Fprintln(e.stderr, "No hosts found.")
		return nil
	}
	wide := e.output == "wide"
	tw := newTable(e.stdout)
	if wide {
		row(tw, "HOST", "STATE", "SLOTS", "MAX-ACTIVE", "HEADROOM", "CPUS", "MEMORY", "DRIVERS", "ADDRESS", "VERSION", "AGE")
	} else {
		row(tw, "HOST", "STATE", "SLOTS", "MAX-ACTIVE", "ADDRESS", "AGE")
	}
	for _, h := range hs {
		name := h.ID
		if h.ID == fl.Self {
			name += " (this)"
		}
		maxActive := "-"
		if h.Capacity.MaxActive > 0 {
			maxActive = fmt.Sprint(h.Capacity.MaxActive)
		}
		ageS := age(int(time.Since(time.Unix(h.StartedAt, 0)) / time.Second))
		if wide {
			row(tw, name, h.State, h.Slots, maxActive, h.Capacity.ReservedHeadroom, h.Capacity.CPUs, sizeString(h.Capacity.MemoryBytes),
				strings.Join(h.Drivers, ","), h.Address, h.Version, ageS)
		} else {
			row(tw, name, h.State, h.Slots, maxActive, h.Address, ageS)
		}
	}
	tw.Flush()
	if id == "" {
		limit := "no fleet limit"
		if fl.Slots.Limit > 0 {
			limit = fmt.Sprintf("of %d", fl.Slots.Limit)
		}
		fmt.Fprintf(e.stdout, "\n%d fleet slots held, %s\n", fl.Slots.Held, limit)
	}
	return nil
}
