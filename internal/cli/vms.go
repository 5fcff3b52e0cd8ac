package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/term"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/client"
)

// The commands for the VMs of a vm deployment: exec, shell and logs, and
// the vm resource of get and delete.

var execCmd = &command{
	name:    "exec",
	summary: "Run a command in a VM of a vm deployment",
	help: `Usage: berth exec ID [--vm SB] [--no-wake] [--cwd DIR] [-e K=V]... [--timeout SECS] -- CMD [ARG...]

Run a command in one VM of a vm deployment and print its standard output
and standard error. berth exits with the command's exit code (a code the
operating system cannot carry, such as -1, becomes 1).

The arguments after -- are quoted for the guest's /bin/sh and joined into
one command line, so each reaches the command as is. For pipes,
redirection or variables, pass a script: berth exec web -- sh -c 'ls | wc -l'.

Without --no-wake a VM is started when none runs; the command then waits
for it to boot. -o json or -o yaml prints the whole reply: sandbox_id,
exit_code, stdout, stderr and output (both streams interleaved).

Flags:
  --vm SB          run in this VM (sandbox id) rather than any ready one
  --no-wake        fail instead of starting a VM when none runs
  --cwd DIR        working directory inside the VM
  -e K=V           set an environment variable (repeatable)
  --timeout SECS   kill the command after SECS seconds, 1 to 3600 (server default 60)
`,
	run: runExec,
}

var shellCmd = &command{
	name:    "shell",
	summary: "Open an interactive shell in a VM",
	help: `Usage: berth shell ID [--vm SB] [--no-wake] [--cwd DIR]

Open an interactive shell in one VM of a vm deployment. When standard
input is a terminal it is put into raw mode for the session (and restored
afterwards), and window size changes are sent on. Otherwise standard
input is sent as it is read, followed by end-of-file, so a script can be
piped in. berth exits with the shell's exit code.

Flags:
  --vm SB       open the shell in this VM (sandbox id) rather than any ready one
  --no-wake     fail instead of starting a VM when none runs
  --cwd DIR     working directory inside the VM
`,
	run: runShell,
}

var logsCmd = &command{
	name:    "logs",
	summary: "Print the output of a vm deployment's VMs",
	help: `Usage: berth logs ID [-f] [--limit N]
       berth logs ID --since DURATION [--grep TEXT] [--level LEVEL] [--backend B] [-n NS] [--limit N]
       berth logs job JOB_ID [-f]

Print the recent output of every VM of a vm deployment, as lines of
"<time> <vm> <stream> <text>". With -f, keep printing what the VMs write
until interrupted. logs job prints a background job's log (berth get jobs
lists them); with -f it follows the job until it finishes, and fails when
the job failed.

Flags:
  -f, --follow   keep printing new lines
  --limit N      the most recent lines per VM, 0 to 10000 (default 100)

With --since, --grep or --level, logs reads the telemetry store instead
(the obs API: access records, job output, events, for any deployment kind)
and prints "<time> <level> <source> [<backend>] <text>", oldest first, the
newest --limit lines of the span:
  --since D      how far back: a duration (90m, 1h) or days (7d); default 1h
  --grep TEXT    only lines containing TEXT (case-insensitive)
  --level L      only lines of level debug, info, warn or error
  --backend B    only lines of backend B (a sandbox id or upstream)
  -n NS          the deployment's namespace (default: the deployment's own)
`,
	run: runLogs,
}

// exitCodeError makes berth exit with a remote command's exit code, which
// is the result of exec and shell rather than a failure of berth's own.
type exitCodeError struct{ code int }

func (e *exitCodeError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// exitWith returns nil for 0 and an exitCodeError otherwise. Codes outside
// 1..255 become 1: os.Exit would truncate 256 to 0, turning a failure into
// success.
func exitWith(code int) error {
	switch {
	case code == 0:
		return nil
	case code < 0 || code > 255:
		return &exitCodeError{code: exitFailed}
	}
	return &exitCodeError{code: code}
}

// envList is the repeatable -e K=V flag.
type envList map[string]string

func (l envList) String() string { return "" }

func (l envList) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("want K=V, got %q", s)
	}
	if strings.ContainsRune(s, 0) {
		return fmt.Errorf("%q contains a NUL byte", k)
	}
	l[k] = v
	return nil
}

