package agent

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// shutdownGrace is how long running execs and sessions get to finish when
// the agent exits.
const shutdownGrace = 2 * time.Second

type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ", ") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

// Main runs `berth agent ARGS` as specified by the agent contract: it
// serves the protocol on --listen, runs the --setup hooks, then COMMAND,
// and returns the process's exit code (COMMAND's, 128+N when a signal
// killed it, 2 for a usage error). Cancelling ctx acts like SIGTERM.
//
// With --lease-file it is also the TTL backstop: once the deadline in the
// file has passed it stops COMMAND (SIGTERM, SIGKILL after --lease-grace)
// and exits with the reason "lease expired", so a replica whose berth is
// gone for good does not run forever.
func Main(ctx context.Context, args []string, stderr io.Writer) int {
	// The flags keep copies: a spare rewrites the process's argument
	// bytes once assigned (rewriteArgs).
	orig := args
	args = make([]string, len(orig))
	for i, a := range orig {
		args[i] = strings.Clone(a)
	}
	fl := flag.NewFlagSet("berth agent", flag.ContinueOnError)
	fl.SetOutput(stderr)
	var (
		listen   = fl.String("listen", "", "`ADDR` to serve the agent protocol on: unix:/path/agent.sock, vsock:PORT or virtio:PORT-NAME")
		logPath  = fl.String("log", "", "`FILE` to append JSON log lines to (default: pass output through)")
		exitFile = fl.String("exit-file", "", "`FILE` to write COMMAND's exit status to")
		workdir  = fl.String("workdir", "", "`DIR` to run hooks, COMMAND and execs in")
		root     = fl.String("root", "", "`DIR` that confines the paths of file operations")
		stateDir = fl.String("state-dir", "", "`DIR` for the output of background processes (default: a new temporary directory)")
		lease    = fl.String("lease-file", "", "`FILE` holding the lease deadline (unix seconds); once it has passed, COMMAND is stopped and the agent exits")
		check    = fl.Duration("lease-check", defaultLeaseCheck, "how often to read the lease file")
		grace    = fl.Duration("lease-grace", defaultLeaseGrace, "how long COMMAND gets between SIGTERM and SIGKILL once the lease has expired")
		config   = fl.String("config", "", "`FILE` (or block device) holding a GuestConfig: further flags, COMMAND, the environment, files to write")
		hostName = fl.String("hostname", "", "`NAME` to set as the host name before anything starts (the agent needs a UTS namespace of its own)")
		vmInitF  = fl.Bool("vm-init", false, "be the init of a VM guest: mount /proc, /sys, /dev, /run, /tmp first and reboot the guest when done")
		setups   stringList
		spare    spareFlags
		sandbox  sandboxFlag
		user     userValue
		cgroups  stringList
		hide     stringList
	)
	fl.Var(&hide, "hide", "`DIR` to hide from the sandbox, but for the agent's own paths (repeatable; with --sandbox)")
	fl.Var(&cgroups, "join-cgroup", "cgroup `DIR` (of a cgroup v1 hierarchy, say) to move the agent into before it starts anything (repeatable)")
	fl.Var(&setups, "setup", "`CMD` to run with /bin/sh -c before COMMAND (repeatable)")
	fl.Var(&user, "user", "`UID:GID[:GROUPS]` to run everything the agent starts as (hooks, COMMAND, execs, shells), GROUPS comma-separated supplementary gids; the agent stays root (not with --sandbox)")
	fl.Var(&sandbox, "sandbox", "`UID:GID` to run everything the agent starts as, in a sandbox of which the agent is the init (see the package documentation)")
	spare.register(fl)
	fl.Usage = func() {
		fmt.Fprintln(stderr, "usage: berth agent [--vm-init] [--config FILE] --listen unix:/path/agent.sock|vsock:PORT|virtio:NAME [--log FILE] [--exit-file FILE] [--workdir DIR] [--root DIR] [--lease-file FILE [--lease-check D] [--lease-grace D]] [--setup CMD]... [--] [COMMAND [ARGS...]]")
		fl.PrintDefaults()
	}
	if err := fl.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *vmInitF {
		if os.Getpid() != 1 {
			fmt.Fprintln(stderr, "berth agent: --vm-init: the agent is not PID 1")
			return 2
		}
		if err := vmInit(); err != nil {
			fmt.Fprintf(stderr, "berth agent: --vm-init: %v\n", err)
			vmPowerOff()
			return 1
		}
		// Deferred first, so it runs last: after the log is closed and the
		// server has shut down. init must not return (the kernel panics).
		defer vmPowerOff()
	}
	if *config != "" {
		if fl.NArg() > 0 {
			fmt.Fprintln(stderr, "berth agent: --config: COMMAND belongs in the config file")
			return 2
		}
		c, err := readGuestConfig(*config)
		if err == nil {
			err = c.apply()
		}
		if err != nil {
			fmt.Fprintf(stderr, "berth agent: --config: %v\n", err)
			return 2
		}
		if err := fl.Parse(c.Args); err != nil {
			return 2
		}
	}
	if *listen == "" {
		fmt.Fprintln(stderr, "berth agent: --listen is required")
		fl.Usage()
		return 2
	}
	// Catch signals before anything starts, so none kills the agent
	// instead of reaching COMMAND.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	for _, dir := range cgroups {
		// Before anything is forked, so everything is born inside; a
		// spare joins its own at start, and its assignment brings none.
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte("0"), 0); err != nil {
			fmt.Fprintf(stderr, "berth agent: --join-cgroup: %v\n", err)
			return 1
		}
	}
	var ln net.Listener
	if spare.on {
		if *vmInitF || *config != "" || fl.NArg() > 0 || len(setups) > 0 {
			fmt.Fprintln(stderr, "berth agent: --spare takes no --vm-init, --config, --setup or COMMAND: they come with the assignment")
			return 2
		}
		var code int
		if ln, code = awaitAssignment(ctx, fl, *listen, &spare, orig, sigs, stderr); ln == nil {
			return code
		}
		defer ln.Close()
	}
	if *check <= 0 || *grace < 0 {
		fmt.Fprintln(stderr, "berth agent: --lease-check must be positive and --lease-grace not negative")
		fl.Usage()
		return 2
	}
	m := &mainRun{stderr: stderr, exitFile: *exitFile, workdir: *workdir, leaseGrace: *grace, sigs: sigs}
	m.done = ctx.Done()

	if *logPath != "" {
		l, err := openLog(*logPath, maxLogSize)
		if err != nil {
			return m.exit(1, fmt.Sprintf("agent: cannot open the log: %v", err))
		}
		defer l.Close()
		m.log = l
	}
	if *hostName != "" {
		// Here rather than by the driver before the fork: a process
		// setting up a UTS namespace for a child has to sacrifice a
		// thread to it.
		if err := setHostname(*hostName); err != nil {
			return m.exit(1, fmt.Sprintf("agent: setting the host name: %v", err))
		}
	}
	if sandbox.set {
		// Before anything starts, and after the assignment of a spare,
		// which brings the paths.
		expose := []string{*workdir, *root, *stateDir}
		for _, f := range []string{*logPath, *exitFile, *lease} {
			if f != "" {
				expose = append(expose, filepath.Dir(f))
			}
		}
		if exe, err := os.Executable(); err == nil {
			expose = append(expose, exe)
		}
		if err := enterSandbox(sandbox, expose, hide); err != nil {
			return m.exit(1, fmt.Sprintf("agent: --sandbox: %v", err))
		}
	}
	if user.set {
		// After the assignment of a spare too, which brings it.
		if sandbox.set {
			return m.exit(2, "agent: --user and --sandbox exclude each other")
		}
		runAs(user.cred)
	}
	if *workdir != "" {
		// A working directory the image lacks (a guest's default /root
		// in an image of /bin only) is made, as a container engine makes
		// its WORKDIR, rather than fail every command with ENOENT.
		if err := os.MkdirAll(*workdir, 0o755); err != nil {
			m.logf("agent: cannot make the working directory %s: %v", *workdir, err)
		}
	}
	if ln == nil {
		var err error
		if ln, err = listenOn(*listen); err != nil {
			return m.exit(1, fmt.Sprintf("agent: %v", err))
		}
	}
	srv := NewServer(Options{Root: *root, Dir: *workdir, StateDir: *stateDir, LeaseFile: *lease, Logf: m.logf})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if os.Getpid() == 1 {
		rctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go reapOrphans(rctx)
	}
	m.logf("agent listening on %s (pid %d)", *listen, os.Getpid())
	if *lease != "" {
		expired := make(chan struct{})
		m.expired = expired
		lctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go m.watchLease(lctx, *lease, *check, expired)
	}

	for i, hook := range setups {
		m.logf("setup hook %d: %s", i+1, hook)
		code, reason := m.run(mainCommand([]string{"/bin/sh", "-c", hook}, m.workdir), "stdout", "stderr")
		if m.leaseGone {
			return m.exit(code, leaseReason)
		}
		if code != 0 {
			return m.exit(code, fmt.Sprintf("setup hook %d (%s) %s", i+1, hook, reason))
		}
	}
	if fl.NArg() == 0 {
		select {
		case sig := <-m.sigs:
			return m.exit(0, "stopped by "+sig.String())
		case <-m.done:
			return m.exit(0, "stopped")
		case <-m.expired:
			return m.exit(0, leaseReason)
		case err := <-served:
			return m.exit(1, fmt.Sprintf("agent: serving: %v", err))
		}
	}
	select {
	case <-m.expired:
		// Expired while the hooks ran (and they finished anyway): do not
		// start COMMAND just to stop it.
		return m.exit(0, leaseReason)
	default:
	}
	code, reason := m.run(mainCommand(fl.Args(), m.workdir), "stdout", "stderr")
	if m.leaseGone {
		reason = leaseReason
	}
	return m.exit(code, reason)
}

