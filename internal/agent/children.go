package agent

import (
	"os/exec"
	"sync"
)

// children records the processes this agent started itself. When the
// agent is PID 1 it reaps orphans, and must not reap one of these: that
// would steal the exit status that its exec.Cmd is waiting for.
var children childSet

type childSet struct {
	// startMu is held shared while a child starts and is registered, and
	// exclusively while the reaper scans, so the reaper never sees a child
	// that exited between fork and registration.
	startMu sync.RWMutex
	mu      sync.Mutex // guards owned
	owned   map[int]bool
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
	return err
}

func (c *childSet) isOwned(pid int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.owned[pid]
}
