package computer

import (
	"context"
	"fmt"
	"github.com/berth-dev/berth/apitype/computertype"
	"strconv"
	"time"

	"github.com/berth-dev/berth/internal/store"
)

// UsageInterval is one runtime observation of the usage ledger
// (computerUsageIntervalSchema), and the Computer whose runtime it is:
// berth's ledger spans every Computer of the host. The API answers it as
// an interval fact, which names the Computer the contract's way.
type UsageInterval struct {
	RuntimeID  string
	Backing    Backing
	StartedAt  int64
	ObservedAt int64
	Ended      bool
	ComputerID string
}

// PendingUsage returns at most MaxPendingUsage intervals whose current
// observation the billing host has not acknowledged, oldest first. A
// running runtime's observation (its checkpoint) advances at most once per
// Options.Checkpoint, so repeated reads within one checkpoint return the
// same intervals: a host that crashed between reading and acknowledging
// reads them again, and bills each runtime up to the largest ObservedAt it
// has seen for it — nothing is lost or counted twice.
func (m *Manager) PendingUsage(ctx context.Context) ([]UsageInterval, error) {
	rows, err := m.st.PendingUsage(ctx, m.now().UnixMilli(), m.o.Checkpoint, MaxPendingUsage)
	if err != nil {
		return nil, m.storeErr(err)
	}
	out := make([]UsageInterval, len(rows))
	for i, r := range rows {
		out[i] = UsageInterval{RuntimeID: r.RuntimeID, Backing: parseBacking(r.Backing), StartedAt: r.StartedAt,
			ObservedAt: r.ObservedAt, Ended: r.Ended, ComputerID: r.ComputerID}
	}
	return out, nil
}

// AcknowledgeUsage records that the billing host has the given
// observations. It is idempotent; an ended interval whose end is
// acknowledged is deleted. Unknown runtimes are ignored (acknowledged
// before).
func (m *Manager) AcknowledgeUsage(ctx context.Context, ivs []UsageInterval) error {
	acks := make([]store.UsageAck, len(ivs))
	for i, iv := range ivs {
		if iv.RuntimeID == "" {
			return fmt.Errorf("%w: intervals[%d]: runtimeId is required", ErrInvalid, i)
		}
		if iv.ObservedAt < 0 {
			return fmt.Errorf("%w: intervals[%d]: observedAt must not be negative", ErrInvalid, i)
		}
		acks[i] = store.UsageAck{RuntimeID: iv.RuntimeID, ObservedAt: iv.ObservedAt}
	}
	return m.storeErr(m.st.AcknowledgeUsage(ctx, acks))
}

// SetHostCapacity registers or replaces a host's capacity
// (hostCapacitySchema: maxActive ≥ 1, 0 ≤ reservedHeadroom < maxActive).
// Without Options.FleetLimit, the fleet's slots are the registry's sum of
// maxActive − reservedHeadroom; each on-box-vm host also takes at most its
// own maxActive − reservedHeadroom.
func (m *Manager) SetHostCapacity(ctx context.Context, hostID string, c HostCapacity) error {
	if hostID == "" || len(hostID) > 128 {
		return fmt.Errorf("%w: hostId must have 1 to 128 characters", ErrInvalid)
	}
	if err := validateHostCapacity(c); err != nil {
		return err
	}
	return m.storeErr(m.st.PutComputerHost(ctx, hostID, store.ComputerHost{MaxActive: c.MaxActive, ReservedHeadroom: c.ReservedHeadroom}))
}

// HostCapacities returns the host capacity registry
// (hostCapacityRegistrySchema).
func (m *Manager) HostCapacities(ctx context.Context) (map[string]HostCapacity, error) {
	hs, err := m.st.ComputerHosts(ctx)
	if err != nil {
		return nil, m.storeErr(err)
	}
	out := make(map[string]HostCapacity, len(hs))
	for id, h := range hs {
		out[id] = HostCapacity{MaxActive: h.MaxActive, ReservedHeadroom: h.ReservedHeadroom}
	}
	return out, nil
}

// ExposePort records port of Computer id as exposed (public: reachable
// without a grant) and says where it is reached.
func (m *Manager) ExposePort(ctx context.Context, id string, req computertype.PortRequest) (Exposure, error) {
	if req.Port < 1 || req.Port > 65535 {
		return Exposure{}, fmt.Errorf("%w: port %d out of range 1-65535", ErrInvalid, req.Port)
	}
	if req.Public && req.SignIn != "" {
		return Exposure{}, fmt.Errorf("%w: a public port needs no sign-in (sign_in is for a private one)", ErrInvalid)
	}
	if _, err := m.st.PutComputerPort(ctx, id, store.ComputerPort{Port: req.Port, Public: req.Public, SignIn: req.SignIn}); err != nil {
		return Exposure{}, m.storeErr(err)
	}
	return m.exposure(id, store.ComputerPort{Port: req.Port, Public: req.Public, SignIn: req.SignIn}), nil
}

// UnexposePort withdraws an exposed port; a port that is not exposed is
// not an error.
func (m *Manager) UnexposePort(ctx context.Context, id string, port int) error {
	if port < 1 || port > 65535 {
		return fmt.Errorf("%w: port %d out of range 1-65535", ErrInvalid, port)
	}
	if _, err := m.st.Computer(ctx, id); err != nil {
		return m.storeErr(err)
	}
	return m.storeErr(m.st.DeleteComputerPort(ctx, id, port))
}

// Ports returns the exposed ports of Computer id, by port.
func (m *Manager) Ports(ctx context.Context, id string) ([]Exposure, error) {
	if _, err := m.st.Computer(ctx, id); err != nil {
		return nil, m.storeErr(err)
	}
	ps, err := m.st.ComputerPorts(ctx, id)
	if err != nil {
		return nil, m.storeErr(err)
	}
	out := make([]Exposure, len(ps))
	for i, p := range ps {
		out[i] = m.exposure(id, p)
	}
	return out, nil
}

// exposure names an exposed port: <port>-<id>.<BaseDomain>. Without a
// base domain there is no host name, and no URL.
func (m *Manager) exposure(id string, p store.ComputerPort) Exposure {
	e := Exposure{Port: p.Port, Public: p.Public, SignIn: p.SignIn}
	if m.o.BaseDomain != "" {
		e.Host = strconv.Itoa(p.Port) + "-" + id + "." + m.o.BaseDomain
		e.URL = "http://" + e.Host + "/"
	}
	return e
}

// Capacity is what admission works with: the host capacity registry, the
// fleet's slot limit that follows from it (see Options.FleetLimit), and
// the recycling age (zero: sandboxes are not recycled).
type Capacity struct {
	Hosts        map[string]HostCapacity
	FleetLimit   int
	RecycleAfter time.Duration
}

// Capacity reports the capacity configuration admission uses now.
func (m *Manager) Capacity(ctx context.Context) (Capacity, error) {
	hosts, err := m.HostCapacities(ctx)
	if err != nil {
		return Capacity{}, err
	}
	c := Capacity{Hosts: hosts, FleetLimit: m.o.FleetLimit, RecycleAfter: m.o.RecycleAfter}
	if c.FleetLimit <= 0 {
		c.FleetLimit = 0
		for _, h := range hosts {
			c.FleetLimit += h.MaxActive - h.ReservedHeadroom
		}
		if len(hosts) == 0 {
			c.FleetLimit = DefaultFleetLimit
		}
	}
	return c, nil
}