// leaseReason is the exit file's reason when the lease ended the replica.
const leaseReason = "lease expired"

// mainRun is the state of one Main.
type mainRun struct {
	stderr   io.Writer
	log      *logFile // nil: output passes through
	exitFile string
	workdir  string
	sigs     chan os.Signal
	done     <-chan struct{} // Main's ctx; nil after it fired once

	expired    <-chan struct{} // closed when the lease has passed; nil without --lease-file
	leaseGrace time.Duration   // SIGTERM to SIGKILL once it has
	leaseGone  bool            // the lease stopped a hook or COMMAND
}

// logf records an agent event.
func (m *mainRun) logf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if m.log != nil {
		m.log.line("agent", msg)
		return
	}
	fmt.Fprintln(m.stderr, "berth agent:", msg)
}

// run runs cmd (a hook or COMMAND) in its own process group in the
// workdir, with its output in the log, forwarding SIGTERM and SIGINT to
// the group until it exits. It returns the exit code and the reason.
func (m *mainRun) run(cmd *exec.Cmd, out, errs string) (int, string) {
	cmd.Dir = m.workdir
	setGroup(cmd)
	var lw []*lineWriter
	if m.log != nil {
		o, e := &lineWriter{l: m.log, s: out}, &lineWriter{l: m.log, s: errs}
		cmd.Stdout, cmd.Stderr = o, e
		lw = append(lw, o, e)
		// A daemon that inherited the output must not keep us waiting.
		cmd.WaitDelay = waitDelay
	} else {
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	}
	if err := children.start(cmd); err != nil {
		code := 126
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			code = 127
		}
		return code, fmt.Sprintf("could not start: %v", err)
	}
	waited := make(chan struct{})
	go func() {
		_ = children.wait(cmd)
		close(waited)
	}()
	expired := m.expired
	var kill <-chan time.Time
	for {
		select {
		case <-waited:
			for _, w := range lw {
				w.flush()
			}
			code, sig := exitStatus(cmd.ProcessState)
			if sig != "" {
				return code, fmt.Sprintf("killed by signal %d", code-128)
			}
			return code, fmt.Sprintf("exited with code %d", code)
		case sig := <-m.sigs:
			if s, ok := sig.(syscall.Signal); ok {
				m.logf("forwarding %v to process group %d", sig, cmd.Process.Pid)
				_ = signalGroup(cmd.Process.Pid, s)
			}
		case <-m.done:
			m.done = nil
			m.logf("stopping: sending SIGTERM to process group %d", cmd.Process.Pid)
			_ = signalGroup(cmd.Process.Pid, syscall.SIGTERM)
		case <-expired:
			expired = nil
			m.leaseGone = true
			m.logf("lease expired: sending SIGTERM to process group %d, SIGKILL in %s", cmd.Process.Pid, m.leaseGrace)
			_ = signalGroup(cmd.Process.Pid, syscall.SIGTERM)
			t := time.NewTimer(m.leaseGrace)
			defer t.Stop()
			kill = t.C
		case <-kill:
			kill = nil
			m.logf("still running %s after SIGTERM: sending SIGKILL to process group %d", m.leaseGrace, cmd.Process.Pid)
			_ = signalGroup(cmd.Process.Pid, syscall.SIGKILL)
		}
	}
}

