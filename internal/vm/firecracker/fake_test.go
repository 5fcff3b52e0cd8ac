package firecracker

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/berth-dev/berth/internal/agent"
	"github.com/berth-dev/berth/internal/vm/console"
)

// fakeVMM plays Firecracker for the tests: it serves the API on a unix
// socket, refuses what Firecracker refuses (configuration after boot, a
// snapshot of a running VM, a load into a configured VMM, missing files),
// records every request and answer, and simulates a guest whose serial
// console is the fake's console writer:
//
//   - InstanceStart reads the config drive (an agent.GuestConfig), writes
//     its files below <dir>/guest, runs COMMAND with /bin/sh on this host,
//     writing its output to the console as the agent would (JSON lines with
//     the tty's "\r\n"), and serves the real agent protocol (agent.Server)
//     behind the vsock socket's CONNECT handshake.
//   - When COMMAND exits, the "agent" logs "exit N: reason" and the VMM
//     ends, as a rebooting guest makes Firecracker exit.
//   - SendCtrlAltDel sends SIGTERM to COMMAND; PATCH /vm stops (SIGSTOP) or
//     continues it; a snapshot records what a restore needs, and a restored
//     guest serves the agent again (its COMMAND died with the old VMM).
type fakeVMM struct {
	root    string // the jail's root: request paths are inside it ("" unjailed)
	record  func(apiRecord)
	console io.Writer
	exit    func() // the VMM ends
	failOn  string // "METHOD /path" answered with 400

	mu      sync.Mutex
	state   string // Not started, Running, Paused
	loaded  bool   // a snapshot was loaded
	touched bool   // configured beyond logger and metrics
	machine MachineConfig
	boot    *BootSource
	drives  map[string]Drive
	vsock   *Vsock
	cmd     *exec.Cmd // the guest's COMMAND
	agentLn *chanListener
	guest   string // the guest's file system root on the host
	port    uint32 // the agent's vsock port, from its --listen
}

// apiRecord is one request the fake served, with its answer.
type apiRecord struct {
	Method string          `json:"method"`
	Path   string          `json:"path"`
	Body   json.RawMessage `json:"body,omitempty"`
	Status int             `json:"status"`
	Answer json.RawMessage `json:"answer,omitempty"`
}

func newFakeVMM(root string, console io.Writer, record func(apiRecord), exit func()) *fakeVMM {
	return &fakeVMM{root: root, console: console, record: record, exit: exit,
		state: "Not started", machine: MachineConfig{VCPUCount: 1, MemSizeMiB: 128}, drives: map[string]Drive{}}
}

// host maps a path the VMM was given to the host.
func (f *fakeVMM) host(p string) string {
	if f.root == "" {
		return p
	}
	return filepath.Join(f.root, p)
}

type faultError string

func (e faultError) Error() string { return string(e) }

func (f *fakeVMM) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	status, answer := f.handle(r.Method, r.URL.Path, body)
	rec := apiRecord{Method: r.Method, Path: r.URL.Path, Status: status}
	if len(bytes.TrimSpace(body)) > 0 {
		rec.Body = json.RawMessage(body)
	}
	var out []byte
	if answer != nil {
		out, _ = json.Marshal(answer)
		rec.Answer = out
	}
	f.record(rec)
	if out != nil {
		w.Header().Set("Content-Type", "application/json")
	}
	w.WriteHeader(status)
	w.Write(out)
}

func fault(format string, args ...any) (int, any) {
	return http.StatusBadRequest, map[string]string{"fault_message": fmt.Sprintf(format, args...)}
}

