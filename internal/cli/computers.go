package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/berth-dev/berth/apitype/computertype"
	"github.com/berth-dev/berth/client"
)

// The computer command: Computers (persistent sandboxes with a workspace
// that survives sleep), their grants, and their operations.

var computerCmd = &command{
	name:    "computer",
	summary: "Create, use and share Computers (persistent sandboxes)",
	help: `Usage: berth computer <subcommand> [flags] [arguments]

A Computer is a sandbox with a workspace that outlives it: it sleeps when
idle and wakes, workspace intact, at the next operation. An operator (or
an admin app-token) creates Computers and grants agents scoped, expiring
access to them; an agent then uses the grant's token as its credential
(--token or BERTH_TOKEN) for the operations the grant allows.

Subcommands:
  create [ID] [--namespace NS] [--image IMG] [--size SIZE]
         [--idle-timeout DUR] [--backing KIND[:HOST]]... [--start]
                               (when --start fails, the Computer is deleted)
  list [--namespace NS]
  get ID
  start ID [--wait]            (--wait queues it when the fleet is full)
  stop ID                      put it to sleep; the workspace stays
  delete ID                    remove it, its workspace and its grants
  exec ID [--cwd DIR] [-e K=V]... [--timeout DUR] -- CMD [ARG...]
  exec ID [--cwd DIR] [-e K=V]... [--timeout DUR] -c SCRIPT
                               run a command (or a bash script); output
                               streams, berth exits with its exit code
  exec ID --detach [--cwd DIR] [-e K=V]... (-- CMD [ARG...] | -c SCRIPT)
                               start it in the background (it keeps the
                               Computer awake); prints the process id
  ps ID                        list background processes
  logs ID PROCESS_ID           print a background process's output
  kill ID PROCESS_ID [--signal SIG]
  shell ID [--cwd DIR]         an interactive terminal
  edit ID PATH --old TEXT --new TEXT [--all]
                               replace TEXT exactly (once, or --all); a
                               missing or ambiguous TEXT changes nothing
  patch ID FILE|-              apply a unified diff (git or traditional)
                               to the workspace, all files or none
  cp SRC DST                   copy a file to or from a Computer: one side
                               is ID:PATH (relative to the workspace), the
                               other a local path or - for stdin/stdout
  grant ID --actions LIST --expires-in DUR [--actor A] [--via V] [--egress JSON]
                               issue a grant and print its token; LIST is
                               comma-separated actions (exec, bash,
                               files.read, ...), "files.*" or "all"
  grants ID                    list the unexpired grants
  revoke ID GRANT_ID           revoke a grant
  expose ID PORT [--public | --sign-in PROVIDER]
                               reach PORT inside the Computer through the
                               gateway; prints the URL. --sign-in also admits
                               browsers that sign in with that auth provider
                               of the Computer's namespace
  ports ID                     list exposed ports
  unexpose ID PORT
  facts ID [-f] [--after SEQ]  print the facts log; -f follows it

Durations take s, m, h and d units (90s, 10m, 12h, 7d).
`,
	run: runComputer,
}

// computerActions is the contract's computerActionSchema, for expanding
// "all" and "files.*" in grant --actions.
var computerActions = []string{
	"exec", "start", "delete", "files.read", "files.readBytes", "files.write", "files.writeBytes",
	"files.list", "files.glob", "files.grep", "files.edit", "files.patch", "mkdir", "bash", "backing",
	"exposePort", "listPorts", "unexposePort", "terminal", "stop", "processStart", "processList",
	"processKill",
}

