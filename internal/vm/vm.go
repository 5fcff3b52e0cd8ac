// Package vm is the runtime contract between berth and the things that run
// replicas: processes, containers, KVM guests, Firecracker microVMs. Each
// driver implements Driver; optional abilities are one-method interfaces a
// caller discovers with a type assertion (Suspender, LogReader, AgentDialer,
// UsageReader, Leaser, Waiter, Checker, Mounter), as net/http does with
// http.Flusher. A driver declares the ones it offers (Abilities), and the
// conformance suite holds it to exactly those.
//
// Replicas are named so that berth can re-adopt them after its own restart:
// Name(deployment, nonce) gives "berth-<deployment>-<12 hex>", and ParseName
// recovers the deployment part from a name. Who a replica belongs to is not
// read from its name but recorded with it: Spec.Owner, which every driver
// keeps with the replica and reports back as Instance.Owner. A driver's List
// must report every replica it runs, including those started by a previous
// berth process.
//
// Every driver must pass the conformance suite in package vmtest.
package vm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Errors drivers return (possibly wrapped).
var (
	// ErrNotFound means no replica has the given id.
	ErrNotFound = errors.New("vm: replica not found")
	// ErrUnavailable means the driver cannot run on this host; the error
	// wrapping it says what is missing.
	ErrUnavailable = errors.New("vm: driver unavailable on this host")
)

// Spec describes one replica to start.
type Spec struct {
	Name       string // the replica id; see Name
	Deployment string // the deployment part of Name (ParseName); "" skips the check
	// Owner is who the replica belongs to; drivers keep it with the
	// replica and report it as Instance.Owner. Zero means the owner an
	// older berth implied by the name (OwnerFromName).
	Owner      Owner
	Image      string            // root filesystem image; "" for the process driver
	Command    string            // start_command, run with /bin/sh -c
	Port       int               // port the app listens on inside the sandbox (0: the driver assigns one and sets PORT)
	Env        map[string]string // environment, secrets already resolved
	WorkDir    string            // working directory inside the sandbox
	SetupHooks []string          // shell commands run, in order, before Command
	SizeClass  string            // micro … xlarge; see Sizes
	DiskSizeGB int               // 0: driver default
	OpenPorts  []int             // extra ports the app listens on

	// TTL is the replica's initial lease (vm.ttl_seconds): a driver that
	// is a Leaser ends the replica by itself once TTL has passed since
	// Start unless Renew extended it. It is the backstop that keeps
	// replicas of a berth that is gone for good from running forever.
	// Zero means no lease. Drivers that are not Leasers ignore it.
	TTL time.Duration

	// Workspace is a host directory that outlives the replica (a
	// Computer's files, package computer). It must exist. The sandbox
	// sees it as its working directory and as the root of the agent's
	// file operations: the process driver runs the agent in it with
	// --root set to it; a container or VM driver mounts it at
	// /workspace and roots the agent there. Empty means none.
	Workspace string

	// User is who everything the agent starts in the sandbox (setup
	// hooks, Command, execs, shells, background processes) runs as: the
	// image config's user, resolved by berth against the image's own
	// /etc/passwd and /etc/group. Nil means the driver's default (root in
	// an image). A driver that runs images applies it through the agent
	// (--user); one that cannot refuses a spec with it rather than run
	// the app as someone else.
	User *User

	// Mounts are host directory trees attached to the sandbox at boot
	// (vm.mounts: each an artifact unpacked once into a content-addressed
	// tree that every replica of the deployment shares). Only a driver
	// that declares CanMount (a Mounter) attaches them; every other one
	// refuses a spec with mounts rather than start a replica without
	// them. See Mount for what a driver checks.
	Mounts []Mount
}

// User is a numeric identity in a sandbox (Spec.User).
type User struct {
	UID, GID uint32
	Groups   []uint32 // supplementary groups; none when empty
}

// AgentFlag is the agent's --user value: UID:GID, then :G1,G2,… when
// there are supplementary groups.
func (u User) AgentFlag() string {
	s := strconv.FormatUint(uint64(u.UID), 10) + ":" + strconv.FormatUint(uint64(u.GID), 10)
	for i, g := range u.Groups {
		if i == 0 {
			s += ":"
		} else {
			s += ","
		}
		s += strconv.FormatUint(uint64(g), 10)
	}
	return s
}

