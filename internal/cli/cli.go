// Package cli is berth's command-line client: every `berth` subcommand
// except `serve`, which runs the server. It talks to the admin API only
// through package client, so it works against any berth (or app-lb) it can
// reach, and it imports nothing else of berth's internals.
//
// Each command lives in its own file with its help text beside it. Flags
// are parsed with the standard flag package; [Run] is the dispatcher.
// Global flags (--server, -o) may come before or after the command name,
// and flags may be mixed with positional arguments, as kubectl allows.
//
// Exit codes follow heyctl, app-lb's CLI: 0 success, 1 the command failed
// (`error: <message>` on stderr), 2 a usage error (the problem on one line
// and a hint to the command's --help on stderr, as git and kubectl do).
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/berth-dev/berth/client"
)

// Version is the version `berth version` reports. The release build sets it
// with -ldflags "-X github.com/berth-dev/berth/internal/cli.Version=v1.2.3";
// when empty, the module version from the build info is used.
var Version = ""

// DefaultServer is the admin API address used when neither --server nor
// BERTH_SERVER is set: app-lb's and berth's default admin listener.
const DefaultServer = "http://127.0.0.1:9090"

// defaultPollInterval is how often drain re-reads the deployment while it
// waits: often enough to return promptly, rarely enough not to load the
// admin API.
const defaultPollInterval = time.Second

// Exit codes.
const (
	exitOK      = 0
	exitFailed  = 1
	exitUsage   = 2
	maxFileSize = 16 << 20 // the most `apply -f` reads of one file
)

// env is what a command runs with: its I/O, the global flags, and the knobs
// tests turn.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer

	server string // --server; "" means the current context's, else DefaultServer
	output string // -o: "", json, yaml, name or wide

	// Credentials: --token (BERTH_TOKEN) wins over --user/--password
	// (BERTH_USER/BERTH_PASSWORD), which win over the token of the
	// context (--context, BERTH_CONTEXT, else the current one).
	token, user, password string
	contextName           string
	resolved              string    // the server credentials() settled on
	current               *ctxEntry // the login context credentials() used, if any

	// Verifying an https server: --ca-file (BERTH_CA_FILE) and
	// --insecure-skip-tls-verify (BERTH_INSECURE_SKIP_TLS_VERIFY=1).
	caFile   string
	insecure bool

	httpClient   *http.Client  // nil: the client package's default
	pollInterval time.Duration // how often drain re-reads the deployment
}

// command is one `berth` subcommand.
type command struct {
	name    string
	summary string // one line, for the command list
	help    string // the full help: usage lines, description, flags
	run     func(ctx context.Context, e *env, args []string) error
}

// commands lists the subcommands in the order `berth help` shows them. It
// is filled in init because the help command refers back to it.
var commands []*command

func init() {
	commands = []*command{
		applyCmd, getCmd, describeCmd, deleteCmd, scaleCmd, rolloutCmd,
		cordonCmd, drainCmd, uncordonCmd, execCmd, shellCmd, logsCmd, updateCmd, pullCmd, mountsCmd, buildCmd,
		statusCmd, createCmd, loginCmd, logoutCmd, whoamiCmd, configCmd, tokenCmd,
		blockCmd, allowCmd, respondCmd,
		computerCmd, artifactCmd, diskCmd, imageCmd, hostCmd, pluginsCmd, feedCmd, versionCmd, helpCmd,
	}
}

func lookup(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

// Run runs one berth command. args excludes the program name. It returns
// the process exit code: 0 on success, 1 when the command failed, 2 on a
// usage error.
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	e := &env{
		stdin:        stdin,
		stdout:       stdout,
		stderr:       stderr,
		pollInterval: defaultPollInterval,
	}
	if s := os.Getenv("BERTH_SERVER"); s != "" {
		e.server = s
	}
	e.token, e.user, e.password = os.Getenv("BERTH_TOKEN"), os.Getenv("BERTH_USER"), os.Getenv("BERTH_PASSWORD")
	e.contextName = os.Getenv("BERTH_CONTEXT")
	e.caFile = os.Getenv("BERTH_CA_FILE")
	e.insecure, _ = strconv.ParseBool(os.Getenv("BERTH_INSECURE_SKIP_TLS_VERIFY"))
	return e.run(ctx, args)
}