func runComputer(ctx context.Context, e *env, args []string) error {
	// The subcommand is the first argument that is not a global flag.
	fs := e.flagSet("computer")
	globals, sub, rest := splitCommand(fs, args)
	rest = append(globals[:len(globals):len(globals)], rest...) // a copy: the caller's args stay as given
	run, ok := map[string]func(context.Context, *env, []string) error{
		"create": computerCreate, "list": computerList, "ls": computerList, "get": computerGet,
		"start": computerStart, "stop": computerStop, "delete": computerDelete, "rm": computerDelete,
		"exec": computerExec, "shell": computerShell, "cp": computerCp,
		"grant": computerGrant, "grants": computerGrants, "revoke": computerRevoke,
		"expose": computerExpose, "ports": computerPorts, "unexpose": computerUnexpose,
		"facts": computerFacts, "ps": computerPs, "logs": computerLogs, "kill": computerKill,
		"edit": computerEdit, "patch": computerPatch,
	}[sub]
	switch {
	case sub == "" && len(rest) == 0:
		return usagef("missing subcommand")
	case sub == "" || sub == "help" || sub == "-h" || sub == "--help":
		return errHelp
	case !ok:
		return usagef("unknown subcommand %q", sub)
	}
	return run(ctx, e, rest)
}

// oneID parses a subcommand's flags and its Computer id argument, and
// returns the id and up to extra more positional arguments.
func oneID(e *env, name string, fs *flag.FlagSet, args []string, extra int) (string, []string, error) {
	pos, err := e.parse(fs, args)
	if err != nil {
		return "", nil, err
	}
	if len(pos) == 0 || pos[0] == "" {
		return "", nil, usagef("%s: missing Computer ID", name)
	}
	if len(pos)-1 > extra {
		return "", nil, usagef("%s: unexpected argument %q", name, pos[1+extra])
	}
	return strings.TrimPrefix(pos[0], "computer/"), pos[1:], nil
}

// computerClient is oneID followed by the admin API client, for the
// subcommands that check nothing more before they call the server.
func computerClient(e *env, name string, fs *flag.FlagSet, args []string, extra int) (string, []string, *client.Client, error) {
	id, rest, err := oneID(e, name, fs, args, extra)
	if err != nil {
		return "", nil, nil, err
	}
	c, err := e.client()
	return id, rest, c, err
}

// computerItems is a `computer NAME ID` subcommand that lists what the
// Computer holds: list fetches it, and printList prints it (empty's %s is
// computer/ID).
func computerItems[T any](ctx context.Context, e *env, args []string, name, kind, empty string,
	list func(*client.Client, context.Context, string) ([]T, error), header []any, cells func(T) []any) error {
	id, _, c, err := computerClient(e, name, e.flagSet("computer "+name), args, 0)
	if err != nil {
		return err
	}
	items, err := list(c, ctx, id)
	if err != nil {
		return err
	}
	return printList(e, items, kind, fmt.Sprintf(empty, "computer/"+id), header, cells)
}

// printList prints a list reply: as kind in the structured formats; the
// line empty on stderr when there is nothing; else a table of header and
// one row of cells per item.
func printList[T any](e *env, list []T, kind, empty string, header []any, cells func(T) []any) error {
	if e.structured() {
		return e.printValue(kind, list)
	}
	if len(list) == 0 {
		fmt.Fprintln(e.stderr, empty)
		return nil
	}
	tw := newTable(e.stdout)
	row(tw, header...)
	for _, v := range list {
		row(tw, cells(v)...)
	}
	tw.Flush()
	return nil
}

// printState prints a Computer a lifecycle call returned: whole in the
// structured formats, else its id and state.
func (e *env) printState(out *client.Computer) error {
	if e.structured() {
		return e.printValue("computer", out)
	}
	fmt.Fprintf(e.stdout, "computer/%s %s\n", out.ID, state(out.State))
	return nil
}

