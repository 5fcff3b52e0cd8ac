package agent

import (
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
)

// sandboxFlag is --sandbox UID:GID: the agent is the init of a sandbox on
// a shared host (see the package documentation, "Sandbox").
type sandboxFlag struct {
	set      bool
	uid, gid uint32
}

func (s *sandboxFlag) String() string {
	if !s.set {
		return ""
	}
	return fmt.Sprintf("%d:%d", s.uid, s.gid)
}

func (s *sandboxFlag) Set(v string) error {
	u, g, ok := strings.Cut(v, ":")
	uid, err1 := strconv.ParseUint(u, 10, 32)
	gid, err2 := strconv.ParseUint(g, 10, 32)
	if !ok || err1 != nil || err2 != nil || uid == 0 || gid == 0 {
		return fmt.Errorf("want UID:GID, both positive, got %q", v)
	}
	s.set, s.uid, s.gid = true, uint32(uid), uint32(gid)
	return nil
}

// --user UID:GID[:G1,G2,…] is who the agent's children run as in a
// sandbox the driver made (a container, a VM guest): the image's user.
// The agent itself stays root; unlike --sandbox it sets up nothing else.

// parseUser reads a --user value.
func parseUser(v string) (syscall.Credential, error) {
	parts := strings.Split(v, ":")
	bad := fmt.Errorf("want UID:GID or UID:GID:G1,G2,… (numbers), got %q", v)
	if len(parts) < 2 || len(parts) > 3 {
		return syscall.Credential{}, bad
	}
	uid, err1 := strconv.ParseUint(parts[0], 10, 32)
	gid, err2 := strconv.ParseUint(parts[1], 10, 32)
	if err1 != nil || err2 != nil {
		return syscall.Credential{}, bad
	}
	c := syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}
	if len(parts) == 3 {
		for _, g := range strings.Split(parts[2], ",") {
			n, err := strconv.ParseUint(g, 10, 32)
			if err != nil {
				return syscall.Credential{}, bad
			}
			c.Groups = append(c.Groups, uint32(n))
		}
	}
	return c, nil
}

// userValue is the flag.Value of --user.
type userValue struct {
	set  bool
	raw  string
	cred syscall.Credential
}

func (u *userValue) String() string { return u.raw }

func (u *userValue) Set(v string) error {
	c, err := parseUser(v)
	if err != nil {
		return err
	}
	u.set, u.raw, u.cred = true, v, c
	return nil
}

// runAs makes every child the agent starts from now on run as c.
func runAs(c syscall.Credential) {
	sandboxCred = &c
}

// sandboxCred is who the agent's children run as once the agent entered
// its sandbox; nil: as the agent itself.
var sandboxCred *syscall.Credential

// forker runs the functions sent to it on the thread that starts the
// agent's children, once the agent entered its sandbox; nil before.
var forker chan<- func()

// startCmd starts cmd: on the forker's thread when there is one.
func startCmd(cmd *exec.Cmd) error {
	if forker == nil {
		return cmd.Start()
	}
	errc := make(chan error, 1)
	forker <- func() { errc <- cmd.Start() }
	return <-errc
}

// withSandboxCred makes cmd run as the sandbox's user, when there is one.
func withSandboxCred(cmd *exec.Cmd) {
	if sandboxCred == nil {
		return
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	c := *sandboxCred
	cmd.SysProcAttr.Credential = &c
}
