// Package placement decides which host of a fleet runs each unit (a
// deployment's replica, a Computer): a pure function of the hosts, the
// units asked for and where they run now, with no I/O.
//
// The rules, in order:
//
//   - only active hosts take new units; a unit already on a cordoned host
//     stays there, one on a draining or vanished host moves;
//   - the host must run the unit's driver and have room for it (CPU,
//     memory, and at most MaxActive−ReservedHeadroom units);
//   - a unit pinned to a host goes there or nowhere, with a reason;
//   - a unit that runs on a host where it may stay is not moved;
//   - among the hosts that fit: fewest units of the same group first
//     (replicas spread over distinct hosts while there are enough), then a
//     host that has the unit's image, then the most free capacity (the
//     fraction left of its tightest dimension), then the fewest units
//     (hosts that declare no capacity), then the lowest host id. The same input always gives the same answer.
package placement

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// State is a host's scheduling state.
type State string

// The states. The zero State is taken for Active.
const (
	Active   State = "active"
	Cordoned State = "cordoned"
	Draining State = "draining"
)

// Host is a host as placement sees it. A capacity of zero means no limit
// on that dimension.
type Host struct {
	ID      string
	Drivers []string
	State   State
	// CPUMillis and MemoryBytes are what the host offers units.
	CPUMillis   int64
	MemoryBytes int64
	// MaxActive is the most units the host runs; ReservedHeadroom of
	// them are kept free (the host takes MaxActive−ReservedHeadroom).
	MaxActive        int
	ReservedHeadroom int
	// Images are the images the host has locally.
	Images []string
	// Load is what runs on the host besides the units placed here.
	Load Load
}

// Load is what a host already spends.
type Load struct {
	CPUMillis   int64
	MemoryBytes int64
	Units       int
}

// Request is one unit to place.
type Request struct {
	// Unit identifies it: "deployment/web/2", "computer/c1".
	Unit string `json:"unit"`
	// Group is what its replicas share (the deployment id): they are
	// spread over distinct hosts. Empty: a group of its own.
	Group       string `json:"group,omitempty"`
	Driver      string `json:"driver"`
	Image       string `json:"image,omitempty"`
	CPUMillis   int64  `json:"cpu_millis,omitempty"`
	MemoryBytes int64  `json:"memory_bytes,omitempty"`
	// Host pins the unit to one host (the Computer contract's on-box-vm
	// {hostId}).
	Host string `json:"host,omitempty"`
}

// Assignment is a unit placed on a host.
type Assignment struct {
	Unit  string
	Group string
	Host  string
	// Kept: the unit ran there already and stays.
	Kept bool
}

// Code says why a unit was not placed.
type Code string

// The codes.
const (
	// Invalid: the request is malformed (the reason names the field).
	Invalid Code = "invalid"
	// UnknownHost: the pinned host is not in the fleet.
	UnknownHost Code = "unknown-host"
	// HostNotActive: the pinned host is cordoned or draining.
	HostNotActive Code = "host-not-active"
	// DriverMissing: the pinned host, or every active host, lacks the
	// driver.
	DriverMissing Code = "driver-missing"
	// NoCapacity: the pinned host, or every active host with the driver,
	// is full.
	NoCapacity Code = "no-capacity"
	// NoHost: there is no active host at all.
	NoHost Code = "no-host"
)

// Unplaced is a unit that no host takes, and why.
type Unplaced struct {
	Unit   string
	Code   Code
	Reason string
}

// host is a Host being filled.
type host struct {
	h        *Host
	drivers  map[string]bool
	images   map[string]bool
	units    int   // placed or kept here
	cpu, mem int64 // used, Load included
	maxUnits int   // 0: no limit; -1: none may run
}

func (h *host) fits(r *Request) bool {
	if h.maxUnits != 0 && h.units+1 > h.maxUnits {
		return false
	}
	if h.h.CPUMillis > 0 && h.cpu+r.CPUMillis > h.h.CPUMillis {
		return false
	}
	if h.h.MemoryBytes > 0 && h.mem+r.MemoryBytes > h.h.MemoryBytes {
		return false
	}
	return true
}

func (h *host) take(r *Request) {
	h.units++
	h.cpu += r.CPUMillis
	h.mem += r.MemoryBytes
}

