package agent

import (
	"os/exec"
	"sync"
	"sync/atomic"
)

// children records the processes this agent started itself. When the
// agent is PID 1 it reaps orphans, and must not reap one of these: that
// would steal the exit status that its exec.Cmd is waiting for.
var children = childSet{recheck: make(chan struct{}, 1)}

type childSet struct {
	// startMu is held shared while a child starts and is registered, and
	// exclusively while the reaper scans, so the reaper never sees a child
	// that exited between fork and registration.
	startMu sync.RWMutex
	mu      sync.Mutex // guards owned
	owned   map[int]bool

	// recheck wakes the reaper when a child it deferred to its owner has
	// been waited for (see deferToOwner).
	recheck     chan struct{}
	wantRecheck atomic.Bool
}

// start starts cmd and registers its pid as owned.
func (c *childSet) start(cmd *exec.Cmd) error {
	c.startMu.RLock()
	defer c.startMu.RUnlock()
	withSandboxCred(cmd)
	if err := startCmd(cmd); err != nil {
		return err
	}
	c.mu.Lock()
	if c.owned == nil {
		c.owned = make(map[int]bool)
	}
	c.owned[cmd.Process.Pid] = true
	c.mu.Unlock()
	return nil
}

// wait waits for cmd and forgets its pid.
func (c *childSet) wait(cmd *exec.Cmd) error {
	err := cmd.Wait()
	c.mu.Lock()
	delete(c.owned, cmd.Process.Pid)
	c.mu.Unlock()
	if c.wantRecheck.Swap(false) {
		select {
		case c.recheck <- struct{}{}:
		default:
		}
	}
	return err
}

// deferToOwner reports whether pid is owned, in which case the reaper
// leaves it to its exec.Cmd and is woken (recheck) once a wait is done,
// to look for orphans behind it.
func (c *childSet) deferToOwner(pid int) bool {
	// Asked for before the check: a wait that completes in between then
	// still wakes the reaper.
	c.wantRecheck.Store(true)
	return c.isOwned(pid)
}

func (c *childSet) isOwned(pid int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.owned[pid]
}