func runExec(ctx context.Context, e *env, args []string) error {
	fs := e.flagSet("exec")
	vm := fs.String("vm", "", "")
	noWake := fs.Bool("no-wake", false, "")
	cwd := fs.String("cwd", "", "")
	env := envList{}
	fs.Var(env, "e", "")
	fs.Var(env, "env", "")
	timeout := fs.Int("timeout", 0, "")
	pos, err := e.parse(fs, args)
	if err != nil {
		return err
	}
	if err := e.canPrint(""); err != nil { // a command's output has no name
		return err
	}
	if len(pos) == 0 || stripKind(pos[0]) == "" {
		return usagef("missing deployment ID")
	}
	if len(pos) == 1 {
		return usagef("missing command (berth exec ID -- CMD [ARG...])")
	}
	id := stripKind(pos[0])
	line, err := shellJoin(pos[1:])
	if err != nil {
		return err
	}
	if *timeout < 0 || *timeout > 3600 {
		return usagef("--timeout must be from 1 to 3600 seconds, got %d", *timeout)
	}
	req := apitype.ExecRequest{Command: line, Cwd: *cwd, SandboxID: *vm}
	if len(env) > 0 {
		req.Env = env
	}
	if *timeout > 0 {
		req.TimeoutSecs = timeout
	}
	if *noWake {
		req.Wake = new(false)
	}
	c, err := e.client()
	if err != nil {
		return err
	}
	out, err := c.Exec(ctx, id, req)
	if err != nil {
		return err
	}
	if e.structured() {
		b, err := json.Marshal(out)
		if err != nil {
			return err
		}
		if err := e.printDocs("", []json.RawMessage{b}, false); err != nil {
			return err
		}
	} else {
		io.WriteString(e.stdout, out.Stdout)
		io.WriteString(e.stderr, out.Stderr)
	}
	return exitWith(out.ExitCode)
}

// shellJoin quotes each argument for /bin/sh and joins them with spaces,
// so that the shell hands the command exactly these arguments.
func shellJoin(args []string) (string, error) {
	parts := make([]string, len(args))
	for i, a := range args {
		if strings.ContainsRune(a, 0) {
			return "", usagef("argument %d contains a NUL byte, which no command can receive", i+1)
		}
		parts[i] = shellQuote(a)
	}
	return strings.Join(parts, " "), nil
}

// shellReserved are the words sh treats specially at the start of a
// command; quoted, they are plain arguments.
var shellReserved = map[string]bool{
	"!": true, "{": true, "}": true, "case": true, "do": true, "done": true,
	"elif": true, "else": true, "esac": true, "fi": true, "for": true,
	"if": true, "in": true, "then": true, "until": true, "while": true,
	"function": true, "select": true, "time": true, "[[": true, "]]": true,
}

// shellQuote returns s as one sh word. Words of only safe characters stay
// readable as they are; anything else is put in single quotes, inside
// which sh interprets nothing; a single quote inside ends the quoting,
// is written escaped, and starts it again. '=' is not safe: an unquoted
// NAME=value first word would be an assignment.
func shellQuote(s string) string {
	safe := s != "" && !shellReserved[s]
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' ||
			strings.ContainsRune("_-./:,+@%", r)) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// noDocument refuses -o json and -o yaml for commands whose output is a
// stream of text, not a document.
func (e *env) noDocument(name string) error {
	if e.structured() {
		return usagef("%s prints text; -o %s is not supported", name, e.output)
	}
	return nil
}

// textDeployment parses the flags and the one deployment ID of a command
// that prints text (see noDocument).
func (e *env) textDeployment(name string, fs *flag.FlagSet, args []string) (string, error) {
	pos, err := e.parse(fs, args)
	if err != nil {
		return "", err
	}
	if err := e.noDocument(name); err != nil {
		return "", err
	}
	if len(pos) != 1 || stripKind(pos[0]) == "" {
		return "", usagef("want exactly one deployment ID, got %d arguments", len(pos))
	}
	return stripKind(pos[0]), nil
}

func runShell(ctx context.Context, e *env, args []string) error {
	fs := e.flagSet("shell")
	vm := fs.String("vm", "", "")
	noWake := fs.Bool("no-wake", false, "")
	cwd := fs.String("cwd", "", "")
	id, err := e.textDeployment("shell", fs, args)
	if err != nil {
		return err
	}
	c, err := e.client()
	if err != nil {
		return err
	}
	opts := client.ShellOptions{Cwd: *cwd, NoWake: *noWake, SandboxID: *vm}
	return runTerminal(ctx, e, opts, "shell", func(ctx context.Context, opts client.ShellOptions) (*client.ShellSession, error) {
		return c.Shell(ctx, id, opts)
	})
}

