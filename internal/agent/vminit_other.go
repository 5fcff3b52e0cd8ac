//go:build !linux

package agent

import "errors"

// A guest init exists only in Linux guests.

func vmInit() error { return errors.New("--vm-init is only supported on Linux") }

func vmPowerOff() {}

func setHostname(name string) error {
	return errors.New("setting the host name is only supported on Linux")
}
