package auth

import "slices"

// DefaultConfinedDrivers are the vm drivers a namespace-confined caller may
// use when the operator says nothing (berth serve --confined-drivers): the
// ones that isolate a sandbox from the host. The process driver is for
// unconfined callers unless the operator allows it.
var DefaultConfinedDrivers = []string{"container", "kvm", "libvirt", "firecracker"}

// DefaultNamespaceReplicaQuota is the default bound on the sum of
// max_replicas over one namespace's vm deployments written by a confined
// caller (berth serve --namespace-replica-quota).
const DefaultNamespaceReplicaQuota = 20

// Confinement is what the operator lets namespace-confined callers (a
// token with a namespace) run. Unconfined callers are not bound by it.
type Confinement struct {
	// Drivers lists, by namespace, the vm drivers confined callers may
	// name; the "" entry applies to namespaces without their own, and
	// without one DefaultConfinedDrivers does.
	Drivers map[string][]string
	// ReplicaQuota, when positive, bounds the sum of scaling.max_replicas
	// over a namespace's vm deployments when a confined caller writes one.
	ReplicaQuota int
}

// DriversFor returns the drivers confined callers may use in ns.
func (c Confinement) DriversFor(ns string) []string {
	if ds, ok := c.Drivers[ns]; ok {
		return ds
	}
	if ds, ok := c.Drivers[""]; ok {
		return ds
	}
	return DefaultConfinedDrivers
}

// AllowsDriver reports whether p may run a sandbox on driver in ns: an
// unconfined caller may use any driver the host has, a confined one only
// those the operator allows its namespace.
func (c Confinement) AllowsDriver(p *Principal, ns, driver string) bool {
	return !p.Confined() || slices.Contains(c.DriversFor(ns), driver)
}