// runTerminal runs an interactive session (berth shell, berth computer
// shell) that open starts with opts, and returns the remote exit code as
// berth's. A terminal on stdin makes it interactive: raw mode, so that keys
// (Ctrl-C included) go to the remote shell, and its size. what names the
// session in errors.
func runTerminal(ctx context.Context, e *env, opts client.ShellOptions, what string, open func(context.Context, client.ShellOptions) (*client.ShellSession, error)) error {
	fd, tty := -1, false
	if f, ok := e.stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fd, tty = int(f.Fd()), true
		if cols, rows, err := term.GetSize(fd); err == nil {
			opts.Cols, opts.Rows = min(cols, 1000), min(rows, 1000)
		}
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sess, err := open(ctx, opts)
	if err != nil {
		return err
	}
	defer sess.Close()

	if tty {
		old, err := term.MakeRaw(fd)
		if err != nil {
			return fmt.Errorf("setting the terminal to raw mode: %w", err)
		}
		defer term.Restore(fd, old)
		stop := watchResize(fd, func(cols, rows int) {
			sess.Resize(min(max(cols, 1), 1000), min(max(rows, 1), 1000))
		})
		defer stop()
	}

	go sendInput(sess, e.stdin, !tty)
	_, copyErr := io.Copy(e.stdout, sess)
	code, err := sess.Wait()
	if err != nil {
		return err
	}
	if copyErr != nil {
		return fmt.Errorf("writing the %s's output: %w", what, copyErr)
	}
	return exitWith(code)
}

// sendInput copies in to the session. Piped input (sendEOF) is followed by
// Ctrl-D, the remote terminal's end-of-file, so that the shell ends when
// its script does; after a partial last line the first Ctrl-D only
// submits the line, so a second one follows.
func sendInput(sess *client.ShellSession, in io.Reader, sendEOF bool) {
	last := byte('\n')
	buf := make([]byte, 32<<10)
	for {
		n, err := in.Read(buf)
		if n > 0 {
			last = buf[n-1]
			if _, werr := sess.Write(buf[:n]); werr != nil {
				return // the session ended; its own error is reported
			}
		}
		if err != nil {
			break
		}
	}
	if !sendEOF {
		return
	}
	eof := []byte{0x04}
	if last != '\n' {
		eof = []byte{0x04, 0x04}
	}
	sess.Write(eof)
}

func runLogs(ctx context.Context, e *env, args []string) error {
	fs := e.flagSet("logs")
	follow := fs.Bool("f", false, "")
	fs.BoolVar(follow, "follow", false, "")
	limit := fs.Int("limit", 100, "")
	tf := telemetryLogFlags(fs)
	if pos, err := e.parse(e.logsProbe(), args); err == nil && len(pos) > 0 && (pos[0] == "job" || strings.HasPrefix(pos[0], "job/")) {
		pos, err := e.parse(fs, args)
		if err != nil {
			return err
		}
		return runJobLogs(ctx, e, pos, *follow)
	}
	id, err := e.textDeployment("logs", fs, args)
	if err != nil {
		return err
	}
	if *limit < 0 || *limit > 10000 {
		return usagef("--limit must be from 0 to 10000, got %d", *limit)
	}
	c, err := e.client()
	if err != nil {
		return err
	}
	if tf.set() {
		if *follow {
			return usagef("-f does not go with --since, --grep or --level: the telemetry store is read a page at a time")
		}
		return telemetryLogs(ctx, e, c, id, tf, *limit)
	}
	return c.Logs(ctx, id, *limit, *follow, e.stdout)
}

// logsProbe is logs' flag set, to find its positional arguments before
// deciding between a deployment's logs and a job's.
func (e *env) logsProbe() *flag.FlagSet {
	fs := e.flagSet("logs")
	fs.Bool("f", false, "")
	fs.Bool("follow", false, "")
	fs.Int("limit", 100, "")
	telemetryLogFlags(fs)
	return fs
}

