package computertype

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// Backing kinds (hostedBackingsSchema, plus berth's "process").
const (
	// KindContainer runs on the container driver of the host.
	KindContainer = "platform-container"
	// KindVM runs on a VM driver of the host named by HostID.
	KindVM = "on-box-vm"
	// KindProcess is a berth extension: a process sandbox on the host
	// (the process driver), which needs nothing but berth itself.
	KindProcess = "process"
)

// States of a Computer (computerStateSchema).
const (
	StateRunning  = "running"
	StateSleeping = "sleeping"
	StateStarting = "starting"
	StateQueued   = "queued"
)

// Fact kinds (computerFactSchema).
const (
	FactProcessExited = "process.exited"
	FactFilesWritten  = "files.written"
	FactEgress        = "egress"
	FactLifecycle     = "lifecycle"
	FactInterval      = "interval"
)

// HostedBacking is one place a Computer can run, as the contract's
// hostedBackingSchema spells it.
type HostedBacking struct {
	Kind   string `json:"kind"`
	HostID string `json:"hostId,omitempty"`
}

// ComputerRuntimeState is a Computer's state as computerStateSchema spells it: Position
// is set (1 = next) exactly when State is "queued".
type ComputerRuntimeState struct {
	State    string `json:"state"`
	Position *int   `json:"position,omitempty"`
}

// ComputerProvenance says who caused a fact (computerProvenanceSchema).
type ComputerProvenance struct {
	Actor string `json:"actor"`
	Via   string `json:"via,omitempty"`
}

// HostCapacity is one VM host's capacity (hostCapacitySchema): at most
// MaxActive Computers, of which ReservedHeadroom are held back, so
// admission places at most MaxActive − ReservedHeadroom on it.
type HostCapacity struct {
	MaxActive        int `json:"maxActive"`
	ReservedHeadroom int `json:"reservedHeadroom"`
}

// ComputerFact is an observation about a Computer. Its JSON is exactly the
// contract's computerFactSchema: an object discriminated by kind, with only
// the fields of that kind (camelCase; exitCode and cpuTimeMs are null when
// unknown, never a made-up zero). Which fields count depends on Kind.
type ComputerFact struct {
	Kind       string
	ComputerID string
	Provenance ComputerProvenance

	// process.exited: RequestID names the process (or request) that ran;
	// ExitCode is nil when the process was killed without a status;
	// CPUTimeMs is nil when not measured.
	RequestID  string
	ExitCode   *int
	CPUTimeMs  *int64
	WallTimeMs int64

	// files.written
	Path  string
	Bytes int64

	// egress (package egress's proxy): Host is the destination host only;
	// Method is the HTTP method, or "CONNECT" for an HTTPS tunnel, whose
	// Status is the proxy's answer to the CONNECT (berth does not
	// intercept TLS, so the method and status inside are unknown).
	Host   string
	Method string
	Status int

	// lifecycle (ObservedAt, State) and interval (ObservedAt and the rest),
	// times in Unix milliseconds.
	ObservedAt int64
	State      ComputerRuntimeState
	RuntimeID  string
	Backing    HostedBacking
	StartedAt  int64
	Ended      bool
}

// FactRecord is one entry of a Computer's facts log (GET
// /computers/{id}/facts): a fact and its sequence number, which increases
// by one per fact of the Computer and is the resume cursor.
type FactRecord struct {
	Seq  int64        `json:"seq"`
	Fact ComputerFact `json:"fact"`
}

// ComputerUsageInterval is one runtime observation of the usage ledger
// (computerUsageIntervalSchema): a runtime (one sandbox lifetime) on a
// backing, from StartedAt to ObservedAt (Unix ms), Ended once it stopped.
// It names no Computer: GET /computers/usage/pending answers interval
// facts ([ComputerFact] of kind "interval"), which do.
type ComputerUsageInterval struct {
	RuntimeID  string        `json:"runtimeId"`
	Backing    HostedBacking `json:"backing"`
	StartedAt  int64         `json:"startedAt"`
	ObservedAt int64         `json:"observedAt"`
	Ended      bool          `json:"ended"`
}

func (b HostedBacking) String() string {
	if b.HostID != "" {
		return b.Kind + "{" + b.HostID + "}"
	}
	return b.Kind
}

// ComputerGrant is a grant in exactly the contract's computerGrantSchema
// shape (a strict object: no id, no issue time). Actions are the
// contract's computerActionSchema names; ExpiresAt is Unix milliseconds;
// Egress is the grant's egress policy, a JSON document.
type ComputerGrant struct {
	ComputerID string             `json:"computerId"`
	Actions    []string           `json:"actions"`
	ExpiresAt  int64              `json:"expiresAt"`
	Egress     json.RawMessage    `json:"egress,omitempty"`
	Provenance ComputerProvenance `json:"provenance"`
}

