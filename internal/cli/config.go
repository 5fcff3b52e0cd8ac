package cli

import (
	"context"
	"encoding/json"
	"fmt"
)

// configCmd shows and switches the login contexts that `berth login`
// saves (access.go), as kubectl config does.
var configCmd = &command{
	name:    "config",
	summary: "List the login contexts or switch the current one",
	help: `Usage: berth config get-contexts [-o json|yaml|name]
       berth config use-context NAME
       berth config current-context

get-contexts lists the saved login contexts: CURRENT (a * marks the one
commands use), NAME, SERVER and whether a token is saved (tokens are never
printed). use-context makes NAME the current context. 'berth login --name
NAME' adds or refreshes a context; 'berth logout --name NAME' removes one;
--context NAME (BERTH_CONTEXT) picks one for a single command.
`,
	run: runConfig,
}

// contextView is a context as get-contexts prints it: no token.
type contextView struct {
	Name     string `json:"name"`
	Server   string `json:"server"`
	Current  bool   `json:"current"`
	HasToken bool   `json:"has_token"`
}

func runConfig(ctx context.Context, e *env, args []string) error {
	fs := e.flagSet("config")
	globals, sub, rest := splitCommand(fs, args)
	rest = append(globals[:len(globals):len(globals)], rest...)
	switch sub {
	case "", "help", "-h", "--help":
		if sub == "" && len(rest) == 0 {
			return usagef("missing subcommand (get-contexts, use-context or current-context)")
		}
		return errHelp
	case "get-contexts", "current-context", "use-context":
	default:
		return usagef("unknown subcommand %q (want get-contexts, use-context or current-context)", sub)
	}
	pos, err := e.parse(e.flagSet("config "+sub), rest)
	if err != nil {
		return err
	}
	cfg, err := loadConfig(e.stderr)
	if err != nil {
		return err
	}
	switch sub {
	case "get-contexts":
		if err := noArgs(pos); err != nil {
			return err
		}
		if e.structured() {
			docs := make([]json.RawMessage, len(cfg.Contexts))
			for i, c := range cfg.Contexts {
				docs[i], _ = json.Marshal(contextView{Name: c.Name, Server: c.Server, Current: c.Name == cfg.Current, HasToken: c.Token != ""})
			}
			return e.printDocs("context", docs, true)
		}
		if len(cfg.Contexts) == 0 {
			fmt.Fprintf(e.stderr, "No login contexts in %s (see 'berth login').\n", cfg.path)
			return nil
		}
		tw := newTable(e.stdout)
		row(tw, "CURRENT", "NAME", "SERVER", "TOKEN")
		for _, c := range cfg.Contexts {
			cur, tok := "", "none"
			if c.Name == cfg.Current {
				cur = "*"
			}
			if c.Token != "" {
				tok = "saved"
			}
			row(tw, cur, c.Name, c.Server, tok)
		}
		return tw.Flush()
	case "current-context":
		if err := noArgs(pos); err != nil {
			return err
		}
		if cfg.Current == "" {
			return fmt.Errorf("no current context in %s (see 'berth login' or 'berth config use-context NAME')", cfg.path)
		}
		_, err := fmt.Fprintln(e.stdout, cfg.Current)
		return err
	}
	if len(pos) != 1 {
		return usagef("use-context takes one context NAME")
	}
	if cfg.find(pos[0]) == nil {
		return fmt.Errorf("no login context %q in %s (see 'berth config get-contexts')", pos[0], cfg.path)
	}
	cfg.Current = pos[0]
	if err := cfg.save(); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "Switched to context %q.\n", pos[0])
	return nil
}