// Usage prints the top-level help: what berth is, its commands (serve
// included, which the server's own package handles) and the global flags.
func Usage(w io.Writer) {
	var b strings.Builder
	b.WriteString(`berth is a self-hosted HTTP gateway: it routes traffic to deployments and
scales their VMs. The same binary runs the server and talks to it.

Usage:
  berth <command> [flags] [arguments]

Commands:
`)
	fmt.Fprintf(&b, "  %-10s %s\n", "serve", "Run the gateway server (see 'berth serve -h')")
	fmt.Fprintf(&b, "  %-10s %s\n", "fleet", "Set up a fleet of berths: fleet init, fleet join, fleet status (see 'berth fleet -h')")
	for _, c := range commands {
		fmt.Fprintf(&b, "  %-10s %s\n", c.name, c.summary)
	}
	b.WriteString("\n" + globalHelp + "\nRun 'berth help <command>' for a command's flags.\n")
	io.WriteString(w, b.String())
}

// globalHelp describes the flags every command accepts.
const globalHelp = `Global flags (before or after the command):
  --server URL   admin API address (env BERTH_SERVER; default: the current
                 context's server, else ` + DefaultServer + `)
  -o FORMAT      output format: json, yaml, name (KIND/NAME lines) or wide
                 (default: human-readable)
  --context NAME use a saved login context (env BERTH_CONTEXT; see 'berth login')
  --token TOKEN  an app-token for this command (env BERTH_TOKEN)
  --user U, --password P
                 the operator's credential (env BERTH_USER, BERTH_PASSWORD);
                 prefer the environment: flags show in the process list
  --ca-file PATH trust the CA certificate(s) in PATH (PEM) for an https
                 server, besides the system's (env BERTH_CA_FILE)
  --insecure-skip-tls-verify
                 do not verify an https server's certificate: for testing
                 only (env BERTH_INSECURE_SKIP_TLS_VERIFY=1)
`

// usageError is a mistake in how a command was invoked: exit 2 with help.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// errHelp asks Run to print the command's help on stdout and succeed.
var errHelp = errors.New("help requested")

// errReported is a failure whose details the command already printed.
var errReported = errors.New("failed")

func (e *env) run(ctx context.Context, args []string) int {
	gfs := e.flagSet("berth")
	globals, name, rest := splitCommand(gfs, args)
	if err := gfs.Parse(globals); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			Usage(e.stdout)
			return exitOK
		}
		return e.usageError("", err.Error())
	}
	if name == "" {
		// Bare `berth` is how one finds the commands: show them.
		fmt.Fprint(e.stderr, "berth: no command given\n\n")
		Usage(e.stderr)
		return exitUsage
	}
	cmd := lookup(name)
	if cmd == nil {
		return e.usageError("", fmt.Sprintf("unknown command %q", name))
	}
	if err := checkOutput(e.output); err != nil {
		return e.report(cmd, err)
	}
	return e.report(cmd, cmd.run(ctx, e, rest))
}

// report turns a command's error into output and an exit code.
func (e *env) report(cmd *command, err error) int {
	var ue *usageError
	var ec *exitCodeError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ec): // exec and shell: the remote command's code
		return ec.code
	case errors.Is(err, errHelp):
		fmt.Fprint(e.stdout, commandHelp(cmd))
		return exitOK
	case errors.As(err, &ue):
		name := cmd.name
		if cmd == helpCmd { // `berth help nope`: the commands are in berth's help
			name = ""
		}
		return e.usageError(name, ue.msg)
	case errors.Is(err, errReported):
		return exitFailed
	default:
		fmt.Fprintf(e.stderr, "error: %s\n", e.explain(err))
		return exitFailed
	}
}

