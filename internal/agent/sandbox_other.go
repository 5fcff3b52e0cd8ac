//go:build !linux

package agent

import "errors"

func enterSandbox(s sandboxFlag, expose, hide []string) error {
	return errors.New("--sandbox is only supported on Linux")
}