func computerCreate(ctx context.Context, e *env, args []string) (err error) {
	fs := e.flagSet("computer create")
	ns := fs.String("namespace", "", "")
	fs.StringVar(ns, "n", "", "")
	image := fs.String("image", "", "")
	size := fs.String("size", "", "")
	idle := fs.String("idle-timeout", "", "")
	var backings stringList
	fs.Var(&backings, "backing", "")
	start := fs.Bool("start", false, "")
	pos, err := e.parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		return usagef("create takes at most one ID, got %d arguments", len(pos))
	}
	// The Computer is created sleeping and then started, two requests, so
	// that when the start fails the CLI knows the create succeeded and
	// deletes what it created: a failed command leaves nothing behind.
	req := client.NewComputer{Namespace: *ns, Image: *image, Size: *size}
	if len(pos) == 1 {
		req.ID = strings.TrimPrefix(pos[0], "computer/")
	}
	if *idle != "" {
		d, err := parseLifetime(*idle)
		if err != nil {
			return usagef("--idle-timeout: %v", err)
		}
		secs := int64(d / time.Second)
		req.IdleTimeoutSecs = &secs
	}
	for _, b := range backings {
		kind, host, _ := strings.Cut(b, ":")
		req.Backings = append(req.Backings, client.ComputerBacking{Kind: kind, HostID: host})
	}
	c, err := e.client()
	if err != nil {
		return err
	}
	out, err := c.CreateComputer(ctx, req)
	if err != nil {
		return err
	}
	id := out.ID
	defer func() {
		if err != nil {
			e.undoCreate(ctx, c, id)
		}
	}()
	if *start {
		if out, err = c.StartComputer(ctx, id, false); err != nil {
			return err
		}
	}
	if e.structured() {
		return e.printValue("computer", out)
	}
	_, err = fmt.Fprintf(e.stdout, "computer/%s created (%s)\n", out.ID, state(out.State))
	return err
}

// undoCreate deletes Computer id, which this command created before a
// later step failed. It is best effort: the command fails with that
// step's error either way, and a failed delete is reported, not hidden.
func (e *env) undoCreate(ctx context.Context, c *client.Client, id string) {
	// The command's context may be what ended (Ctrl-C): clean up anyway,
	// for a bounded time.
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := c.DeleteComputer(dctx, id); err != nil {
		fmt.Fprintf(e.stderr, "berth: computer/%s was created but could not be deleted after the failure below: %v\n", id, err)
		return
	}
	fmt.Fprintf(e.stderr, "computer/%s deleted: the command failed after creating it\n", id)
}

func state(s client.ComputerState) string {
	if s.State == "queued" && s.Position != nil {
		return fmt.Sprintf("queued #%d", *s.Position)
	}
	return s.State
}

func backingList(bs []client.ComputerBacking) string {
	if len(bs) == 0 {
		return "-"
	}
	parts := make([]string, len(bs))
	for i, b := range bs {
		parts[i] = b.Kind
		if b.HostID != "" {
			parts[i] += ":" + b.HostID
		}
	}
	return strings.Join(parts, ",")
}

func computerList(ctx context.Context, e *env, args []string) error {
	fs := e.flagSet("computer list")
	ns := fs.String("namespace", "", "")
	fs.StringVar(ns, "n", "", "")
	if err := e.parseNone(fs, args); err != nil {
		return err
	}
	c, err := e.client()
	if err != nil {
		return err
	}
	list, err := c.Computers(ctx, *ns)
	if err != nil {
		return err
	}
	if e.structured() {
		docs := make([]json.RawMessage, len(list))
		for i := range list {
			docs[i], _ = json.Marshal(list[i])
		}
		return e.printDocs("computer", docs, true)
	}
	e.printComputers(list)
	return nil
}

func (e *env) printComputers(list []client.Computer) {
	if len(list) == 0 {
		fmt.Fprintln(e.stderr, "No Computers.")
		return
	}
	tw := newTable(e.stdout)
	row(tw, "ID", "NAMESPACE", "STATE", "ACTIVE", "BACKINGS", "IDLE-TIMEOUT", "AGE")
	for _, cp := range list {
		active := "-"
		if cp.Active != nil {
			active = backingList([]client.ComputerBacking{*cp.Active})
		}
		row(tw, cp.ID, cp.Namespace, state(cp.State), active, backingList(cp.Backings),
			(time.Duration(cp.IdleTimeoutSecs) * time.Second).String(), ageMs(cp.CreatedAt))
	}
	tw.Flush()
}

// ageMs is how long ago a Unix-millisecond time was.
func ageMs(ms int64) string { return age(int(time.Since(time.UnixMilli(ms)) / time.Second)) }