// usageError prints a usage mistake as one line and a hint where the help
// is, not the help itself (which buries the mistake), and returns exit 2.
// name is the command's, "" for berth's own.
func (e *env) usageError(name, msg string) int {
	prog := "berth"
	if name != "" {
		prog += " " + name
	}
	fmt.Fprintf(e.stderr, "%s: %s\nsee '%s --help'\n", prog, msg, prog)
	return exitUsage
}

func commandHelp(cmd *command) string {
	return cmd.help + "\n" + globalHelp
}

// flagSet returns a flag set for one command with the global flags already
// defined. The globals are bound to e's fields with their current values as
// defaults, so a value given before the command survives and one given
// after it wins.
func (e *env) flagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // Run prints usage itself
	fs.Usage = func() {}
	fs.StringVar(&e.server, "server", e.server, "admin API address")
	fs.StringVar(&e.contextName, "context", e.contextName, "login context")
	fs.StringVar(&e.token, "token", e.token, "app-token")
	fs.StringVar(&e.user, "user", e.user, "operator user")
	fs.StringVar(&e.password, "password", e.password, "operator password")
	fs.StringVar(&e.caFile, "ca-file", e.caFile, "CA certificate file")
	fs.BoolVar(&e.insecure, "insecure-skip-tls-verify", e.insecure, "skip TLS verification")
	fs.StringVar(&e.output, "o", e.output, "output format")
	fs.StringVar(&e.output, "output", e.output, "output format")
	return fs
}

// parse parses a command's flags, which may be mixed with its positional
// arguments, and returns the positional ones. Everything after "--" is
// positional.
func (e *env) parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var flags, pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		if len(a) < 2 || a[0] != '-' { // "-" alone means stdin: positional
			pos = append(pos, a)
			continue
		}
		flags = append(flags, a)
		if takesValue(fs, a) && i+1 < len(args) {
			i++
			flags = append(flags, args[i])
		}
	}
	if err := fs.Parse(flags); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, errHelp
		}
		return nil, &usageError{msg: err.Error()}
	}
	if err := checkOutput(e.output); err != nil {
		return nil, err
	}
	return pos, nil
}

// takesValue reports whether the flag argument a ("-x", "--x") is a
// defined non-boolean flag without an inline "=value", so the next
// argument is its value.
func takesValue(fs *flag.FlagSet, a string) bool {
	name := strings.TrimLeft(a, "-")
	if strings.Contains(name, "=") {
		return false
	}
	f := fs.Lookup(name)
	if f == nil {
		return false // fs.Parse reports it
	}
	if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
		return false
	}
	return true
}

// splitCommand separates the global flags before the command name from the
// name and the command's own arguments.
func splitCommand(fs *flag.FlagSet, args []string) (globals []string, name string, rest []string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			if i+1 < len(args) {
				return args[:i], args[i+1], args[i+2:]
			}
			return args[:i], "", nil
		}
		if len(a) < 2 || a[0] != '-' {
			return args[:i], a, args[i+1:]
		}
		if takesValue(fs, a) {
			i++
		}
	}
	return args, "", nil
}

func checkOutput(o string) error {
	switch o {
	case "", "json", "yaml", "name", "wide":
		return nil
	}
	return usagef("unknown output format %q (want json, yaml, name or wide)", o)
}

// structured reports whether the output is for programs (json, yaml, or
// name: KIND/NAME lines) rather than text for people. All three go
// through printDocs.
func (e *env) structured() bool {
	return e.output == "json" || e.output == "yaml" || e.output == "name"
}

// client returns an admin API client for --server.
func (e *env) client() (*client.Client, error) {
	opts := []client.Option{client.WithUserAgent("berth-cli/" + version())}
	if e.httpClient != nil {
		opts = append(opts, client.WithHTTPClient(e.httpClient))
	}
	server, auth, err := e.credentials()
	if err != nil {
		return nil, err
	}
	if auth != nil {
		opts = append(opts, auth)
	}
	tlsOpt, err := e.tlsOption()
	if err != nil {
		return nil, err
	}
	if tlsOpt != nil {
		opts = append(opts, tlsOpt)
	}
	c, err := client.New(server, opts...)
	if err != nil {
		return nil, &usageError{msg: "--server: " + strings.TrimPrefix(err.Error(), "client: ")}
	}
	return c, nil
}