// free is the fraction left of the host's tightest dimension once r is
// placed (1 when nothing is limited).
func (h *host) free(r *Request) float64 {
	f := 1.0
	if h.maxUnits > 0 {
		f = min(f, float64(h.maxUnits-h.units-1)/float64(h.maxUnits))
	}
	if h.h.CPUMillis > 0 {
		f = min(f, float64(h.h.CPUMillis-h.cpu-r.CPUMillis)/float64(h.h.CPUMillis))
	}
	if h.h.MemoryBytes > 0 {
		f = min(f, float64(h.h.MemoryBytes-h.mem-r.MemoryBytes)/float64(h.h.MemoryBytes))
	}
	return f
}

func (h *host) state() State {
	if h.h.State == "" {
		return Active
	}
	return h.h.State
}

// Place places requests on hosts, keeping the units of current (unit →
// host) where they run when they may stay. Assignments and unplaced are
// sorted by unit. Hosts with an empty or repeated id are ignored (the
// first of an id counts); requests with an empty or repeated unit, or a
// negative size, come back unplaced as Invalid. Its cost is about
// (units × hosts).
func Place(hosts []Host, requests []Request, current map[string]string) ([]Assignment, []Unplaced) {
	hs := make([]*host, 0, len(hosts))
	byID := make(map[string]int, len(hosts))
	for i := range hosts {
		h := &hosts[i]
		if _, dup := byID[h.ID]; h.ID == "" || dup {
			continue
		}
		x := &host{h: h, drivers: set(h.Drivers), images: set(h.Images), units: h.Load.Units, cpu: h.Load.CPUMillis, mem: h.Load.MemoryBytes}
		if h.MaxActive > 0 {
			x.maxUnits = max(h.MaxActive-h.ReservedHeadroom, 0)
			if x.maxUnits == 0 {
				x.maxUnits = -1 // all of it held back
			}
		}
		byID[h.ID] = len(hs)
		hs = append(hs, x)
	}
	// Hosts in id order: the first best host is the lowest id.
	slices.SortFunc(hs, func(a, b *host) int { return strings.Compare(a.h.ID, b.h.ID) })
	for i, h := range hs {
		byID[h.h.ID] = i
	}

	var (
		out      []Assignment
		unplaced []Unplaced
	)
	reqs := make([]*Request, 0, len(requests))
	seen := make(map[string]bool, len(requests))
	for i := range requests {
		r := &requests[i]
		if reason := invalid(r, seen); reason != "" {
			unplaced = append(unplaced, Unplaced{Unit: r.Unit, Code: Invalid, Reason: fmt.Sprintf("request %d: %s", i, reason)})
			continue
		}
		seen[r.Unit] = true
		reqs = append(reqs, r)
	}
	slices.SortFunc(reqs, func(a, b *Request) int { return strings.Compare(a.Unit, b.Unit) })

	// groups counts each group's units by host index.
	groups := map[string][]int32{}
	count := func(r *Request) []int32 {
		g := groups[groupOf(r)]
		if g == nil {
			g = make([]int32, len(hs))
			groups[groupOf(r)] = g
		}
		return g
	}

	// First the units that stay: they are charged before any new one.
	var pending []*Request
	for _, r := range reqs {
		i, ok := byID[current[r.Unit]]
		if ok && current[r.Unit] != "" {
			h := hs[i]
			st := h.state()
			if (st == Active || st == Cordoned) && h.drivers[r.Driver] && (r.Host == "" || r.Host == h.h.ID) && h.fits(r) {
				h.take(r)
				count(r)[i]++
				out = append(out, Assignment{Unit: r.Unit, Group: r.Group, Host: h.h.ID, Kept: true})
				continue
			}
		}
		pending = append(pending, r)
	}

	// Then the new (or moved) ones: pinned first, since they have one
	// choice, then in unit order.
	slices.SortStableFunc(pending, func(a, b *Request) int {
		return cmp.Compare(pin(b), pin(a)) // the pinned first
	})
	for _, r := range pending {
		if r.Host != "" {
			i, ok := byID[r.Host]
			if !ok {
				unplaced = append(unplaced, Unplaced{Unit: r.Unit, Code: UnknownHost, Reason: fmt.Sprintf("pinned host %q is not in the fleet", r.Host)})
				continue
			}
			h := hs[i]
			switch {
			case h.state() != Active:
				unplaced = append(unplaced, Unplaced{Unit: r.Unit, Code: HostNotActive, Reason: fmt.Sprintf("pinned host %q is %s", r.Host, h.state())})
			case !h.drivers[r.Driver]:
				unplaced = append(unplaced, Unplaced{Unit: r.Unit, Code: DriverMissing, Reason: fmt.Sprintf("pinned host %q does not run driver %q", r.Host, r.Driver)})
			case !h.fits(r):
				unplaced = append(unplaced, Unplaced{Unit: r.Unit, Code: NoCapacity, Reason: fmt.Sprintf("pinned host %q is full (%s)", r.Host, size(r))})
			default:
				h.take(r)
				count(r)[i]++
				out = append(out, Assignment{Unit: r.Unit, Group: r.Group, Host: h.h.ID})
			}
			continue
		}
		g := count(r)
		best, bestSpread, bestImage, bestFree, bestUnits := -1, int32(0), false, 0.0, 0
		active, withDriver := 0, 0
		for i, h := range hs {
			if h.state() != Active {
				continue
			}
			active++
			if !h.drivers[r.Driver] {
				continue
			}
			withDriver++
			if !h.fits(r) {
				continue
			}
			spread, image, free := g[i], r.Image != "" && h.images[r.Image], h.free(r)
			if best < 0 || spread < bestSpread ||
				spread == bestSpread && (image && !bestImage ||
					image == bestImage && (free > bestFree ||
						free == bestFree && h.units < bestUnits)) {
				best, bestSpread, bestImage, bestFree, bestUnits = i, spread, image, free, h.units
			}
		}
		switch {
		case best >= 0:
			hs[best].take(r)
			g[best]++
			out = append(out, Assignment{Unit: r.Unit, Group: r.Group, Host: hs[best].h.ID})
		case active == 0:
			unplaced = append(unplaced, Unplaced{Unit: r.Unit, Code: NoHost, Reason: "no active host in the fleet"})
		case withDriver == 0:
			unplaced = append(unplaced, Unplaced{Unit: r.Unit, Code: DriverMissing, Reason: fmt.Sprintf("no active host runs driver %q", r.Driver)})
		default:
			unplaced = append(unplaced, Unplaced{Unit: r.Unit, Code: NoCapacity, Reason: fmt.Sprintf("no active host with driver %q has room (%s)", r.Driver, size(r))})
		}
	}
	slices.SortFunc(out, func(a, b Assignment) int { return strings.Compare(a.Unit, b.Unit) })
	slices.SortStableFunc(unplaced, func(a, b Unplaced) int { return strings.Compare(a.Unit, b.Unit) })
	return out, unplaced
}

