// Package computer runs Computers: persistent sandboxes for agents and
// people, with the vocabulary of the Computer contract
// (/contract/computer: computerStateSchema, hostedBackingsSchema,
// hostCapacitySchema, createFleetSlots, ComputerRuntimeUsage,
// computerFactSchema).
//
// # Lifecycle
//
// A Computer is a record in the store plus a workspace directory,
// <data-dir>/computers/<id>/workspace, that outlives every sandbox that
// runs it: stop/start, idle sleep, backing changes, recycling and berth
// restarts keep its files. A sandbox is a replica of a vm driver owned by
// vm.Owner{Kind: vm.OwnerComputer, ID: id} and named by it
// (vm.Name(vm.ComputerPrefix+id, nonce)); package inventory hands these to
// the Manager at start-up, never to the fleet. It runs the
// agent in the workspace: its working directory, HOME and the root of its
// file operations.
//
// States: sleeping (no sandbox) → starting (slot held, sandbox booting) →
// running; queued (waiting for a slot, with a 1-based position). Every
// transition is persisted before the sandbox is touched, and each emits a
// lifecycle fact whose provenance.via says why (start, use, stop, idle,
// queue, recycle, restart, ...). A restarted berth (New) re-adopts the
// sandboxes that still run by their recorded name, puts to sleep the
// Computers whose sandbox vanished, and leaves the Computer sandboxes it
// does not claim to the inventory's sweep (or, without a shared inventory,
// destroys them at once).
//
// A running Computer sleeps once its idle timeout has passed without
// activity. Activity is: a held Use (an API operation, a terminal session),
// Touch (traffic to an exposed port), and any background process still
// running inside (the agent's /v1/processes), so background jobs are not
// killed because nobody is talking to them. Waking is the next Start or Use.
//
// # Backings
//
// A Computer lists up to four distinct backings in fallback order;
// platform-container runs on the "container" driver, on-box-vm{hostId} on
// the VM driver when hostId is this host (Options.HostID, or in a fleet
// Options.FleetHostID), and process (a
// berth extension, the default) on the "process" driver. A start takes the
// first backing this host can run and that has room, and falls back to the
// next when its sandbox fails to start.
//
// # Admission
//
// Fleet slots follow createFleetSlots: a slot is reserved atomically in
// one store transaction that counts the slots held (Computers starting or
// running) against the limit; a Computer that holds one re-reserves for
// free; release is idempotent. The limit is Options.FleetLimit when set,
// else the sum over the host capacity registry of maxActive −
// reservedHeadroom, else DefaultFleetLimit. An on-box-vm host also takes at
// most its own maxActive − reservedHeadroom. A full fleet answers
// *CapacityError{Limit, RetryAfter} (HTTP 429), or, when the caller waits,
// queues the start: the queue is persisted, first in first out (a start
// that does not wait cannot take a slot that queued starts are waiting
// for), and drained whenever a slot frees. A store failure is
// ErrUnavailable (503).
//
// On a host of a fleet (Options.FleetSlots: berth serve --etcd and
// --fleet-slots), a start also reserves a fleet-wide slot, before this
// host's: a full fleet answers as a full host does (CapacityError, or the
// queue), a fleet that cannot be reached or a cordoned host is
// ErrFleetUnavailable (503), and every release of this host's slot
// releases the fleet's. A berth that restarts takes the fleet slots of the
// Computers it re-adopts again.
//
// # Usage ledger and facts
//
// Each sandbox lifetime is a runtime with an interval in the ledger
// (ComputerRuntimeUsage): opened when it starts, its checkpoint advanced at
// most once per Options.Checkpoint when read, ended when it stops.
// PendingUsage returns at most 64 unacknowledged observations, the same
// ones within one checkpoint; AcknowledgeUsage is idempotent and deletes
// ended intervals whose end was acknowledged.
//
// Facts (computerFactSchema) are an append-only log per Computer with a
// sequence number that only grows, kept for Options.FactRetention. The
// manager records lifecycle and interval facts, and process.exited for
// background processes (with the CPU time the agent measured, null when it
// could not); API handlers Emit the rest.
package computer
