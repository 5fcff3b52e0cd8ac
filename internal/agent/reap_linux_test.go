package agent

import (
	"os/exec"
	"runtime"
	"testing"
)

// TestZombiePending: the reaper's peek names an exited child by its pid
// and leaves it waitable for its owner.
func TestZombiePending(t *testing.T) {
	if pid, ok := zombiePending(); ok {
		t.Skipf("another child (%d) is waitable already", pid)
	}
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for {
		pid, ok := zombiePending()
		if ok && pid != cmd.Process.Pid {
			t.Skipf("another child (%d) became waitable", pid)
		}
		if ok {
			break
		}
		runtime.Gosched()
	}
	// Still the owner's to wait for, with its status.
	if err := cmd.Wait(); err != nil || cmd.ProcessState.ExitCode() != 0 {
		t.Fatalf("wait after the peek: %v %v", err, cmd.ProcessState)
	}
	if pid, ok := zombiePending(); ok {
		t.Errorf("child %d waitable after its wait", pid)
	}
}
