//go:build !linux

package agent

import "errors"

// rewriteArgs is Linux only: elsewhere a spare keeps its command line.
func rewriteArgs(orig, assigned []string) error {
	return errors.New("rewriting the command line is not supported on this system")
}
