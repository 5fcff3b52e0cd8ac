//go:build !unix

package agent

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
)

// The agent runs inside Linux sandboxes; elsewhere the package builds so
// that the berth binary and the Client do, but running commands in process
// groups is not supported.

func setGroup(cmd *exec.Cmd)   {}
func setSession(cmd *exec.Cmd) {}

func signalGroup(pid int, sig syscall.Signal) error { return errors.ErrUnsupported }

func exitStatus(ps *os.ProcessState) (int, string) { return ps.ExitCode(), "" }

func signalName(s syscall.Signal) string { return s.String() }

func parseSignal(s string) (syscall.Signal, error) { return 0, errors.ErrUnsupported }