// invalid names what is wrong with r, or "".
func invalid(r *Request, seen map[string]bool) string {
	switch {
	case r.Unit == "":
		return "unit is empty"
	case seen[r.Unit]:
		return fmt.Sprintf("unit %q is repeated", r.Unit)
	case r.Driver == "":
		return fmt.Sprintf("unit %q: driver is empty", r.Unit)
	case r.CPUMillis < 0:
		return fmt.Sprintf("unit %q: cpu_millis %d is negative", r.Unit, r.CPUMillis)
	case r.MemoryBytes < 0:
		return fmt.Sprintf("unit %q: memory_bytes %d is negative", r.Unit, r.MemoryBytes)
	}
	return ""
}

// groupOf is r's spread group: its Group, or the unit alone.
func groupOf(r *Request) string {
	if r.Group == "" {
		return "\x00" + r.Unit
	}
	return r.Group
}

func size(r *Request) string {
	return fmt.Sprintf("cpu %dm, memory %d bytes, 1 unit", r.CPUMillis, r.MemoryBytes)
}

func pin(r *Request) int {
	if r.Host != "" {
		return 1
	}
	return 0
}

func set(xs []string) map[string]bool {
	m := make(map[string]bool, len(xs))
	for _, x := range xs {
		m[x] = true
	}
	return m
}