func computerGet(ctx context.Context, e *env, args []string) error {
	id, _, c, err := computerClient(e, "get", e.flagSet("computer get"), args, 0)
	if err != nil {
		return err
	}
	out, err := c.Computer(ctx, id)
	if err != nil {
		return err
	}
	if e.structured() {
		return e.printValue("computer", out)
	}
	e.printComputers([]client.Computer{*out})
	return nil
}

func computerStart(ctx context.Context, e *env, args []string) error {
	fs := e.flagSet("computer start")
	wait := fs.Bool("wait", false, "")
	id, _, c, err := computerClient(e, "start", fs, args, 0)
	if err != nil {
		return err
	}
	out, err := c.StartComputer(ctx, id, *wait)
	if err != nil {
		return err
	}
	return e.printState(out)
}

func computerStop(ctx context.Context, e *env, args []string) error {
	id, _, c, err := computerClient(e, "stop", e.flagSet("computer stop"), args, 0)
	if err != nil {
		return err
	}
	out, err := c.StopComputer(ctx, id)
	if err != nil {
		return err
	}
	return e.printState(out)
}

func computerDelete(ctx context.Context, e *env, args []string) error {
	id, _, c, err := computerClient(e, "delete", e.flagSet("computer delete"), args, 0)
	if err != nil {
		return err
	}
	if err := c.DeleteComputer(ctx, id); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "computer/%s deleted\n", id)
	return nil
}

func computerExec(ctx context.Context, e *env, args []string) error {
	fs := e.flagSet("computer exec")
	cwd := fs.String("cwd", "", "")
	env := envList{}
	fs.Var(env, "e", "")
	fs.Var(env, "env", "")
	timeout := fs.String("timeout", "", "")
	script := fs.String("c", "", "")
	detach := fs.Bool("detach", false, "")
	fs.BoolVar(detach, "d", false, "")
	pos, err := e.parse(fs, args)
	if err != nil {
		return err
	}
	if err := e.noDocument("computer exec"); err != nil && !*detach {
		return err
	}
	if len(pos) == 0 || pos[0] == "" {
		return usagef("exec: missing Computer ID")
	}
	id := strings.TrimPrefix(pos[0], "computer/")
	req := client.ComputerExec{Argv: pos[1:], Script: *script, Cwd: *cwd}
	switch {
	case *script != "" && len(req.Argv) > 0:
		return usagef("exec: give -c SCRIPT or -- CMD [ARG...], not both")
	case *script == "" && len(req.Argv) == 0:
		return usagef("exec: missing command (berth computer exec ID -- CMD [ARG...])")
	}
	if len(env) > 0 {
		req.Env = env
	}
	if *timeout != "" {
		d, err := parseLifetime(*timeout)
		if err != nil {
			return usagef("--timeout: %v", err)
		}
		req.TimeoutMs = d.Milliseconds()
	}
	c, err := e.client()
	if err != nil {
		return err
	}
	if *detach {
		if *timeout != "" {
			return usagef("exec: --timeout does not apply to --detach; stop it with kill")
		}
		p, err := c.StartComputerProcess(ctx, id, req)
		if err != nil {
			return err
		}
		if e.structured() {
			return e.printValue("process", p)
		}
		fmt.Fprintln(e.stdout, p.ID)
		fmt.Fprintf(e.stderr, "started in the background as pid %d; see its output with: berth computer logs %s %s\n", p.PID, id, p.ID)
		return nil
	}
	exit, err := c.ComputerExec(ctx, id, req, e.stdout, e.stderr)
	if err != nil {
		return err
	}
	return exitWith(exit.ExitCode)
}

func computerShell(ctx context.Context, e *env, args []string) error {
	fs := e.flagSet("computer shell")
	cwd := fs.String("cwd", "", "")
	id, _, err := oneID(e, "shell", fs, args, 0)
	if err != nil {
		return err
	}
	if err := e.noDocument("computer shell"); err != nil {
		return err
	}
	c, err := e.client()
	if err != nil {
		return err
	}
	return runTerminal(ctx, e, client.ShellOptions{Cwd: *cwd}, "terminal", func(ctx context.Context, opts client.ShellOptions) (*client.ShellSession, error) {
		return c.ComputerTerminal(ctx, id, opts)
	})
}

