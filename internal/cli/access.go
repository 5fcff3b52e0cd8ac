package cli

import (
	"bufio"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/term"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/client"
)

// ---- login contexts ----

// config is the CLI's config file: named login contexts, each a server and
// the app-token used there. The token is a credential, so the file is the
// one place it is stored client-side, written with mode 0600.
type config struct {
	Current  string     `json:"current_context,omitempty"`
	Contexts []ctxEntry `json:"contexts"`
	path     string     // where it was read from, and is written to
}

// ctxEntry is one login context.
type ctxEntry struct {
	Name   string `json:"name"`
	Server string `json:"server"`
	Token  string `json:"token,omitempty"`
	// How to verify an https server: login's --ca-file and
	// --insecure-skip-tls-verify, used again by the context's commands.
	CAFile   string `json:"ca_file,omitempty"`
	Insecure bool   `json:"insecure_skip_tls_verify,omitempty"`
}

// configPath is $BERTH_CONFIG, else <user config dir>/berth/config.json
// ($XDG_CONFIG_HOME/berth/config.json or ~/.config/berth/config.json).
func configPath() (string, error) {
	if p := os.Getenv("BERTH_CONFIG"); p != "" {
		return p, nil
	}
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("cannot find a config directory for the login contexts: %w", err)
	}
	return filepath.Join(dir, "berth", "config.json"), nil
}

// loadConfig reads the config file; a missing file is an empty config.
func loadConfig(stderr io.Writer) (*config, error) {
	path, err := configPath()
	if err != nil {
		return nil, err
	}
	cfg := &config{path: path}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return cfg, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 && stderr != nil {
		fmt.Fprintf(stderr, "warning: %s holds tokens and is readable by others (mode %04o); run: chmod 600 %s\n", path, fi.Mode().Perm(), path)
	}
	if err := json.Unmarshal(b, cfg); err != nil {
		return nil, fmt.Errorf("%s is not a berth config file: %w", path, err)
	}
	return cfg, nil
}

// save writes the config atomically with mode 0600 (its directory 0700).
func (c *config) save() error {
	if err := os.MkdirAll(filepath.Dir(c.path), 0o700); err != nil {
		return err
	}
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(c.path), ".config-*.json") // created 0600
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return err
	}
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", c.path, err)
	}
	return os.Rename(f.Name(), c.path)
}

func (c *config) find(name string) *ctxEntry {
	for i := range c.Contexts {
		if c.Contexts[i].Name == name {
			return &c.Contexts[i]
		}
	}
	return nil
}

func sameServer(a, b string) bool { return strings.TrimRight(a, "/") == strings.TrimRight(b, "/") }

// credentials resolves the server and the credential for a command: --token
// beats --user/--password, which beat the context's token. A context's
// token is sent only to that context's server, never to another --server.
func (e *env) credentials() (string, client.Option, error) {
	cfg, err := loadConfig(e.stderr)
	if err != nil {
		return "", nil, err
	}
	name := e.contextName
	if name == "" {
		name = cfg.Current
	}
	var cur *ctxEntry
	if name != "" {
		cur = cfg.find(name)
		if cur == nil && e.contextName != "" {
			return "", nil, usagef("no login context %q in %s (see 'berth login')", name, cfg.path)
		}
	}
	e.current = cur
	server := e.server
	if server == "" && cur != nil {
		server = cur.Server
	}
	if server == "" {
		server = DefaultServer
	}
	e.resolved = server
	switch {
	case e.token != "":
		return server, client.WithToken(strings.TrimSpace(e.token)), nil
	case e.password != "":
		user := e.user
		if user == "" {
			user = "admin"
		}
		return server, client.WithBasicAuth(user, e.password), nil
	case cur != nil && cur.Token != "" && sameServer(cur.Server, server):
		return server, client.WithToken(cur.Token), nil
	}
	return server, nil, nil
}

