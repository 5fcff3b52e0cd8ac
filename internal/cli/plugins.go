package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/berth-dev/berth/apitype"
)

var pluginsCmd = &command{
	name:    "plugins",
	summary: "List, enable, disable, install and uninstall the server's plugins",
	help: `Usage: berth plugins [ls] [-o json|yaml|name]
       berth plugins enable|disable ID
       berth plugins install ID -n NAMESPACE [--config JSON]
       berth plugins uninstall ID -n NAMESPACE

The server's compiled-in plugins (obs, ...). ls (the default) lists them:
ID NAME STATE (enabled, disabled, or error when the last apply failed)
SCOPE (fleet: it serves every namespace while enabled; namespace: each
namespace installs it) and INSTALLED-IN. enable and disable switch one on
or off for the whole fleet, keeping its config; enabling a per-namespace
plugin installs it in every namespace there is. install and uninstall
change one namespace's install of a per-namespace plugin (--config: its
install config, default {}). Listing and switching need a fleet-wide
credential; installing, an admin credential for all of the namespace.

Flags:
  -n, --namespace NS   the namespace to install in or uninstall from
  --config JSON        install: the namespace's config for the plugin
`,
	run: runPlugins,
}

func runPlugins(ctx context.Context, e *env, args []string) error {
	sub, rest := "ls", args
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		sub, rest = args[0], args[1:]
	}
	switch sub {
	case "ls", "list":
		if err := e.parseNone(e.flagSet("plugins ls"), rest); err != nil {
			return err
		}
		return e.listPlugins(ctx)
	case "enable", "disable":
		pos, err := e.parse(e.flagSet("plugins "+sub), rest)
		if err != nil {
			return err
		}
		if len(pos) != 1 {
			return usagef("want one plugin ID")
		}
		c, err := e.client()
		if err != nil {
			return err
		}
		v, err := c.SetPluginEnabled(ctx, pos[0], sub == "enable")
		if err != nil {
			return err
		}
		if e.structured() {
			return e.printValue("plugin", v)
		}
		fmt.Fprintf(e.stdout, "plugin/%s %sd\n", v.ID, sub)
		if v.LastError != "" {
			fmt.Fprintf(e.stderr, "warning: plugin/%s: its last apply failed: %s\n", v.ID, v.LastError)
		}
		return nil
	case "install", "uninstall":
		fs := e.flagSet("plugins " + sub)
		ns := fs.String("n", "", "")
		fs.StringVar(ns, "namespace", "", "")
		config := fs.String("config", "", "")
		pos, err := e.parse(fs, rest)
		if err != nil {
			return err
		}
		switch {
		case len(pos) != 1:
			return usagef("want one plugin ID")
		case *ns == "":
			return usagef("-n NAMESPACE is required")
		case sub == "uninstall" && *config != "":
			return usagef("--config is for install")
		case *config != "" && !json.Valid([]byte(*config)):
			return usagef("--config: not valid JSON")
		}
		c, err := e.client()
		if err != nil {
			return err
		}
		var v *apitype.NamespacePlugin
		if sub == "install" {
			var raw json.RawMessage
			if *config != "" {
				raw = json.RawMessage(*config)
			}
			v, err = c.InstallPlugin(ctx, *ns, pos[0], raw)
		} else {
			v, err = c.UninstallPlugin(ctx, *ns, pos[0])
		}
		if err != nil {
			return err
		}
		if e.structured() {
			return e.printValue("plugin", v)
		}
		if sub == "install" {
			fmt.Fprintf(e.stdout, "plugin/%s installed in namespace %s\n", v.ID, *ns)
		} else {
			fmt.Fprintf(e.stdout, "plugin/%s uninstalled from namespace %s\n", v.ID, *ns)
		}
		if !v.Enabled {
			fmt.Fprintf(e.stderr, "note: plugin/%s is disabled for the fleet: it does nothing until the operator enables it\n", v.ID)
		}
		return nil
	}
	return usagef("unknown subcommand %q (ls, enable, disable, install or uninstall)", sub)
}