// remotePath splits "ID:PATH". A local path that contains a colon must
// start with "/" or "." (./a:b) to be taken as local.
func remotePath(arg string) (id, path string, ok bool) {
	if strings.HasPrefix(arg, "/") || strings.HasPrefix(arg, ".") {
		return "", "", false
	}
	id, path, ok = strings.Cut(arg, ":")
	if !ok || id == "" || strings.Contains(id, "/") {
		return "", "", false
	}
	return id, path, true
}

func computerCp(ctx context.Context, e *env, args []string) error {
	fs := e.flagSet("computer cp")
	pos, err := e.parse(fs, args)
	if err != nil {
		return err
	}
	if err := e.noDocument("computer cp"); err != nil {
		return err
	}
	if len(pos) != 2 {
		return usagef("cp: want SRC and DST, one of them ID:PATH")
	}
	srcID, srcPath, srcRemote := remotePath(pos[0])
	dstID, dstPath, dstRemote := remotePath(pos[1])
	switch {
	case srcRemote == dstRemote:
		return usagef("cp: exactly one of SRC and DST must be ID:PATH (a local path with a colon starts with ./)")
	case srcRemote && srcPath == "", dstRemote && dstPath == "":
		return usagef("cp: ID:PATH needs a path after the colon")
	}
	c, err := e.client()
	if err != nil {
		return err
	}
	if dstRemote {
		var in io.Reader = e.stdin
		var mode uint32
		if pos[0] != "-" {
			f, err := os.Open(pos[0])
			if err != nil {
				return err
			}
			defer f.Close()
			fi, err := f.Stat()
			if err != nil {
				return err
			}
			if fi.IsDir() {
				return fmt.Errorf("cp: %s is a directory; copy files one at a time, or a tar archive", pos[0])
			}
			in, mode = f, uint32(fi.Mode().Perm())
			if strings.HasSuffix(dstPath, "/") {
				dstPath += filepath.Base(pos[0])
			}
		}
		w, err := c.WriteComputerFile(ctx, dstID, dstPath, in, mode, true)
		if err != nil {
			return err
		}
		fmt.Fprintf(e.stderr, "%s:%s: %d bytes\n", dstID, w.Path, w.Bytes)
		return nil
	}
	if pos[1] == "-" {
		_, err := c.ReadComputerFile(ctx, srcID, srcPath, e.stdout)
		return err
	}
	dst := pos[1]
	if fi, err := os.Stat(dst); err == nil && fi.IsDir() {
		dst = filepath.Join(dst, filepath.Base(srcPath))
	}
	// Into a temp file beside the target, renamed when complete, so a
	// failed copy leaves no half file.
	tmp, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".berth-cp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := c.ReadComputerFile(ctx, srcID, srcPath, tmp); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dst)
}