// parseNone parses the flags of a command that takes no positional
// arguments, and fails with a usage error when it got some.
func (e *env) parseNone(fs *flag.FlagSet, args []string) error {
	pos, err := e.parse(fs, args)
	if err != nil {
		return err
	}
	return noArgs(pos)
}

// noArgs fails with a usage error when a command got positional arguments
// it does not take.
func noArgs(pos []string) error {
	if len(pos) > 0 {
		return usagef("unexpected argument %q", pos[0])
	}
	return nil
}

// version returns the version for the User-Agent: the module version,
// or "devel" for a build that has none.
func version() string {
	switch v := readBuildVersion(debug.ReadBuildInfo()).Version; v {
	case "unknown", "(devel)":
		return "devel"
	default:
		return v
	}
}

// buildVersion is what `berth version` reports: the module version and the
// VCS stamp of the build, "unknown" where the build info lacks them (a
// build with -buildvcs=false has no vcs.* settings).
type buildVersion struct {
	Version   string `json:"version"`
	Revision  string `json:"revision"`
	Modified  string `json:"modified"`   // "true", "false" or "unknown"
	Time      string `json:"commitTime"` // vcs.time: the commit's, not the build's
	GoVersion string `json:"goVersion"`
}

func readBuildVersion(bi *debug.BuildInfo, ok bool) buildVersion {
	v := buildVersion{Version: "unknown", Revision: "unknown", Modified: "unknown", Time: "unknown", GoVersion: "unknown"}
	if ok && bi != nil {
		if bi.Main.Version != "" {
			v.Version = bi.Main.Version
		}
		if bi.GoVersion != "" {
			v.GoVersion = bi.GoVersion
		}
		for _, s := range bi.Settings {
			if s.Value == "" {
				continue
			}
			switch s.Key {
			case "vcs.revision":
				v.Revision = s.Value
			case "vcs.modified":
				v.Modified = s.Value
			case "vcs.time":
				v.Time = s.Value
			}
		}
	}
	if Version != "" {
		v.Version = Version
	}
	return v
}

var versionCmd = &command{
	name:    "version",
	summary: "Print berth's version",
	help: `Usage: berth version [-o json|yaml]

Print the version of this berth binary: the module version and the
revision it was built from, with whether the tree had uncommitted changes
(modified) and the commit's time. Fields the build did not record read
"unknown": a build from a checkout stamps them when VCS stamping is on,
e.g. go install -buildvcs=true ./cmd/berth (GOFLAGS=-buildvcs=false, as
on some machines, leaves them out).
`,
	run: func(ctx context.Context, e *env, args []string) error {
		if err := e.parseNone(e.flagSet("version"), args); err != nil {
			return err
		}
		v := readBuildVersion(debug.ReadBuildInfo())
		if e.structured() {
			return e.printValue("", v)
		}
		_, err := fmt.Fprintf(e.stdout, "berth %s\nrevision:    %s\nmodified:    %s\ncommit time: %s\ngo:          %s\n",
			v.Version, v.Revision, v.Modified, v.Time, v.GoVersion)
		return err
	},
}

var helpCmd = &command{
	name:    "help",
	summary: "Show help for berth or one command",
	help: `Usage: berth help [command]

Show the list of commands, or one command's usage and flags.
`,
	run: func(ctx context.Context, e *env, args []string) error {
		pos, err := e.parse(e.flagSet("help"), args)
		if err != nil {
			return err
		}
		switch len(pos) {
		case 0:
			Usage(e.stdout)
			return nil
		case 1:
			if pos[0] == "serve" {
				fmt.Fprintln(e.stdout, "Run 'berth serve -h' for the server's flags.")
				return nil
			}
			c := lookup(pos[0])
			if c == nil {
				return usagef("unknown command %q", pos[0])
			}
			fmt.Fprint(e.stdout, commandHelp(c))
			return nil
		}
		return usagef("help takes at most one command")
	},
}