var loginCmd = &command{
	name:    "login",
	summary: "Save an app-token for a server as a login context",
	help: `Usage: berth login [--server URL] [--token-stdin] [--name NAME]

Check an app-token against the server (GET /whoami) and save it, with the
server, as a named login context, which becomes the current one: later
commands use its server and token unless --server, --token or --user say
otherwise. Contexts live in $XDG_CONFIG_HOME/berth/config.json (or
~/.config/berth/config.json; $BERTH_CONFIG overrides), mode 0600: the one
place the CLI stores a token.

The token is read from standard input with --token-stdin, from --token or
BERTH_TOKEN, or else asked for (not echoed) when standard input is a
terminal.

Flags:
  --token-stdin   read the token from standard input
  --name NAME     the context's name (default: the server's host:port)
`,
	run: runLogin,
}

func runLogin(ctx context.Context, e *env, args []string) error {
	fs := e.flagSet("login")
	fromStdin := fs.Bool("token-stdin", false, "")
	name := fs.String("name", "", "")
	if err := e.parseNone(fs, args); err != nil {
		return err
	}
	server := e.server
	if server == "" {
		server = DefaultServer
	}
	token := strings.TrimSpace(e.token)
	switch {
	case *fromStdin:
		b, err := io.ReadAll(io.LimitReader(e.stdin, 4096))
		if err != nil {
			return fmt.Errorf("reading the token: %w", err)
		}
		token = strings.TrimSpace(string(b))
	case token == "":
		if f, ok := e.stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
			fmt.Fprint(e.stderr, "App-token: ")
			b, err := term.ReadPassword(int(f.Fd()))
			fmt.Fprintln(e.stderr)
			if err != nil {
				return fmt.Errorf("reading the token: %w", err)
			}
			token = strings.TrimSpace(string(b))
		} else {
			line, err := bufio.NewReader(io.LimitReader(e.stdin, 4096)).ReadString('\n')
			if err != nil && !errors.Is(err, io.EOF) {
				return fmt.Errorf("reading the token: %w", err)
			}
			token = strings.TrimSpace(line)
		}
	}
	if token == "" {
		return usagef("no token given (pipe one to --token-stdin, or mint one with 'berth token mint')")
	}
	if !strings.HasPrefix(token, "berth_") {
		return errors.New("that is not a berth app-token (berth_…); mint one with 'berth token mint'")
	}
	opts := []client.Option{client.WithUserAgent("berth-cli/" + version()), client.WithToken(token)}
	if e.httpClient != nil {
		opts = append(opts, client.WithHTTPClient(e.httpClient))
	}
	tlsOpt, err := e.tlsOption()
	if err != nil {
		return err
	}
	if tlsOpt != nil {
		opts = append(opts, tlsOpt)
	}
	c, err := client.New(server, opts...)
	if err != nil {
		return &usageError{msg: "--server: " + strings.TrimPrefix(err.Error(), "client: ")}
	}
	who, err := c.WhoAmI(ctx)
	if client.IsUnauthorized(err) {
		return fmt.Errorf("%s refused this token: it is unknown, revoked or expired", server)
	}
	if err != nil {
		return err
	}
	if u, perr := url.Parse(server); perr == nil && u.Scheme == "http" && !isLoopbackHost(u.Hostname()) {
		fmt.Fprintf(e.stderr, "warning: %s is plain http, so the token crosses the network unencrypted; prefer https:// or an SSH tunnel\n", server)
	}
	cfg, err := loadConfig(e.stderr)
	if err != nil {
		return err
	}
	if *name == "" {
		u, _ := url.Parse(server)
		*name = u.Host
	}
	if ent := cfg.find(*name); ent != nil {
		ent.Server, ent.Token, ent.CAFile, ent.Insecure = server, token, e.caFile, e.insecure
	} else {
		cfg.Contexts = append(cfg.Contexts, ctxEntry{Name: *name, Server: server, Token: token, CAFile: e.caFile, Insecure: e.insecure})
	}
	cfg.Current = *name
	if err := cfg.save(); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "Logged in to %s as %s.\nSaved as context %q in %s.\n", server, describeCaller(who), *name, cfg.path)
	return nil
}