// expandActions turns "exec,files.*" or "all" into actions.
func expandActions(list string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	add := func(a string) {
		if !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	for _, a := range strings.Split(list, ",") {
		a = strings.TrimSpace(a)
		switch {
		case a == "":
		case a == "all" || a == "*":
			for _, x := range computerActions {
				add(x)
			}
		case strings.HasSuffix(a, ".*"):
			n := 0
			for _, x := range computerActions {
				if strings.HasPrefix(x, strings.TrimSuffix(a, "*")) {
					add(x)
					n++
				}
			}
			if n == 0 {
				return nil, fmt.Errorf("%q matches no action", a)
			}
		default:
			add(a) // the server names what it does not know
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no actions given")
	}
	return out, nil
}

func computerGrant(ctx context.Context, e *env, args []string) error {
	fs := e.flagSet("computer grant")
	actions := fs.String("actions", "", "")
	expires := fs.String("expires-in", "", "")
	actor := fs.String("actor", "", "")
	via := fs.String("via", "", "")
	egress := fs.String("egress", "", "")
	id, _, err := oneID(e, "grant", fs, args, 0)
	if err != nil {
		return err
	}
	if err := e.canPrint(""); err != nil { // a one-time secret, or an action: nothing to name
		return err
	}
	if *actions == "" {
		return usagef("grant: --actions is required (e.g. exec,files.* or all)")
	}
	acts, err := expandActions(*actions)
	if err != nil {
		return usagef("--actions: %v", err)
	}
	if *expires == "" {
		return usagef("grant: --expires-in is required (e.g. 1h or 7d)")
	}
	d, err := parseLifetime(*expires)
	if err != nil {
		return usagef("--expires-in: %v", err)
	}
	secs := int64(d / time.Second)
	req := client.NewComputerGrant{Actions: acts, ExpiresInSecs: &secs}
	if *actor != "" {
		req.Provenance = &client.ComputerProvenance{Actor: *actor, Via: *via}
	} else if *via != "" {
		return usagef("grant: --via needs --actor")
	}
	if *egress != "" {
		if !json.Valid([]byte(*egress)) {
			return usagef("--egress must be JSON (a JSON Schema)")
		}
		req.Egress = json.RawMessage(*egress)
	}
	c, err := e.client()
	if err != nil {
		return err
	}
	g, err := c.GrantComputer(ctx, id, req)
	if err != nil {
		return err
	}
	if e.structured() {
		return e.printValue("", g)
	}
	fmt.Fprintln(e.stdout, g.Token)
	fmt.Fprintf(e.stderr, "grant %s on computer/%s: %s, for %s, expires %s.\nThe token is shown only now; give it to the agent as --token or BERTH_TOKEN.\n",
		g.ID, id, strings.Join(g.Grant.Actions, ","), g.Grant.Provenance.Actor, msStamp(g.Grant.ExpiresAt))
	return nil
}

func msStamp(ms int64) string { return time.UnixMilli(ms).UTC().Format(time.RFC3339) }

func computerGrants(ctx context.Context, e *env, args []string) error {
	return computerItems(ctx, e, args, "grants", "grant", "%s has no unexpired grants.", (*client.Client).ComputerGrants,
		[]any{"ID", "ACTOR", "VIA", "ACTIONS", "EXPIRES", "STATE"}, func(g client.ComputerGrant) []any {
			st := "valid"
			if g.RevokedAt != nil {
				st = "revoked " + msStamp(*g.RevokedAt)
			}
			return []any{g.ID, g.Grant.Provenance.Actor, orDash(g.Grant.Provenance.Via), strings.Join(g.Grant.Actions, ","), msStamp(g.Grant.ExpiresAt), st}
		})
}

func computerRevoke(ctx context.Context, e *env, args []string) error {
	id, rest, err := oneID(e, "revoke", e.flagSet("computer revoke"), args, 1)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return usagef("revoke: want ID GRANT_ID")
	}
	c, err := e.client()
	if err != nil {
		return err
	}
	if err := c.RevokeComputerGrant(ctx, id, rest[0]); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "grant %s on computer/%s revoked\n", rest[0], id)
	return nil
}

func portArg(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 65535 {
		return 0, usagef("PORT must be a number from 1 to 65535, got %q", s)
	}
	return n, nil
}

func computerExpose(ctx context.Context, e *env, args []string) error {
	fs := e.flagSet("computer expose")
	public := fs.Bool("public", false, "")
	signIn := fs.String("sign-in", "", "")
	id, rest, err := oneID(e, "expose", fs, args, 1)
	if err != nil {
		return err
	}
	if err := e.canPrint(""); err != nil { // a one-time secret, or an action: nothing to name
		return err
	}
	if len(rest) != 1 {
		return usagef("expose: want ID PORT")
	}
	port, err := portArg(rest[0])
	if err != nil {
		return err
	}
	c, err := e.client()
	if err != nil {
		return err
	}
	p, err := c.ExposeComputerPortWith(ctx, id, computertype.PortRequest{Port: port, Public: *public, SignIn: *signIn})
	if err != nil {
		return err
	}
	if e.structured() {
		return e.printValue("", p)
	}
	fmt.Fprintln(e.stdout, p.URL)
	return nil
}