func (f *fakeVMM) handle(method, path string, body []byte) (int, any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failOn == method+" "+path {
		return fault("refused on purpose by the test")
	}
	decode := func(v any) error {
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		return dec.Decode(v)
	}
	preBoot := func() bool { return f.state == "Not started" && !f.loaded }
	const afterBoot = "The requested operation is not supported after starting the microVM."
	switch {
	case method == "GET" && path == "/":
		return 200, InstanceInfo{AppName: "Firecracker", ID: "anonymous-instance", State: f.state, VMMVersion: "1.12.0-fake"}
	case method == "GET" && path == "/machine-config":
		return 200, f.machine
	case method == "PUT" && path == "/logger":
		var l Logger
		if err := decode(&l); err != nil {
			return fault("%v", err)
		}
		// As Firecracker does: the file must exist.
		lf, err := os.OpenFile(f.host(l.LogPath), os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			return fault("Cannot open the log file: %v", err)
		}
		lf.Close()
		return 204, nil
	case method == "PUT" && path == "/machine-config":
		if !preBoot() {
			return fault(afterBoot)
		}
		var m MachineConfig
		if err := decode(&m); err != nil {
			return fault("%v", err)
		}
		f.machine, f.touched = m, true
		return 204, nil
	case method == "PUT" && path == "/boot-source":
		if !preBoot() {
			return fault(afterBoot)
		}
		var b BootSource
		if err := decode(&b); err != nil {
			return fault("%v", err)
		}
		if _, err := os.Stat(f.host(b.KernelImagePath)); err != nil {
			return fault("The kernel file cannot be opened: %v", err)
		}
		f.boot, f.touched = &b, true
		return 204, nil
	case method == "PUT" && strings.HasPrefix(path, "/drives/"):
		if !preBoot() {
			return fault(afterBoot)
		}
		var d Drive
		if err := decode(&d); err != nil {
			return fault("%v", err)
		}
		if d.DriveID != strings.TrimPrefix(path, "/drives/") {
			return fault("The id from the path does not match the id from the body!")
		}
		if _, err := os.Stat(f.host(d.PathOnHost)); err != nil {
			return fault("Unable to create the block device: %v", err)
		}
		f.drives[d.DriveID], f.touched = d, true
		return 204, nil
	case method == "PUT" && strings.HasPrefix(path, "/network-interfaces/"):
		if !preBoot() {
			return fault(afterBoot)
		}
		var n NetworkInterface
		if err := decode(&n); err != nil {
			return fault("%v", err)
		}
		if n.IfaceID != strings.TrimPrefix(path, "/network-interfaces/") {
			return fault("The id from the path does not match the id from the body!")
		}
		f.touched = true
		return 204, nil
	case method == "PUT" && path == "/vsock":
		if !preBoot() {
			return fault(afterBoot)
		}
		var v Vsock
		if err := decode(&v); err != nil {
			return fault("%v", err)
		}
		f.vsock, f.touched = &v, true
		return 204, nil
	case method == "PUT" && path == "/actions":
		var a struct {
			ActionType string `json:"action_type"`
		}
		if err := decode(&a); err != nil {
			return fault("%v", err)
		}
		switch a.ActionType {
		case ActionInstanceStart:
			if !preBoot() {
				return fault(afterBoot)
			}
			if f.boot == nil || f.drives["rootfs"].DriveID == "" {
				return fault("Cannot start microvm without kernel configuration or root drive.")
			}
			if err := f.bootGuest(); err != nil {
				return fault("Failed to start the guest: %v", err)
			}
			f.state = "Running"
			return 204, nil
		case ActionSendCtrlAltDel:
			if f.state != "Running" {
				return fault("The microVM is not running.")
			}
			go f.ctrlAltDel()
			return 204, nil
		}
		return fault("unsupported action %q", a.ActionType)
	case method == "PATCH" && path == "/vm":
		var v struct {
			State string `json:"state"`
		}
		if err := decode(&v); err != nil {
			return fault("%v", err)
		}
		if f.state == "Not started" {
			return fault("The microVM is not running.")
		}
		sig := syscall.SIGSTOP
		f.state = "Paused"
		if v.State == VMResumed {
			sig, f.state = syscall.SIGCONT, "Running"
		}
		if f.cmd != nil && f.cmd.Process != nil {
			syscall.Kill(-f.cmd.Process.Pid, sig)
		}
		return 204, nil
	case method == "PUT" && path == "/snapshot/create":
		if f.state != "Paused" {
			return fault("Cannot create a snapshot of a microVM that is not paused.")
		}
		var s SnapshotCreate
		if err := decode(&s); err != nil {
			return fault("%v", err)
		}
		b, _ := json.Marshal(fakeSnapshot{Guest: f.guest, Port: f.port, UDS: f.vsock.UDSPath})
		if err := os.WriteFile(f.host(s.SnapshotPath), b, 0o600); err != nil {
			return fault("Cannot write the snapshot: %v", err)
		}
		if err := os.WriteFile(f.host(s.MemFilePath), []byte("guest memory"), 0o600); err != nil {
			return fault("Cannot write the memory file: %v", err)
		}
		return 204, nil
	case method == "PUT" && path == "/snapshot/load":
		if f.touched || f.loaded || f.state != "Not started" {
			return fault("Loading a microVM snapshot not allowed after configuring boot-specific resources.")
		}
		var s SnapshotLoad
		if err := decode(&s); err != nil {
			return fault("%v", err)
		}
		if s.MemBackend == nil {
			return fault("missing mem_backend")
		}
		if _, err := os.Stat(f.host(s.MemBackend.BackendPath)); err != nil {
			return fault("Cannot open the memory file: %v", err)
		}
		b, err := os.ReadFile(f.host(s.SnapshotPath))
		if err != nil {
			return fault("Cannot open the snapshot file: %v", err)
		}
		var snap fakeSnapshot
		if err := json.Unmarshal(b, &snap); err != nil {
			return fault("Corrupt snapshot: %v", err)
		}
		f.guest, f.port, f.vsock = snap.Guest, snap.Port, &Vsock{GuestCID: guestCID, UDSPath: snap.UDS}
		if err := f.serveVsock(); err != nil {
			return fault("Cannot restore the vsock device: %v", err)
		}
		f.loaded, f.state = true, "Paused"
		if s.ResumeVM {
			f.state = "Running"
		}
		f.logAgent("restored from a snapshot")
		return 204, nil
	}
	return fault("Invalid request method and/or path: %s %s.", method, path)
}