// tlsOption is how the client verifies an https server: --ca-file (else
// the context's) adds a root, --insecure-skip-tls-verify (or the
// context's) verifies nothing. nil: the system's roots.
func (e *env) tlsOption() (client.Option, error) {
	caFile, insecure := e.caFile, e.insecure
	if e.current != nil {
		caFile = cmp.Or(caFile, e.current.CAFile)
		insecure = insecure || e.current.Insecure
	}
	if caFile == "" && !insecure {
		return nil, nil
	}
	conf := &tls.Config{InsecureSkipVerify: insecure}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, usagef("--ca-file: %v", err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, usagef("--ca-file: %s holds no PEM certificate", caFile)
		}
		conf.RootCAs = pool
	}
	return client.WithTLSConfig(conf), nil
}

func isLoopbackHost(h string) bool {
	return h == "localhost" || strings.HasPrefix(h, "127.") || h == "::1"
}

// describeCaller is a one-line account of a WhoAmI.
func describeCaller(w *apitype.WhoAmI) string {
	var b strings.Builder
	switch {
	case w.Token != nil:
		fmt.Fprintf(&b, "token %q (%s), admin scope %s", w.Token.Name, w.Token.ID, w.AdminScope)
	default:
		fmt.Fprintf(&b, "%s, admin scope %s", w.Caller, w.AdminScope)
	}
	switch {
	case w.Confined && len(w.Deployments) == 0:
		fmt.Fprintf(&b, ", every deployment in namespace %s", w.Namespace)
	case w.Confined:
		fmt.Fprintf(&b, ", deployments %s in namespace %s", strings.Join(w.Deployments, ","), w.Namespace)
	case w.Fleet:
		b.WriteString(", fleet-wide")
	case len(w.Deployments) > 0:
		fmt.Fprintf(&b, ", deployments %s", strings.Join(w.Deployments, ","))
	}
	return b.String()
}

var logoutCmd = &command{
	name:    "logout",
	summary: "Forget a login context",
	help: `Usage: berth logout [--name NAME]

Remove a login context (default: the current one) and its token from the
config file. The token itself stays valid on the server: revoke it with
'berth token revoke ID' if nobody else uses it.
`,
	run: func(ctx context.Context, e *env, args []string) error {
		fs := e.flagSet("logout")
		name := fs.String("name", "", "")
		if err := e.parseNone(fs, args); err != nil {
			return err
		}
		cfg, err := loadConfig(e.stderr)
		if err != nil {
			return err
		}
		if *name == "" {
			*name = cmpOr(e.contextName, cfg.Current)
		}
		if *name == "" || cfg.find(*name) == nil {
			return fmt.Errorf("not logged in (no context %q in %s)", *name, cfg.path)
		}
		cfg.Contexts = slices.DeleteFunc(cfg.Contexts, func(c ctxEntry) bool { return c.Name == *name })
		if cfg.Current == *name {
			cfg.Current = ""
		}
		if err := cfg.save(); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "Logged out of context %q.\n", *name)
		return nil
	},
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

var whoamiCmd = &command{
	name:    "whoami",
	summary: "Show what the server makes of your credential",
	help: `Usage: berth whoami [-o json|yaml]

Ask the server (GET /whoami) who the current credential is and what it may
do: the caller kind, admin scope, namespace, deployments and expiry.
`,
	run: func(ctx context.Context, e *env, args []string) error {
		if err := e.parseNone(e.flagSet("whoami"), args); err != nil {
			return err
		}
		c, err := e.client()
		if err != nil {
			return err
		}
		if e.structured() {
			return e.fetchAndPrint(ctx, c, "GET", "/whoami", nil, nil)
		}
		w, err := c.WhoAmI(ctx)
		if err != nil {
			return err
		}
		tw := newTable(e.stdout)
		row(tw, "server:", c.BaseURL())
		row(tw, "caller:", describeCaller(w))
		may := []string{}
		if w.May.ReadViewRoutes {
			may = append(may, "read view routes")
		}
		if w.May.UseAdminRoutes {
			may = append(may, "use admin routes")
		}
		if len(may) == 0 {
			may = append(may, "nothing on the admin API (data-plane gates only)")
		}
		row(tw, "may:", strings.Join(may, ", "))
		if w.ExpiresAt != nil {
			row(tw, "expires:", time.Unix(*w.ExpiresAt, 0).UTC().Format(time.RFC3339))
		}
		if w.Detail != "" {
			row(tw, "detail:", w.Detail)
		}
		if w.Note != "" {
			row(tw, "note:", w.Note)
		}
		return tw.Flush()
	},
}