func computerPorts(ctx context.Context, e *env, args []string) error {
	return computerItems(ctx, e, args, "ports", "", "%s exposes no ports.", (*client.Client).ComputerPorts,
		[]any{"PORT", "PUBLIC", "URL"}, func(p client.ComputerPort) []any {
			return []any{p.Port, yesNo(p.Public), p.URL}
		})
}

func computerUnexpose(ctx context.Context, e *env, args []string) error {
	id, rest, err := oneID(e, "unexpose", e.flagSet("computer unexpose"), args, 1)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return usagef("unexpose: want ID PORT")
	}
	port, err := portArg(rest[0])
	if err != nil {
		return err
	}
	c, err := e.client()
	if err != nil {
		return err
	}
	if err := c.UnexposeComputerPort(ctx, id, port); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "computer/%s port %d unexposed\n", id, port)
	return nil
}

func computerFacts(ctx context.Context, e *env, args []string) error {
	fs := e.flagSet("computer facts")
	follow := fs.Bool("f", false, "")
	fs.BoolVar(follow, "follow", false, "")
	after := fs.Int64("after", 0, "")
	id, _, err := oneID(e, "facts", fs, args, 0)
	if err != nil {
		return err
	}
	if e.output == "yaml" {
		return usagef("facts prints JSON lines with -o json; -o yaml is not supported")
	}
	if *after < 0 {
		return usagef("--after must not be negative")
	}
	c, err := e.client()
	if err != nil {
		return err
	}
	show := func(f client.ComputerFact) error {
		if e.output == "json" {
			b, err := json.Marshal(f)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(e.stdout, "%s\n", b)
			return err
		}
		_, err := fmt.Fprintln(e.stdout, describeFact(f))
		return err
	}
	if *follow {
		return c.FollowComputerFacts(ctx, id, *after, show)
	}
	cur := *after
	for {
		page, next, err := c.ComputerFacts(ctx, id, cur, 0)
		if err != nil {
			return err
		}
		for _, f := range page {
			if err := show(f); err != nil {
				return err
			}
		}
		if len(page) == 0 || next <= cur {
			return nil
		}
		cur = next
	}
}

// describeFact renders a fact as one line: sequence, kind, actor, and the
// kind's own fields.
func describeFact(f client.ComputerFact) string {
	var v struct {
		Kind       string
		Provenance client.ComputerProvenance
		RequestID  string
		ExitCode   *int
		WallTimeMs int64
		Path       string
		Bytes      int64
		Host       string
		Method     string
		Status     int
		State      client.ComputerState
		ObservedAt int64
		RuntimeID  string
		Ended      bool
	}
	if err := json.Unmarshal(f.Fact, &v); err != nil {
		return fmt.Sprintf("%d\t%s", f.Seq, clean(string(f.Fact)))
	}
	actor := v.Provenance.Actor
	if v.Provenance.Via != "" {
		actor += " via " + v.Provenance.Via
	}
	var detail string
	switch v.Kind {
	case "process.exited":
		code := "killed"
		if v.ExitCode != nil {
			code = "exit " + strconv.Itoa(*v.ExitCode)
		}
		detail = fmt.Sprintf("%s %s after %dms", v.RequestID, code, v.WallTimeMs)
	case "files.written":
		detail = fmt.Sprintf("%s (%d bytes)", v.Path, v.Bytes)
	case "egress":
		detail = fmt.Sprintf("%s %s → %d", v.Method, v.Host, v.Status)
	case "lifecycle":
		detail = state(v.State) + " at " + msStamp(v.ObservedAt)
	case "interval":
		detail = fmt.Sprintf("runtime %s observed %s ended=%t", v.RuntimeID, msStamp(v.ObservedAt), v.Ended)
	}
	return clean(fmt.Sprintf("%-4d  %-14s  %-20s  %s", f.Seq, v.Kind, actor, detail))
}