// exit records the outcome in the log and the exit file and returns code.
func (m *mainRun) exit(code int, reason string) int {
	m.logf("exit %d: %s", code, reason)
	if m.exitFile == "" {
		return code
	}
	if err := writeExitFile(m.exitFile, code, reason); err != nil {
		m.logf("cannot write the exit file: %v", err)
		fmt.Fprintf(m.stderr, "berth agent: cannot write the exit file: %v\n", err)
	}
	return code
}

// writeExitFile writes {"exit_code","reason","at"} atomically, so a reader
// never sees half of it.
func writeExitFile(path string, code int, reason string) error {
	b, err := json.Marshal(struct {
		ExitCode int    `json:"exit_code"`
		Reason   string `json:"reason"`
		At       string `json:"at"`
	}{code, reason, time.Now().UTC().Format(time.RFC3339Nano)})
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(append(b, '\n'))
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}

// listenOn listens on a contract address. A stale socket file (one nobody
// answers on) is removed first; a live one is an error, not a takeover.
func listenOn(addr string) (net.Listener, error) {
	scheme, rest, ok := strings.Cut(addr, ":")
	switch {
	case !ok || rest == "":
		return nil, fmt.Errorf("listen address %q: want unix:/path, vsock:PORT or virtio:PORT-NAME", addr)
	case scheme == "vsock":
		port, err := strconv.ParseUint(rest, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("listen address %q: want vsock:PORT with a decimal port", addr)
		}
		return listenVsock(uint32(port))
	case scheme == "virtio":
		return listenVirtio(rest)
	case scheme != "unix":
		return nil, fmt.Errorf("listen address %q: unknown scheme %q", addr, scheme)
	}
	if fi, err := os.Lstat(rest); err == nil {
		if fi.Mode()&fs.ModeSocket == 0 {
			return nil, fmt.Errorf("listen: %s exists and is not a socket", rest)
		}
		if c, err := net.DialTimeout("unix", rest, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("listen: another process is serving on %s", rest)
		}
		if err := os.Remove(rest); err != nil {
			return nil, fmt.Errorf("listen: removing the stale socket: %w", err)
		}
	}
	ln, err := net.Listen("unix", rest)
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	if err := os.Chmod(rest, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("listen: %w", err)
	}
	return ln, nil
}