// Mount is one host directory tree attached to a sandbox (Spec.Mounts).
// A Mounter's Start refuses, naming the mount, a Source that is not an
// existing directory, and a Target that is not a clean absolute path
// other than /, that nests with (or equals) another mount's, or that
// covers or lies in /workspace when the spec has a Workspace.
type Mount struct {
	// Source is the host directory: the shared tree. Drivers never write
	// to it through a read-only mount.
	Source string
	// Target is where the sandbox sees it: an absolute path, created in
	// the replica's own root file system if it is missing there.
	Target string
	// ReadOnly makes writes through the mount fail in the sandbox (the
	// default of vm.mounts[].read_only). A Mounter whose WritableMounts is
	// false refuses a mount without it.
	ReadOnly bool
}

// String names the mount in errors: "mount <Source> at <Target>".
func (m Mount) String() string { return "mount " + m.Source + " at " + m.Target }

// State is a replica's lifecycle state.
type State string

const (
	StateStarting  State = "starting"  // created, not yet known to be running
	StateRunning   State = "running"   // the sandbox runs (the app may still be booting)
	StateSuspended State = "suspended" // stopped with its data kept (Suspender)
	StateExited    State = "exited"    // the app ended; see Instance.Reason
	StateFailed    State = "failed"    // the sandbox could not start or crashed
)

// Terminal reports whether a replica in state s will never serve again.
func (s State) Terminal() bool { return s == StateExited || s == StateFailed }

// Instance is a driver's view of one replica.
type Instance struct {
	ID         string
	Deployment string // the deployment part of ID (ParseName)
	Owner      Owner  // as started (Spec.Owner), or OwnerFromName for replicas of an older berth
	State      State
	Addr       string // host:port where the app is reached from berth
	StartedAt  time.Time
	PID        int    // host pid of the sandbox's init, where there is one
	ExitCode   *int   // set once exited
	Reason     string // why it exited or failed, with the last log lines
}

// Driver starts and stops replicas. Implementations must be safe for
// concurrent use. Stop and Inspect return an error wrapping ErrNotFound for
// unknown ids.
type Driver interface {
	// Start creates and starts a replica. It returns once the sandbox is
	// running (the app inside may still be starting); readiness is the
	// caller's health probe.
	Start(ctx context.Context, spec Spec) (Instance, error)
	// Stop destroys a replica and everything it kept, waiting up to grace
	// for it to exit after a polite signal.
	Stop(ctx context.Context, id string, grace time.Duration) error
	// Inspect reports one replica.
	Inspect(ctx context.Context, id string) (Instance, error)
	// List reports every replica the driver runs or keeps suspended.
	List(ctx context.Context) ([]Instance, error)
}

// Ability is an optional part of the contract a driver offers: one of the
// one-method interfaces below.
type Ability string

// The abilities, each named for the interface that offers it.
const (
	CanSuspend    Ability = "Suspender"
	CanLease      Ability = "Leaser"
	CanLogs       Ability = "LogReader"
	CanFollowLogs Ability = "LogFollower"
	CanDialAgent  Ability = "AgentDialer"
	CanUsage      Ability = "UsageReader"
	CanWait       Ability = "Waiter"
	CanCheck      Ability = "Checker"
	CanMount      Ability = "Mounter"
)

// AllAbilities lists every Ability.
var AllAbilities = []Ability{CanSuspend, CanLease, CanLogs, CanFollowLogs, CanDialAgent, CanUsage, CanWait, CanCheck, CanMount}

// Implements reports whether d implements the interface of ability a.
func Implements(d any, a Ability) bool {
	var ok bool
	switch a {
	case CanSuspend:
		_, ok = d.(Suspender)
	case CanLease:
		_, ok = d.(Leaser)
	case CanLogs:
		_, ok = d.(LogReader)
	case CanFollowLogs:
		_, ok = d.(LogFollower)
	case CanDialAgent:
		_, ok = d.(AgentDialer)
	case CanUsage:
		_, ok = d.(UsageReader)
	case CanWait:
		_, ok = d.(Waiter)
	case CanCheck:
		_, ok = d.(Checker)
	case CanMount:
		_, ok = d.(Mounter)
	}
	return ok
}