func computerPs(ctx context.Context, e *env, args []string) error {
	return computerItems(ctx, e, args, "ps", "process", "%s has no background processes.", (*client.Client).ComputerProcesses,
		[]any{"ID", "PID", "STATE", "STARTED", "BY", "COMMAND"}, func(p client.ComputerProcess) []any {
			st := "running"
			if !p.Running {
				st = "exited"
				if p.ExitCode != nil {
					st = "exit " + strconv.Itoa(*p.ExitCode)
				}
			}
			by := "-"
			if p.Provenance != nil {
				by = p.Provenance.Actor
			}
			return []any{p.ID, p.PID, st, ageMs(p.StartedAt), by, p.Command}
		})
}

func computerLogs(ctx context.Context, e *env, args []string) error {
	id, rest, err := oneID(e, "logs", e.flagSet("computer logs"), args, 1)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return usagef("logs: want ID PROCESS_ID")
	}
	if err := e.noDocument("computer logs"); err != nil {
		return err
	}
	c, err := e.client()
	if err != nil {
		return err
	}
	_, err = c.ComputerProcessOutput(ctx, id, rest[0], 0, e.stdout)
	return err
}

func computerKill(ctx context.Context, e *env, args []string) error {
	fs := e.flagSet("computer kill")
	sig := fs.String("signal", "", "")
	fs.StringVar(sig, "s", "", "")
	id, rest, err := oneID(e, "kill", fs, args, 1)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return usagef("kill: want ID PROCESS_ID")
	}
	c, err := e.client()
	if err != nil {
		return err
	}
	p, err := c.KillComputerProcess(ctx, id, rest[0], *sig)
	if err != nil {
		return err
	}
	if e.structured() {
		return e.printValue("process", p)
	}
	fmt.Fprintf(e.stdout, "process %s signalled\n", p.ID)
	return nil
}

func computerEdit(ctx context.Context, e *env, args []string) error {
	fs := e.flagSet("computer edit")
	var olds, news stringList
	fs.Var(&olds, "old", "")
	fs.Var(&news, "new", "")
	all := fs.Bool("all", false, "")
	id, rest, err := oneID(e, "edit", fs, args, 1)
	if err != nil {
		return err
	}
	if err := e.canPrint(""); err != nil { // a one-time secret, or an action: nothing to name
		return err
	}
	if len(rest) != 1 {
		return usagef("edit: want ID PATH")
	}
	if len(olds) == 0 || len(olds) != len(news) {
		return usagef("edit: give --old and --new in pairs (%d --old, %d --new)", len(olds), len(news))
	}
	edits := make([]client.ComputerEdit, len(olds))
	for i := range olds {
		if olds[i] == "" {
			return usagef("edit: --old must not be empty")
		}
		edits[i] = client.ComputerEdit{Old: olds[i], New: news[i], ReplaceAll: *all}
	}
	c, err := e.client()
	if err != nil {
		return err
	}
	out, err := c.EditComputerFile(ctx, id, rest[0], edits, "")
	if err != nil {
		return err
	}
	if e.structured() {
		return e.printValue("", out)
	}
	fmt.Fprintf(e.stdout, "%s: %d replacement(s), %d bytes\n", out.Path, out.Replacements, out.Bytes)
	return nil
}

func computerPatch(ctx context.Context, e *env, args []string) error {
	id, rest, err := oneID(e, "patch", e.flagSet("computer patch"), args, 1)
	if err != nil {
		return err
	}
	if err := e.canPrint(""); err != nil { // a one-time secret, or an action: nothing to name
		return err
	}
	if len(rest) != 1 {
		return usagef("patch: want ID FILE (or - for stdin)")
	}
	diff, err := e.readInput(rest[0])
	if err != nil {
		return err
	}
	c, err := e.client()
	if err != nil {
		return err
	}
	files, err := c.PatchComputer(ctx, id, string(diff))
	if err != nil {
		return err
	}
	if e.structured() {
		return e.printValue("", files)
	}
	for _, f := range files {
		what := "patched"
		switch {
		case f.Created:
			what = "created"
		case f.Deleted:
			what = "deleted"
		}
		fmt.Fprintf(e.stdout, "%s %s\n", what, f.Path)
	}
	return nil
}