// ---- tokens ----

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

var tokenCmd = &command{
	name:    "token",
	summary: "Mint, list and revoke app-tokens",
	help: `Usage: berth token mint NAME --admin none|view|admin (-d DEP... | --all-deployments)
                        [--namespace NS] [--expires-in DUR]
       berth token list [-o json|yaml|wide]
       berth token revoke ID...

mint creates an app-token and prints it, alone, on standard output: it is
shown this once (the server keeps only a hash), so store it now, e.g.
  berth token mint ci --admin admin --namespace team-a | berth login --token-stdin
--admin is what it may do on the admin API (none: data-plane gates only).
-d (repeatable) names the deployments it reaches; --all-deployments reaches
every one ("*"), or with --namespace every one in that namespace, which is
also the default for a namespace token. --expires-in takes a duration such
as 12h or 90d; tokens minted by a namespace credential must expire.

list shows the tokens you may manage (-o wide adds MINTED-BY, who minted
each); revoke deletes them, effective on the very next request.
`,
	run: runToken,
}

func runToken(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 {
		return usagef("missing subcommand (mint, list or revoke)")
	}
	sub, rest := args[0], args[1:]
	switch sub {
	case "mint":
		return runTokenMint(ctx, e, rest)
	case "list", "ls":
		if err := e.parseNone(e.flagSet("token list"), rest); err != nil {
			return err
		}
		return e.listTokens(ctx, "")
	case "revoke", "rm":
		pos, err := e.parse(e.flagSet("token revoke"), rest)
		if err != nil {
			return err
		}
		return e.revokeTokens(ctx, pos)
	case "-h", "--help", "help":
		return errHelp
	}
	return usagef("unknown subcommand %q (want mint, list or revoke)", sub)
}

// listTokens prints the tokens (`get tokens`, `token list`), or only the
// one with id.
func (e *env) listTokens(ctx context.Context, id string) error {
	c, err := e.client()
	if err != nil {
		return err
	}
	if e.structured() {
		return e.printItem(ctx, c, "/tokens", "", "token", "id", id)
	}
	ts, err := c.Tokens(ctx)
	if err != nil {
		return err
	}
	if id != "" {
		ts = slices.DeleteFunc(ts, func(t client.Token) bool { return t.ID != id })
		if len(ts) == 0 {
			return fmt.Errorf("no token %q", id)
		}
	}
	if len(ts) == 0 {
		fmt.Fprintln(e.stderr, "No tokens found.")
		return nil
	}
	wide := e.output == "wide"
	tw := newTable(e.stdout)
	head := []any{"ID", "NAME", "ADMIN", "NAMESPACE", "DEPLOYMENTS", "EXPIRES", "LAST-USED"}
	if wide {
		head = append(head, "MINTED-BY")
	}
	row(tw, head...)
	for _, t := range ts {
		deps := strings.Join(t.Deployments, ",")
		if deps == "" && t.Namespace != "" {
			deps = "(all in namespace)"
		}
		cells := []any{t.ID, t.Name, t.Admin, orDash(t.Namespace), orDash(deps), stamp(t.ExpiresAt), stamp(t.LastUsedAt)}
		if wide {
			// Berth's own route: TokenSummary has no minted_by.
			p, err := c.TokenProvenance(ctx, t.ID)
			if err != nil {
				return err
			}
			cells = append(cells, orDash(p.MintedBy))
		}
		row(tw, cells...)
	}
	return tw.Flush()
}

// revokeTokens revokes tokens by id (`delete token`, `token revoke`).
func (e *env) revokeTokens(ctx context.Context, ids []string) error {
	if len(ids) == 0 {
		return usagef("missing token ID")
	}
	c, err := e.client()
	if err != nil {
		return err
	}
	for _, id := range ids {
		if err := c.RevokeToken(ctx, id); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "token/%s revoked\n", id)
	}
	return nil
}