// MarshalJSON writes the fields of f's kind, in the contract's order.
func (f ComputerFact) MarshalJSON() ([]byte, error) {
	var v any
	switch f.Kind {
	case FactProcessExited:
		v = struct {
			Kind       string             `json:"kind"`
			RequestID  string             `json:"requestId"`
			ExitCode   *int               `json:"exitCode"`
			CPUTimeMs  *int64             `json:"cpuTimeMs"`
			WallTimeMs int64              `json:"wallTimeMs"`
			ComputerID string             `json:"computerId"`
			Provenance ComputerProvenance `json:"provenance"`
		}{f.Kind, f.RequestID, f.ExitCode, f.CPUTimeMs, f.WallTimeMs, f.ComputerID, f.Provenance}
	case FactFilesWritten:
		v = struct {
			Kind       string             `json:"kind"`
			Path       string             `json:"path"`
			Bytes      int64              `json:"bytes"`
			ComputerID string             `json:"computerId"`
			Provenance ComputerProvenance `json:"provenance"`
		}{f.Kind, f.Path, f.Bytes, f.ComputerID, f.Provenance}
	case FactEgress:
		v = struct {
			Kind       string             `json:"kind"`
			Host       string             `json:"host"`
			Method     string             `json:"method"`
			Status     int                `json:"status"`
			ComputerID string             `json:"computerId"`
			Provenance ComputerProvenance `json:"provenance"`
		}{f.Kind, f.Host, f.Method, f.Status, f.ComputerID, f.Provenance}
	case FactLifecycle:
		v = struct {
			Kind       string               `json:"kind"`
			ObservedAt int64                `json:"observedAt"`
			State      ComputerRuntimeState `json:"state"`
			ComputerID string               `json:"computerId"`
			Provenance ComputerProvenance   `json:"provenance"`
		}{f.Kind, f.ObservedAt, f.State, f.ComputerID, f.Provenance}
	case FactInterval:
		v = struct {
			RuntimeID  string             `json:"runtimeId"`
			Backing    HostedBacking      `json:"backing"`
			StartedAt  int64              `json:"startedAt"`
			ObservedAt int64              `json:"observedAt"`
			Ended      bool               `json:"ended"`
			Kind       string             `json:"kind"`
			ComputerID string             `json:"computerId"`
			Provenance ComputerProvenance `json:"provenance"`
		}{f.RuntimeID, f.Backing, f.StartedAt, f.ObservedAt, f.Ended, f.Kind, f.ComputerID, f.Provenance}
	default:
		return nil, fmt.Errorf("computertype: fact of unknown kind %q", f.Kind)
	}
	return json.Marshal(v)
}

// factJSON is every field any kind has, for decoding.
type factJSON struct {
	Kind       string               `json:"kind"`
	ComputerID string               `json:"computerId"`
	Provenance *ComputerProvenance  `json:"provenance"`
	RequestID  string               `json:"requestId"`
	ExitCode   *int                 `json:"exitCode"`
	CPUTimeMs  *int64               `json:"cpuTimeMs"`
	WallTimeMs int64                `json:"wallTimeMs"`
	Path       string               `json:"path"`
	Bytes      int64                `json:"bytes"`
	Host       string               `json:"host"`
	Method     string               `json:"method"`
	Status     int                  `json:"status"`
	ObservedAt int64                `json:"observedAt"`
	State      ComputerRuntimeState `json:"state"`
	RuntimeID  string               `json:"runtimeId"`
	Backing    HostedBacking        `json:"backing"`
	StartedAt  int64                `json:"startedAt"`
	Ended      bool                 `json:"ended"`
}

// UnmarshalJSON reads a fact of any kind and checks it (see Validate).
func (f *ComputerFact) UnmarshalJSON(b []byte) error {
	var j factJSON
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&j); err != nil {
		return fmt.Errorf("computertype: malformed fact: %w", err)
	}
	var prov ComputerProvenance
	if j.Provenance != nil {
		prov = *j.Provenance
	}
	*f = ComputerFact{
		Kind: j.Kind, ComputerID: j.ComputerID, Provenance: prov,
		RequestID: j.RequestID, ExitCode: j.ExitCode, CPUTimeMs: j.CPUTimeMs, WallTimeMs: j.WallTimeMs,
		Path: j.Path, Bytes: j.Bytes, Host: j.Host, Method: j.Method, Status: j.Status,
		ObservedAt: j.ObservedAt, State: j.State, RuntimeID: j.RuntimeID, Backing: j.Backing,
		StartedAt: j.StartedAt, Ended: j.Ended,
	}
	return f.Validate()
}

// ErrInvalidFact is what Validate (and so UnmarshalJSON) wraps: the fact
// breaks a rule of computerFactSchema; the message names the field.
var ErrInvalidFact = errors.New("invalid fact")

// Validate checks what the schema requires of f's kind.
func (f ComputerFact) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidFact}, args...)...)
	}
	if f.ComputerID == "" {
		return bad("computerId is required")
	}
	if f.Provenance.Actor == "" {
		return bad("provenance.actor is required")
	}
	switch f.Kind {
	case FactProcessExited:
		if f.WallTimeMs < 0 || (f.CPUTimeMs != nil && *f.CPUTimeMs < 0) {
			return bad("times must not be negative")
		}
	case FactFilesWritten:
		if f.Path == "" || f.Bytes < 0 {
			return bad("files.written needs a path and bytes ≥ 0")
		}
	case FactEgress:
		if f.Host == "" || f.Method == "" || f.Status < 100 || f.Status > 599 {
			return bad("egress needs a host, a method and a status from 100 to 599")
		}
	case FactLifecycle:
		switch f.State.State {
		case StateRunning, StateSleeping, StateStarting:
			if f.State.Position != nil {
				return bad("state %s has no position", f.State.State)
			}
		case StateQueued:
			if f.State.Position == nil {
				return bad("state queued needs a position")
			}
		default:
			return bad("unknown state %q", f.State.State)
		}
	case FactInterval:
		if f.RuntimeID == "" || f.Backing.Kind == "" || f.ObservedAt < f.StartedAt {
			return bad("interval needs a runtimeId, a backing and observedAt ≥ startedAt")
		}
	default:
		return bad("unknown kind %q", f.Kind)
	}
	return nil
}
