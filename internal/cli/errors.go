package cli

import (
	"errors"
	"fmt"
	"strings"
	"syscall"

	"github.com/berth-dev/berth/client"
)

// explain words a failed command's error for the person at the terminal:
// a refused connection says whether anything serves at the address and
// how to point berth elsewhere, a 401 how to log in, and the server's
// hints that name API parameters (force=true) name the CLI's flags.
func (e *env) explain(err error) string {
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Sprintf("no berth server answers at %s — is 'berth serve' running? (set --server or BERTH_SERVER)", e.serverOrDefault())
	case client.IsUnauthorized(err):
		return fmt.Sprintf("%v: log in with 'berth login --server %s --token-stdin' (an app-token from 'berth token mint'), or pass --token (BERTH_TOKEN), or the operator's --password (BERTH_PASSWORD)",
			err, e.serverOrDefault())
	}
	var ce *client.Error
	if errors.As(err, &ce) {
		return strings.Replace(err.Error(), ce.Message, flagHints(ce.Message), 1)
	}
	return err.Error()
}

// serverOrDefault is the address a command talked to: the one resolved
// from --server and the context, else DefaultServer.
func (e *env) serverOrDefault() string {
	if e.resolved != "" {
		return e.resolved
	}
	return cmpOr(e.server, DefaultServer)
}

// apiHints maps the server's wording for a request parameter to the CLI
// flag that sets it. The admin API speaks to every client, so its hints
// name parameters; people at the CLI type flags.
var apiHints = strings.NewReplacer(
	"pass force=true to", "add --force to",
	"pass force to", "add --force to",
	"(pass wake=true to start one)", "(leave out --no-wake to start one)",
	"with wait=true to", "with --wait to",
)

func flagHints(msg string) string { return apiHints.Replace(msg) }