func stamp(at *int64) string {
	if at == nil {
		return "-"
	}
	return time.Unix(*at, 0).UTC().Format(time.RFC3339)
}

func runTokenMint(ctx context.Context, e *env, args []string) error {
	fs := e.flagSet("token mint")
	admin := fs.String("admin", "", "")
	var deps stringList
	fs.Var(&deps, "d", "")
	fs.Var(&deps, "deployment", "")
	all := fs.Bool("all-deployments", false, "")
	ns := fs.String("namespace", "", "")
	fs.StringVar(ns, "n", "", "")
	expires := fs.String("expires-in", "", "")
	pos, err := e.parse(fs, args)
	if err != nil {
		return err
	}
	if err := e.canPrint(""); err != nil { // a one-time secret, or an action: nothing to name
		return err
	}
	if len(pos) != 1 {
		return usagef("want exactly one token NAME")
	}
	switch apitype.AdminScope(*admin) {
	case apitype.ScopeNone, apitype.ScopeView, apitype.ScopeAdmin:
	case "":
		return usagef("--admin is required: none, view or admin")
	default:
		return usagef("--admin must be none, view or admin, got %q", *admin)
	}
	req := apitype.NewToken{Name: pos[0], Admin: apitype.AdminScope(*admin), Namespace: *ns, Deployments: []string{}}
	switch {
	case len(deps) > 0 && *all:
		return usagef("give -d or --all-deployments, not both")
	case len(deps) > 0:
		req.Deployments = deps
	case *all && *ns == "":
		req.Deployments = []string{"*"}
	case *all || *ns != "":
		// A namespace token with no deployments reaches all of the namespace.
	default:
		return usagef("say which deployments the token reaches: -d DEP (repeatable) or --all-deployments")
	}
	if *expires != "" {
		d, err := parseLifetime(*expires)
		if err != nil {
			return usagef("--expires-in: %v", err)
		}
		secs := int64(d / time.Second)
		req.ExpiresInSecs = &secs
	}
	c, err := e.client()
	if err != nil {
		return err
	}
	m, err := c.MintToken(ctx, req)
	if err != nil {
		return err
	}
	if e.structured() {
		raw, err := json.Marshal(m)
		if err != nil {
			return err
		}
		return e.printDocs("", []json.RawMessage{raw}, false)
	}
	fmt.Fprintln(e.stdout, m.Secret)
	scope := "fleet-wide"
	switch {
	case m.Namespace != "" && len(m.Deployments) == 0:
		scope = "every deployment in namespace " + m.Namespace
	case m.Namespace != "":
		scope = strings.Join(m.Deployments, ",") + " in namespace " + m.Namespace
	case !slices.Contains(m.Deployments, "*"):
		scope = strings.Join(m.Deployments, ",")
	}
	exp := "never expires"
	if m.ExpiresAt != nil {
		exp = "expires " + stamp(m.ExpiresAt)
	}
	fmt.Fprintf(e.stderr, "token/%s %q minted: admin scope %s, %s, %s.\nThis is the only time the token is shown; store it now.\n", m.ID, m.Name, m.Admin, scope, exp)
	return nil
}