func (e *env) listPlugins(ctx context.Context) error {
	c, err := e.client()
	if err != nil {
		return err
	}
	if e.structured() {
		var raw json.RawMessage
		if _, err := c.Do(ctx, "GET", "/api/plugins", nil, &raw); err != nil {
			return err
		}
		return e.printDocs("plugin", []json.RawMessage{raw}, false)
	}
	ps, err := c.Plugins(ctx)
	if err != nil {
		return err
	}
	if len(ps) == 0 {
		fmt.Fprintln(e.stderr, "No plugins are compiled into this server.")
		return nil
	}
	tw := newTable(e.stdout)
	row(tw, "ID", "NAME", "STATE", "SCOPE", "INSTALLED-IN")
	for _, p := range ps {
		st := "disabled"
		if p.Enabled {
			st = "enabled"
		}
		if p.LastError != "" {
			st = "error"
		}
		scope, in := "fleet", "(every namespace)"
		if p.PerNamespace != nil && *p.PerNamespace {
			scope, in = "namespace", orDash(strings.Join(p.InstalledIn, ","))
		}
		row(tw, p.ID, p.Name, st, scope, in)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, p := range ps {
		if p.LastError != "" {
			fmt.Fprintf(e.stderr, "plugin/%s: its last apply failed: %s\n", p.ID, p.LastError)
		}
	}
	return nil
}

var feedCmd = &command{
	name:    "feed",
	summary: "Show a namespace's event feed (see also 'berth get feeds')",
	help: `Usage: berth feed NAMESPACE [--json] [-o json|yaml]
       berth get feeds [NAMESPACE]

A namespace's feed: its deployments' lifecycle events (deployed, updated,
removed; when their spec says feed.announce) and issues, newest first, as
TIME KIND DEPLOYMENT COUNT TITLE, where COUNT is how many times a
repeated issue happened and TIME the last of them. --json prints the
events as the server sent them (GET /feeds/NAMESPACE?format=json), as -o
json does. get feeds lists the namespaces with a feed you can read, and
how many events each holds.
`,
	run: runFeed,
}

func runFeed(ctx context.Context, e *env, args []string) error {
	fs := e.flagSet("feed")
	asJSON := fs.Bool("json", false, "")
	pos, err := e.parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("want one namespace")
	}
	if *asJSON {
		if e.output != "" && e.output != "json" {
			return usagef("--json and -o %s disagree", e.output)
		}
		e.output = "json"
	}
	return e.showFeed(ctx, pos[0])
}

// showFeed prints namespace ns's feed events.
func (e *env) showFeed(ctx context.Context, ns string) error {
	if err := e.canPrint(""); err != nil {
		return err
	}
	c, err := e.client()
	if err != nil {
		return err
	}
	if e.structured() {
		return e.fetchAndPrint(ctx, c, "GET", "/feeds/"+url.PathEscape(ns)+"?format=json", nil, nil)
	}
	evs, err := c.Feed(ctx, ns)
	if err != nil {
		return err
	}
	if len(evs) == 0 {
		fmt.Fprintf(e.stderr, "No events in namespace %s's feed.\n", ns)
		return nil
	}
	tw := newTable(e.stdout)
	row(tw, "TIME", "KIND", "DEPLOYMENT", "COUNT", "TITLE")
	for _, ev := range evs {
		at := ev.LastTs
		row(tw, stamp(&at), string(ev.Kind), orDash(ev.Deployment), strconv.Itoa(ev.Count), clean(ev.Title))
	}
	return tw.Flush()
}

// listFeeds is `get feeds`: the namespaces with a feed, or with a name,
// that namespace's events.
func (e *env) listFeeds(ctx context.Context, ns string) error {
	if ns != "" {
		return e.showFeed(ctx, ns)
	}
	if err := e.canPrint(""); err != nil {
		return err
	}
	c, err := e.client()
	if err != nil {
		return err
	}
	if e.structured() {
		return e.fetchAndPrint(ctx, c, "GET", "/feeds", nil, nil)
	}
	idx, err := c.Feeds(ctx)
	if err != nil {
		return err
	}
	if len(idx) == 0 {
		fmt.Fprintln(e.stderr, "No feeds have events yet.")
		return nil
	}
	tw := newTable(e.stdout)
	row(tw, "NAMESPACE", "EVENTS")
	for _, f := range idx {
		row(tw, f.Namespace, strconv.Itoa(f.Events))
	}
	return tw.Flush()
}