// Abilities is a driver's declaration of the abilities it offers. The
// conformance suite (package vmtest) checks exactly the declared ones, and
// fails a driver that declares an ability it does not implement or lacks
// one it implements; each driver also guards its declaration with
// compile-time assertions (var _ vm.Suspender = (*Driver)(nil)).
type Abilities interface {
	Abilities() []Ability
}

// Complete is a driver that offers every Ability, which it declares as
// AllAbilities. Asserting it (var _ vm.Complete = (*Driver)(nil)) guards
// each ability at compile time.
type Complete interface {
	Driver
	Abilities
	Suspender
	Leaser
	LogReader
	LogFollower
	AgentDialer
	UsageReader
	Waiter
	Checker
	Mounter
}

// Suspender keeps a replica's data while it is not running (idle_action:
// retain) and brings it back faster than a fresh start.
type Suspender interface {
	Suspend(ctx context.Context, id string) error
	Resume(ctx context.Context, id string) (Instance, error)
}

// Leaser bounds how long a replica lives without berth: every replica has a
// lease (set at Start from Spec.TTL), and once its deadline has passed the
// replica ends by itself, with an Instance.Reason that says the lease
// expired. berth renews the leases of the replicas it tracks; when berth is
// gone for good, its replicas expire instead of running forever.
//
// The lease must be enforced without berth (by the sandbox itself or the
// host's VM daemon). Where the sandbox enforces it, a suspended (frozen)
// replica cannot act on it until resumed, and ends then if it has passed.
type Leaser interface {
	// Renew moves the lease deadline of replica id to until (which may be
	// in the past, to end it). It returns an error wrapping ErrNotFound for
	// unknown ids.
	Renew(ctx context.Context, id string, until time.Time) error
}

// Waiter tells a caller that a replica ended without polling for it.
type Waiter interface {
	// Wait blocks until replica id is in a terminal state (exited or
	// failed) or gone, or ctx ends, and returns its last Instance. It
	// returns an error wrapping ErrNotFound for unknown ids, and ctx's
	// error when ctx ends first.
	Wait(ctx context.Context, id string) (Instance, error)
}

// Checker re-checks, after start-up, that a driver can still run replicas
// on this host (its VM daemon still answers, its runtime is still
// installed). A nil error means it can; otherwise the error wraps
// ErrUnavailable and says what is missing.
type Checker interface {
	Check(ctx context.Context) error
}

// Mounter attaches Spec.Mounts to its sandboxes at boot, each at its
// Target and read-only when Mount.ReadOnly says so (writes through it fail
// in the sandbox, also for root). A driver that is no Mounter refuses a
// spec with mounts; berth refuses a deployment with vm.mounts on such a
// driver before it gets there.
type Mounter interface {
	// WritableMounts reports whether the driver also attaches mounts
	// writable (Mount.ReadOnly false); a driver for which it is false
	// refuses such a mount, saying why.
	WritableMounts() bool
}

// LogLine is one line a replica wrote.
type LogLine struct {
	Time   time.Time
	Stream string // "stdout" or "stderr"
	Text   string
}

// LogReader returns a replica's recent output.
type LogReader interface {
	// Logs returns up to n of the most recent lines, oldest first. With
	// follow, it keeps writing new lines to w until ctx ends instead.
	Logs(ctx context.Context, id string, n int) ([]LogLine, error)
}

// LogFollower streams a replica's output as it is written.
type LogFollower interface {
	FollowLogs(ctx context.Context, id string, w io.Writer) error
}

// AgentDialer connects to the in-sandbox agent (package agent) of a replica,
// over whatever transport the driver has: a unix socket, vsock, a virtio port.
type AgentDialer interface {
	DialAgent(ctx context.Context, id string) (net.Conn, error)
}

// Usage is a replica's resource use.
type Usage struct {
	CPUPercent  float64 // of one core, like top
	MemoryBytes int64
}

// UsageReader reports resource use.
type UsageReader interface {
	Usage(ctx context.Context, id string) (Usage, error)
}

// NamePrefix starts every replica name berth gives.
const NamePrefix = "berth-"

// Name returns the replica name for a deployment and a nonce: berth-<id>-<12
// lowercase hex digits>. Hex on purpose: some drivers derive network ids from
// it.
func Name(deployment string, nonce uint64) string {
	return fmt.Sprintf("%s%s-%012x", NamePrefix, deployment, nonce&0xffffffffffff)
}