// fakeSnapshot is what the fake's "snapshot" keeps.
type fakeSnapshot struct {
	Guest string `json:"guest"`
	Port  uint32 `json:"port"`
	UDS   string `json:"uds"`
}

// consoleLine writes one agent log line to the console, as the agent in a
// guest does through the tty (hence "\r\n").
func (f *fakeVMM) consoleLine(stream, msg string) {
	b, _ := json.Marshal(console.Entry{T: time.Now().UTC(), S: stream, M: msg})
	f.console.Write(append(b, '\r', '\n'))
}

func (f *fakeVMM) logAgent(msg string) { f.consoleLine("agent", msg) }

// bootGuest starts the simulated guest. Called with f.mu held.
func (f *fakeVMM) bootGuest() error {
	cfgDrive, ok := f.drives["config"]
	if !ok {
		return errors.New("no config drive")
	}
	file, err := os.Open(f.host(cfgDrive.PathOnHost))
	if err != nil {
		return err
	}
	var cfg agent.GuestConfig
	err = json.NewDecoder(file).Decode(&cfg)
	file.Close()
	if err != nil {
		return fmt.Errorf("config drive: %w", err)
	}
	f.guest = filepath.Join(filepath.Dir(f.host(cfgDrive.PathOnHost)), "guest")
	for p, content := range cfg.Files {
		hp := filepath.Join(f.guest, p)
		os.MkdirAll(filepath.Dir(hp), 0o700)
		if err := os.WriteFile(hp, []byte(content), 0o600); err != nil {
			return err
		}
	}
	os.MkdirAll(filepath.Join(f.guest, "run", "berth"), 0o700)
	var command []string
	for i, a := range cfg.Args {
		if a == "--listen" && i+1 < len(cfg.Args) {
			p, err := strconv.ParseUint(strings.TrimPrefix(cfg.Args[i+1], "vsock:"), 10, 32)
			if err != nil {
				return fmt.Errorf("agent --listen %q", cfg.Args[i+1])
			}
			f.port = uint32(p)
		}
		if a == "--" {
			command = cfg.Args[i+1:]
			break
		}
	}
	fmt.Fprintf(f.console, "[    0.000000] Linux version 6.1.0-fake (kernel noise on the console)\r\n")
	if err := f.serveVsock(); err != nil {
		return err
	}
	f.logAgent(fmt.Sprintf("agent listening on vsock:%d (pid 1)", f.port))
	if len(command) == 0 {
		return nil
	}
	cmd := exec.Command(command[0], command[1:]...)
	cmd.Env, cmd.Dir = cfg.Env, f.guest
	// Dies with the fake VMM, as guest processes die with their VM.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Stdout = &consoleWriter{f: f, stream: "stdout"}
	cmd.Stderr = &consoleWriter{f: f, stream: "stderr"}
	if err := cmd.Start(); err != nil {
		return err
	}
	f.cmd = cmd
	go func() {
		err := cmd.Wait()
		code, reason := 0, "exited with code 0"
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				code, reason = 128+int(ws.Signal()), fmt.Sprintf("killed by signal %d", int(ws.Signal()))
			} else {
				code, reason = ee.ExitCode(), fmt.Sprintf("exited with code %d", ee.ExitCode())
			}
		}
		f.logAgent(fmt.Sprintf("exit %d: %s", code, reason))
		f.exit()
	}()
	return nil
}

// ctrlAltDel is the guest's answer to SendCtrlAltDel: the agent forwards
// SIGINT to COMMAND as SIGTERM, or ends at once without one.
func (f *fakeVMM) ctrlAltDel() {
	f.mu.Lock()
	cmd := f.cmd
	f.mu.Unlock()
	if cmd != nil {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		return
	}
	f.logAgent("exit 0: stopped by interrupt")
	f.exit()
}

// consoleWriter turns a command's output into console log lines.
type consoleWriter struct {
	f      *fakeVMM
	stream string
	buf    []byte
}

func (w *consoleWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		w.f.consoleLine(w.stream, string(w.buf[:i]))
		w.buf = w.buf[i+1:]
	}
}