// vmFlagSet is the flag set of `get vms` and `delete vm`.
func (e *env) vmFlagSet(name string) (fs *flag.FlagSet, dep *string, force *bool) {
	fs = e.flagSet(name)
	dep = fs.String("d", "", "")
	fs.StringVar(dep, "deployment", "", "")
	force = fs.Bool("force", false, "")
	return fs, dep, force
}

// vmArgs reads "vm[s] [SB]" or "vm/SB" and the deployment from -d.
func vmArgs(pos []string, dep string) (id, sandbox string, err error) {
	if len(pos) == 0 {
		return "", "", usagef("missing resource type")
	}
	_, sandbox, _ = strings.Cut(pos[0], "/")
	rest := pos[1:]
	if sandbox == "" && len(rest) > 0 {
		sandbox, rest = rest[0], rest[1:]
	}
	if len(rest) > 0 {
		return "", "", usagef("unexpected argument %q", rest[0])
	}
	id = stripKind(dep)
	if id == "" {
		return "", "", usagef("missing -d DEPLOYMENT")
	}
	return id, sandbox, nil
}

// oneVM parses a command's flags and its one VM ("vm SB" or "vm/SB", with
// -d DEPLOYMENT), and returns the admin API client.
func (e *env) oneVM(fs *flag.FlagSet, dep *string, args []string) (id, sandbox string, c *client.Client, err error) {
	pos, err := e.parse(fs, args)
	if err != nil {
		return "", "", nil, err
	}
	if id, sandbox, err = vmArgs(pos, *dep); err != nil {
		return "", "", nil, err
	}
	if sandbox == "" {
		return "", "", nil, usagef("missing VM (sandbox id)")
	}
	c, err = e.client()
	return id, sandbox, c, err
}

// runGetVMs is `get vms -d ID`. The VMs come from /metrics, which has
// their uptime and resource use; when the caller may not read /metrics,
// or it does not list the deployment, they come from the deployment's
// status, which has the rest.
func runGetVMs(ctx context.Context, e *env, args []string) error {
	fs, dep, _ := e.vmFlagSet("get")
	pos, err := e.parse(fs, args)
	if err != nil {
		return err
	}
	id, sandbox, err := vmArgs(pos, *dep)
	if err != nil {
		return err
	}
	if sandbox != "" {
		return usagef("get vms lists every VM of a deployment; unexpected %q", sandbox)
	}
	c, err := e.client()
	if err != nil {
		return err
	}
	vms, err := fetchVMs(ctx, c, id)
	if err != nil {
		return err
	}
	if e.structured() {
		doc, err := json.Marshal(struct {
			Deployment string          `json:"deployment"`
			VMs        json.RawMessage `json:"vms"`
			PendingVMs json.RawMessage `json:"pending_vms"`
		}{id, vms.rawVMs, vms.rawPending})
		if err != nil {
			return err
		}
		return e.printDocs("vm", []json.RawMessage{doc}, false)
	}
	if len(vms.VMs) == 0 && len(vms.PendingVMs) == 0 {
		fmt.Fprintf(e.stderr, "No VMs in deployment %s.\n", id)
		return nil
	}
	e.printVMs(vms)
	return nil
}

// vmList is the VMs of one deployment as received (raw, for -o json) and
// decoded (for the table). measured is false when they came from the
// deployment's status, which has no uptime or resource use.
type vmList struct {
	VMs        []apitype.VmView        `json:"vms"`
	PendingVMs []apitype.PendingVmView `json:"pending_vms"`
	rawVMs     json.RawMessage
	rawPending json.RawMessage
	measured   bool
}