// parseLifetime is time.ParseDuration plus a "d" (day) unit: "90d", "1d12h".
func parseLifetime(s string) (time.Duration, error) {
	var total time.Duration
	if i := strings.Index(s, "d"); i > 0 {
		n, err := strconv.Atoi(s[:i])
		if err != nil || n < 0 {
			return 0, fmt.Errorf("invalid duration %q (want e.g. 12h or 90d)", s)
		}
		total = time.Duration(n) * 24 * time.Hour
		s = s[i+1:]
		if s == "" {
			return total, nil
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q (want e.g. 12h or 90d)", s)
	}
	if total+d <= 0 {
		return 0, errors.New("must be positive")
	}
	return total + d, nil
}

// ---- secrets and namespaces ----

func accessKind(a string) string {
	kind, _, _ := strings.Cut(a, "/")
	switch kind {
	case "secret", "secrets":
		return "secret"
	case "namespace", "namespaces", "ns":
		return "namespace"
	}
	return ""
}

// accessFlagSet is the flag set of get/delete/create for secrets and
// namespaces.
func (e *env) accessFlagSet(name string) (*flag.FlagSet, *string, *bool) {
	fs := e.flagSet(name)
	ns := fs.String("n", "", "")
	fs.StringVar(ns, "namespace", "", "")
	force := fs.Bool("force", false, "")
	return fs, ns, force
}

// resourceArg reads "kind [ID]" or "kind/ID" from pos.
func resourceArg(pos []string) (string, error) {
	if len(pos) == 0 {
		return "", usagef("missing resource type")
	}
	_, id, slash := strings.Cut(pos[0], "/")
	rest := pos[1:]
	if !slash && len(rest) > 0 {
		id, rest = rest[0], rest[1:]
	}
	if len(rest) > 0 {
		return "", usagef("unexpected argument %q", rest[0])
	}
	return id, nil
}

// parseResource parses a command's flags and its one optional NAME (see
// resourceArg).
func (e *env) parseResource(fs *flag.FlagSet, args []string) (string, error) {
	pos, err := e.parse(fs, args)
	if err != nil {
		return "", err
	}
	return resourceArg(pos)
}

func runGetAccess(ctx context.Context, e *env, kind string, args []string) error {
	fs, ns, _ := e.accessFlagSet("get")
	id, err := e.parseResource(fs, args)
	if err != nil {
		return err
	}
	c, err := e.client()
	if err != nil {
		return err
	}
	if kind == "namespace" {
		if id != "" {
			return usagef("get namespaces takes no name")
		}
		if e.structured() {
			return e.fetchAndPrint(ctx, c, "GET", "/namespaces", nil, nil)
		}
		list, err := c.Namespaces(ctx)
		if err != nil {
			return err
		}
		if len(list) == 0 {
			fmt.Fprintln(e.stderr, "No namespaces found.")
			return nil
		}
		tw := newTable(e.stdout)
		row(tw, "NAME", "DEPLOYMENTS", "DECLARED", "DESCRIPTION")
		for _, n := range list {
			row(tw, n.Namespace, n.Deployments, n.Declared, orDash(n.Description))
		}
		return tw.Flush()
	}
	var list []apitype.SecretSummary
	if id != "" {
		if e.structured() {
			return e.fetchAndPrint(ctx, c, "GET", secretURL(*ns, id, false), nil, nil)
		}
		s, err := c.Secret(ctx, *ns, id)
		if err != nil {
			return err
		}
		list = []apitype.SecretSummary{*s}
	} else {
		if e.structured() {
			return e.fetchAndPrint(ctx, c, "GET", secretURL(*ns, "", false), nil, nil)
		}
		if list, err = c.Secrets(ctx, *ns); err != nil {
			return err
		}
		if len(list) == 0 {
			fmt.Fprintln(e.stderr, "No secrets found.")
			return nil
		}
	}
	tw := newTable(e.stdout)
	row(tw, "NAMESPACE", "ID", "KEYS", "UPDATED")
	for _, s := range list {
		row(tw, s.Namespace, s.ID, strings.Join(s.Keys, ","), time.Unix(s.UpdatedAt, 0).UTC().Format(time.RFC3339))
	}
	return tw.Flush()
}

func secretURL(ns, id string, force bool) string {
	q := url.Values{}
	if ns != "" {
		q.Set("namespace", ns)
	}
	if force {
		q.Set("force", "true")
	}
	p := "/secrets"
	if id != "" {
		p += "/" + url.PathEscape(id)
	}
	if len(q) > 0 {
		p += "?" + q.Encode()
	}
	return p
}

func runDeleteAccess(ctx context.Context, e *env, kind string, args []string) error {
	fs, ns, force := e.accessFlagSet("delete")
	id, err := e.parseResource(fs, args)
	if err != nil {
		return err
	}
	if id == "" {
		return usagef("missing %s name", kind)
	}
	c, err := e.client()
	if err != nil {
		return err
	}
	if kind == "namespace" {
		if err := c.DeleteNamespace(ctx, id); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "namespace/%s deleted\n", id)
		return nil
	}
	if err := c.DeleteSecret(ctx, *ns, id, *force); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "secret/%s deleted\n", id)
	return nil
}