// OwnerKind is what kind of thing a replica belongs to.
type OwnerKind string

// The owner kinds.
const (
	OwnerDeployment OwnerKind = "deployment" // a vm deployment's pool (package fleet)
	OwnerComputer   OwnerKind = "computer"   // a Computer's sandbox (package computer)
)

// Owner is who a replica belongs to: a deployment or a Computer, by id.
// Package inventory hands each replica to whoever registered for its kind.
type Owner struct {
	Kind OwnerKind `json:"kind"`
	ID   string    `json:"id"`
}

// IsZero reports whether o is unset.
func (o Owner) IsZero() bool { return o == Owner{} }

func (o Owner) String() string { return string(o.Kind) + " " + o.ID }

// ComputerPrefix starts the deployment part of a Computer's sandbox names
// (Owner.Name): deployment ids must not start with it (package spec), so
// that no deployment's replica is ever named like a Computer's sandbox,
// and replicas of a berth from before Owner was recorded are told apart by
// it (OwnerFromName).
const ComputerPrefix = "cmp_"

// Name returns a new replica name for o: Name(o.ID, nonce) for a
// deployment, Name(ComputerPrefix+o.ID, nonce) for a Computer.
func (o Owner) Name(nonce uint64) string {
	if o.Kind == OwnerComputer {
		return Name(ComputerPrefix+o.ID, nonce)
	}
	return Name(o.ID, nonce)
}

// OwnerFromName is the owner an older berth, which did not record
// Spec.Owner, implied by a replica's name: a Computer for names of
// ComputerPrefix, a deployment otherwise. It is the one place the name
// decides ownership; drivers use it (through ResolveOwner) only for
// replicas whose state has no owner.
func OwnerFromName(name string) (Owner, bool) {
	dep, ok := ParseName(name)
	if !ok {
		return Owner{}, false
	}
	if id, ok := strings.CutPrefix(dep, ComputerPrefix); ok && id != "" {
		return Owner{Kind: OwnerComputer, ID: id}, true
	}
	return Owner{Kind: OwnerDeployment, ID: dep}, true
}

// ResolveOwner is o, or, if o is zero (a replica of an older berth, or a
// Spec without Owner), the owner its name implies (OwnerFromName).
func ResolveOwner(o Owner, name string) Owner {
	if o.IsZero() {
		o, _ = OwnerFromName(name)
	}
	return o
}

// ParseName returns the deployment part of a replica name (deployment ids
// may contain dashes, so the nonce is split at the last one), or false for
// names berth did not give.
func ParseName(name string) (string, bool) {
	rest, ok := strings.CutPrefix(name, NamePrefix)
	if !ok {
		return "", false
	}
	i := strings.LastIndexByte(rest, '-')
	if i <= 0 || len(rest)-i-1 != 12 {
		return "", false
	}
	for _, c := range rest[i+1:] {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return "", false
		}
	}
	return rest[:i], true
}

// Size is the resources of one size class.
type Size struct {
	VCPUs    int
	MemoryMB int
}

// Sizes maps VmSpec.size_class to resources. Drivers apply them where the
// host allows (cgroups for process and container drivers, the machine
// configuration for VM drivers). The default class is "small".
var Sizes = map[string]Size{
	"micro":  {1, 256},
	"mini":   {1, 512},
	"small":  {1, 1024},
	"medium": {2, 2048},
	"large":  {4, 4096},
	"xlarge": {8, 8192},
}

// DefaultSize is used when a spec names no size class.
const DefaultSize = "small"

// StdPath is the PATH of a sandbox with a file system of its own.
const StdPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Hostname is the UTS hostname of a replica: its id, cut to the 64 bytes
// Linux allows.
func Hostname(id string) string {
	if len(id) > 64 {
		return id[:64]
	}
	return id
}

// AppEnv is an app's environment: base (the driver's own: PATH, HOME,
// ...), then env sorted by name, then PORT=port last, which wins over a
// PORT in env because berth routes to it.
func AppEnv(base []string, env map[string]string, port int) []string {
	out := slices.Clone(base)
	for _, k := range slices.Sorted(maps.Keys(env)) {
		if k != "PORT" {
			out = append(out, k+"="+env[k])
		}
	}
	return append(out, "PORT="+strconv.Itoa(port))
}