func fetchVMs(ctx context.Context, c *client.Client, id string) (*vmList, error) {
	var m struct {
		Deployments []json.RawMessage `json:"deployments"`
	}
	var raw json.RawMessage
	q := client.MetricsQuery{Deployment: id}
	_, err := c.Do(ctx, "GET", "/metrics?"+q.Query(), nil, &raw)
	if err != nil && !client.IsUnauthorized(err) && !client.IsForbidden(err) {
		return nil, err
	}
	if err == nil {
		if err := json.Unmarshal(raw, &m); err != nil {
			return nil, fmt.Errorf("unexpected reply to GET /metrics: %w", err)
		}
	}
	for _, d := range m.Deployments {
		var fields struct {
			ID         string          `json:"id"`
			VMs        json.RawMessage `json:"vms"`
			PendingVMs json.RawMessage `json:"pending_vms"`
		}
		if json.Unmarshal(d, &fields) != nil || fields.ID != id {
			continue
		}
		l := &vmList{rawVMs: orEmpty(fields.VMs), rawPending: orEmpty(fields.PendingVMs), measured: true}
		if err := json.Unmarshal(d, l); err != nil {
			return nil, fmt.Errorf("unexpected reply to GET /metrics: %w", err)
		}
		return l, nil
	}

	// The deployment's status: a 404 here is the right error for an
	// unknown id.
	var st json.RawMessage
	if _, err := c.Do(ctx, "GET", deploymentPath(id), nil, &st); err != nil {
		return nil, err
	}
	var fields struct {
		VMs json.RawMessage `json:"vms"`
	}
	var status apitype.DeploymentStatus
	if json.Unmarshal(st, &fields) != nil || json.Unmarshal(st, &status) != nil {
		return nil, fmt.Errorf("unexpected reply to GET %s", deploymentPath(id))
	}
	l := &vmList{rawVMs: orEmpty(fields.VMs), rawPending: json.RawMessage("[]")}
	for _, v := range status.VMs {
		l.VMs = append(l.VMs, apitype.VmView{SandboxID: v.SandboxID, Addr: v.Addr, InFlight: v.InFlight, Healthy: v.Healthy, Draining: v.Draining})
	}
	return l, nil
}

// orEmpty turns an absent or null list into [].
func orEmpty(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 || string(raw) == "null" {
		return json.RawMessage("[]")
	}
	return raw
}

// printVMs writes the VMs table: running VMs in the server's order, then
// the ones still booting.
func (e *env) printVMs(l *vmList) {
	wide := e.output == "wide"
	tw := newTable(e.stdout)
	cols := []any{"SANDBOX", "ADDR", "STATE", "IN-FLIGHT", "UPTIME", "CPU", "MEMORY"}
	if wide {
		cols = append(cols, "HEALTHY", "STATUS")
	}
	row(tw, cols...)
	for _, v := range l.VMs {
		state := "ready"
		switch {
		case v.Draining:
			state = "draining"
		case !v.Healthy:
			state = "unhealthy"
		}
		uptime, cpu, mem := "-", "-", "-"
		if l.measured {
			uptime = age(v.UptimeSecs)
		}
		if v.CPUPercent != nil {
			cpu = fmt.Sprintf("%.1f%%", *v.CPUPercent)
		}
		if v.MemoryBytes != nil {
			mem = bytesIEC(*v.MemoryBytes)
		}
		cols := []any{v.SandboxID, orDash(v.Addr), state, v.InFlight, uptime, cpu, mem}
		if wide {
			cols = append(cols, yesNo(v.Healthy), "-")
		}
		row(tw, cols...)
	}
	for _, p := range l.PendingVMs {
		cols := []any{p.SandboxID, "-", "booting", 0, age(p.AgeSecs), "-", "-"}
		if wide {
			cols = append(cols, "no", orDash(p.Status))
		}
		row(tw, cols...)
	}
	tw.Flush()
}

// age formats seconds as kubectl does an age: the two largest units,
// such as 45s, 3m12s, 2h5m or 4d3h.
func age(secs int) string {
	if secs < 0 {
		secs = 0
	}
	d, h, m, s := secs/86400, secs/3600%24, secs/60%60, secs%60
	switch {
	case d > 0:
		return fmt.Sprintf("%dd%dh", d, h)
	case h > 0:
		return fmt.Sprintf("%dh%dm", h, m)
	case m > 0:
		return fmt.Sprintf("%dm%ds", m, s)
	}
	return fmt.Sprintf("%ds", s)
}

// runDeleteVM is `delete vm SB -d ID [--force]`.
func runDeleteVM(ctx context.Context, e *env, args []string) error {
	fs, dep, force := e.vmFlagSet("delete")
	id, sandbox, c, err := e.oneVM(fs, dep, args)
	if err != nil {
		return err
	}
	out, err := c.EvictVM(ctx, id, sandbox, *force)
	if err != nil {
		return err
	}
	if e.structured() {
		b, err := json.Marshal(out)
		if err != nil {
			return err
		}
		return e.printDocs("vm", []json.RawMessage{b}, false)
	}
	if out.SandboxID != "" {
		sandbox = out.SandboxID
	}
	fmt.Fprintf(e.stdout, "vm/%s %s\n", clean(sandbox), clean(string(out.Outcome)))
	return nil
}