var createCmd = &command{
	name:    "create",
	summary: "Create a secret or a namespace",
	help: `Usage: berth create secret ID (--from-stdin KEY | --from-env KEY=ENV... | KEY=VALUE...)
                           [-n NAMESPACE] [--description TEXT]
       berth create namespace NAME [--description TEXT] [--domain DOMAIN...]

create secret stores (or replaces) a secret: named keys whose values never
leave the server again (only key names are ever shown) and are sealed at
rest. Prefer --from-stdin (the whole of standard input, less one trailing
newline, becomes KEY) or --from-env (KEY takes the value of environment
variable ENV) to KEY=VALUE: command-line arguments end up in shell history
and the process list. Without -n the secret goes to your namespace (a
namespace token's own, else "default").

create namespace declares a namespace (fleet credentials only). Each
--domain assigns a domain to it: DOMAIN covers itself and every subdomain,
only the namespace's tokens may route hosts under it, and no other
namespace may. Without --domain a redeclaration keeps the namespace's
domains; --domain "" removes them all.
`,
	run: runCreate,
}

func runCreate(ctx context.Context, e *env, args []string) error {
	fs, ns, _ := e.accessFlagSet("create")
	fromStdin := fs.String("from-stdin", "", "")
	var fromEnv stringList
	fs.Var(&fromEnv, "from-env", "")
	desc := fs.String("description", "", "")
	var domains stringList
	fs.Var(&domains, "domain", "")
	pos, err := e.parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return usagef("missing resource type (want secret or namespace)")
	}
	kind := accessKind(pos[0])
	if kind == "" {
		return usagef("unknown resource type %q (want secret or namespace)", pos[0])
	}
	id, rest := "", []string(nil)
	if _, after, ok := strings.Cut(pos[0], "/"); ok {
		id, rest = after, pos[1:]
	} else if len(pos) > 1 {
		id, rest = pos[1], pos[2:]
	}
	if id == "" {
		return usagef("missing %s name", kind)
	}
	c, err := e.client()
	if err != nil {
		return err
	}
	if kind != "namespace" && len(domains) > 0 {
		return usagef("--domain is for namespaces")
	}
	if kind == "namespace" {
		if len(rest) > 0 {
			return usagef("unexpected argument %q", rest[0])
		}
		spec := apitype.NamespaceSpec{Name: id, Description: *desc}
		if len(domains) > 0 {
			ds := []string{}
			for _, d := range domains {
				if d != "" {
					ds = append(ds, d)
				}
			}
			spec.Domains = &ds
		}
		n, err := c.CreateNamespace(ctx, spec)
		if err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "namespace/%s declared\n", n.Namespace)
		return nil
	}
	data := map[string]string{}
	for _, kv := range rest {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return usagef("%q is not KEY=VALUE", kv)
		}
		data[k] = v
	}
	for _, kv := range fromEnv {
		k, name, ok := strings.Cut(kv, "=")
		if !ok || k == "" || name == "" {
			return usagef("--from-env %q is not KEY=ENV", kv)
		}
		v, set := os.LookupEnv(name)
		if !set {
			return fmt.Errorf("--from-env %s: environment variable %s is not set", kv, name)
		}
		data[k] = v
	}
	if *fromStdin != "" {
		b, err := io.ReadAll(io.LimitReader(e.stdin, 1<<20+1))
		if err != nil {
			return fmt.Errorf("reading standard input: %w", err)
		}
		if len(b) > 1<<20 {
			return errors.New("--from-stdin: a secret value is limited to 1 MiB")
		}
		s := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
		data[*fromStdin] = s
	}
	if len(data) == 0 {
		return usagef("give the secret at least one key: --from-stdin KEY, --from-env KEY=ENV or KEY=VALUE")
	}
	s, err := c.PutSecret(ctx, apitype.SecretSpec{ID: id, Namespace: *ns, Description: *desc, Data: data})
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "secret/%s saved in namespace %s (keys: %s)\n", s.ID, s.Namespace, strings.Join(s.Keys, ", "))
	return nil
}
