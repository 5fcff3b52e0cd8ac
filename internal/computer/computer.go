package computer

import (
	"encoding/json"
	"errors"
	"fmt"
	"github.com/berth-dev/berth/apitype/computertype"
	"time"

	"github.com/berth-dev/berth/internal/vm"
)

// Errors of the Manager, for errors.Is. Each is wrapped with a message that
// says what was wrong.
var (
	// ErrNotFound: no Computer has the id.
	ErrNotFound = errors.New("computer: not found")
	// ErrExists: Create with an id that is taken.
	ErrExists = errors.New("computer: exists")
	// ErrInvalid: bad input; the message names the field.
	ErrInvalid = errors.New("computer: invalid")
	// ErrUnavailable: the store failed; the operation may be retried (503).
	ErrUnavailable = errors.New("computer: unavailable")
	// ErrFleetUnavailable: the fleet's slots could not be reserved (etcd
	// unreachable, this host cordoned); a start may be retried (503).
	ErrFleetUnavailable = errors.New("computer: the fleet's slots are unavailable")
)

// CapacityError is the answer to a start when every fleet slot (or every
// eligible host) is taken: the contract's capacity {limit,
// retryAfterSeconds}, HTTP 429 with Retry-After.
type CapacityError struct {
	Limit      int
	RetryAfter time.Duration
}

func (e *CapacityError) Error() string {
	return fmt.Sprintf("computer: capacity: all %d slots are taken; retry after %s", e.Limit, e.RetryAfter)
}

// Backing kinds (hostedBackingsSchema, plus berth's "process").
const (
	KindContainer = computertype.KindContainer
	KindVM        = computertype.KindVM
	KindProcess   = computertype.KindProcess
)

// MaxBackings bounds a Computer's fallback list (hostedBackingsSchema).
const MaxBackings = 4

// Backing is one place a Computer can run (hostedBackingSchema).
type Backing = computertype.HostedBacking

func backingJSON(b Backing) string {
	if b.Kind == "" {
		return ""
	}
	out, _ := json.Marshal(b)
	return string(out)
}

func parseBacking(s string) Backing {
	var b Backing
	if s != "" {
		_ = json.Unmarshal([]byte(s), &b)
	}
	return b
}

// validateBackings checks the hostedBackingsSchema rules: at most
// MaxBackings, known kinds, a host id exactly for on-box-vm, distinct.
func validateBackings(bs []Backing) error {
	if len(bs) > MaxBackings {
		return fmt.Errorf("%w: backings: %d given, at most %d", ErrInvalid, len(bs), MaxBackings)
	}
	seen := map[Backing]bool{}
	for i, b := range bs {
		switch b.Kind {
		case KindVM:
			if b.HostID == "" {
				return fmt.Errorf("%w: backings[%d]: %s needs a hostId", ErrInvalid, i, KindVM)
			}
		case KindContainer, KindProcess:
			if b.HostID != "" {
				return fmt.Errorf("%w: backings[%d]: %s takes no hostId", ErrInvalid, i, b.Kind)
			}
		default:
			return fmt.Errorf("%w: backings[%d]: unknown kind %q (want %s, %s or %s)", ErrInvalid, i, b.Kind, KindContainer, KindVM, KindProcess)
		}
		if seen[b] {
			return fmt.Errorf("%w: backings[%d]: %s is listed twice", ErrInvalid, i, b)
		}
		seen[b] = true
	}
	return nil
}

// States of a Computer (computerStateSchema).
const (
	StateRunning  = computertype.StateRunning
	StateSleeping = computertype.StateSleeping
	StateStarting = computertype.StateStarting
	StateQueued   = computertype.StateQueued
)

// State is a Computer's state (computerStateSchema): Position is set
// (1 = next) exactly when State is "queued".
type State = computertype.ComputerRuntimeState

// Computer is a persistent sandbox: a workspace that outlives every
// sandbox that runs it.
type Computer struct {
	ID          string
	Namespace   string
	Image       string
	Size        string
	IdleTimeout time.Duration
	// Backings are where it may run, in fallback order.
	Backings []Backing
	State    State
	// Active is the backing it runs on now (zero unless starting or
	// running).
	Active    Backing
	CreatedAt time.Time
	UpdatedAt time.Time
}

// CreateRequest creates a Computer. Empty fields take the Manager's
// defaults; Start starts it at once (admission applies, without waiting).
type CreateRequest struct {
	ID          string
	Namespace   string
	Image       string
	Size        string
	IdleTimeout time.Duration
	Backings    []Backing
	Start       bool
}

// Provenance says who caused a fact (computerProvenanceSchema).
type Provenance = computertype.ComputerProvenance

// HostCapacity is one VM host's capacity (hostCapacitySchema).
type HostCapacity = computertype.HostCapacity

func validateHostCapacity(c HostCapacity) error {
	switch {
	case c.MaxActive < 1:
		return fmt.Errorf("%w: maxActive must be at least 1 (got %d)", ErrInvalid, c.MaxActive)
	case c.ReservedHeadroom < 0:
		return fmt.Errorf("%w: reservedHeadroom must not be negative (got %d)", ErrInvalid, c.ReservedHeadroom)
	case c.ReservedHeadroom >= c.MaxActive:
		return fmt.Errorf("%w: reservedHeadroom (%d) must be below maxActive (%d)", ErrInvalid, c.ReservedHeadroom, c.MaxActive)
	}
	return nil
}

// Exposure is an exposed port of a Computer and where it is reached.
type Exposure = computertype.Port

// MaxIDLen bounds Computer ids: they end up in sandbox names and unix
// socket paths (at most 107 bytes), so they are kept short.
const MaxIDLen = 40

// validateID: lowercase letters, digits and dashes, starting with a letter
// or digit; ids are host-name and file-name safe.
func validateID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: id: required", ErrInvalid)
	case len(id) > MaxIDLen:
		return fmt.Errorf("%w: id: longer than %d characters", ErrInvalid, MaxIDLen)
	case id[0] == '-':
		return fmt.Errorf("%w: id: %q must not start with '-'", ErrInvalid, id)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
			return fmt.Errorf("%w: id: %q has invalid character %q (allowed: a-z 0-9 -)", ErrInvalid, id, c)
		}
	}
	return nil
}

func validateNamespace(ns string) error {
	if len(ns) > 63 {
		return fmt.Errorf("%w: namespace: longer than 63 characters", ErrInvalid)
	}
	for i := 0; i < len(ns); i++ {
		c := ns[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
			return fmt.Errorf("%w: namespace: %q has invalid character %q (allowed: a-z 0-9 -)", ErrInvalid, ns, c)
		}
	}
	return nil
}

func validateSize(size string) error {
	if _, ok := vm.Sizes[size]; !ok {
		return fmt.Errorf("%w: size: unknown size %q (want micro, mini, small, medium, large or xlarge)", ErrInvalid, size)
	}
	return nil
}