// serveVsock listens on the vsock device's unix socket, answers the
// CONNECT handshake for the agent's port and hands the connection to a real
// agent.Server confined to the guest's files. Called with f.mu held.
func (f *fakeVMM) serveVsock() error {
	ln, err := net.Listen("unix", f.host(f.vsock.UDSPath))
	if err != nil {
		return err // Firecracker too fails when the socket file exists
	}
	f.agentLn = &chanListener{conns: make(chan net.Conn), done: make(chan struct{}), addr: ln.Addr()}
	srv := agent.NewServer(agent.Options{Root: f.guest, Dir: f.guest})
	go srv.Serve(f.agentLn)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go f.handshake(c)
		}
	}()
	return nil
}

func (f *fakeVMM) handshake(c net.Conn) {
	r := bufio.NewReader(io.LimitReader(c, 64))
	line, err := r.ReadString('\n')
	f.mu.Lock()
	port, ln := f.port, f.agentLn
	f.mu.Unlock()
	if err != nil || strings.TrimSpace(line) != fmt.Sprintf("CONNECT %d", port) {
		c.Close() // nothing listens on that port in the guest
		return
	}
	fmt.Fprintf(c, "OK %d\n", 1073741824)
	select {
	case ln.conns <- c:
	case <-ln.done:
		c.Close()
	}
}

// chanListener is a net.Listener fed by the handshake.
type chanListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
	addr  net.Addr
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *chanListener) Close() error   { l.once.Do(func() { close(l.done) }); return nil }
func (l *chanListener) Addr() net.Addr { return l.addr }

// serveFakeVMM runs the fake on the API socket sock until the VMM ends or
// ctx does.
func serveFakeVMM(ctx context.Context, f *fakeVMM, sock string) error {
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: f}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	err = srv.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Roles of the test binary (BERTH_FC_TEST_ROLE): the fake firecracker
// binary and the fake jailer. Their recordings go to $BERTH_FC_RECORD as
// JSON lines; $BERTH_FC_FAIL names a request ("PUT /vsock") to refuse.
const (
	envRole   = "BERTH_FC_TEST_ROLE"
	envRecord = "BERTH_FC_RECORD"
	envFail   = "BERTH_FC_FAIL"
)

// fakeFirecrackerMain is the fake firecracker binary: `--api-sock PATH`.
// Under the fake jailer, root is the chroot and PATH is inside it.
func fakeFirecrackerMain(args []string, root string) int {
	var sock string
	for i := 0; i+1 < len(args); i++ {
		if args[i] == "--api-sock" {
			sock = args[i+1]
		}
	}
	if sock == "" {
		fmt.Fprintln(os.Stderr, "fake firecracker: --api-sock is required")
		return 1
	}
	recf, err := os.OpenFile(os.Getenv(envRecord), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fake firecracker:", err)
		return 1
	}
	var recMu sync.Mutex
	record := func(r apiRecord) {
		b, _ := json.Marshal(r)
		recMu.Lock()
		recf.Write(append(b, '\n'))
		recMu.Unlock()
	}
	ctx, cancel := context.WithCancel(context.Background())
	f := newFakeVMM(root, os.Stdout, record, cancel)
	f.failOn = os.Getenv(envFail)
	host := sock
	if root != "" {
		host = filepath.Join(root, sock)
	}
	if err := serveFakeVMM(ctx, f, host); err != nil {
		fmt.Fprintln(os.Stderr, "fake firecracker:", err)
		return 1
	}
	return 0
}

// fakeJailerMain is the fake jailer: it makes the chroot
// <base>/<exec-file name>/<id>/root as the real one does (with a dev
// directory, which a second run must not trip over) and runs the fake
// firecracker with the arguments after "--", its paths inside the chroot.
func fakeJailerMain(args []string) int {
	flags := map[string]string{}
	var rest []string
	for i := 0; i < len(args); i++ {
		if args[i] == "--" {
			rest = args[i+1:]
			break
		}
		if i+1 < len(args) {
			flags[args[i]] = args[i+1]
			i++
		}
	}
	for _, k := range []string{"--id", "--exec-file", "--uid", "--gid", "--chroot-base-dir"} {
		if flags[k] == "" {
			fmt.Fprintf(os.Stderr, "fake jailer: %s is required\n", k)
			return 1
		}
	}
	root := filepath.Join(flags["--chroot-base-dir"], filepath.Base(flags["--exec-file"]), flags["--id"], "root")
	if err := os.Mkdir(filepath.Join(root, "dev"), 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "fake jailer: making the device directory:", err)
		return 1
	}
	if recf, err := os.OpenFile(os.Getenv(envRecord), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600); err == nil {
		b, _ := json.Marshal(args)
		json.NewEncoder(recf).Encode(apiRecord{Method: "EXEC", Path: "jailer", Body: b})
		recf.Close()
	}
	return fakeFirecrackerMain(rest, root)
}
