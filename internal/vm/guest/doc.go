// Package guest prepares what the microVM drivers (kvm, libvirt,
// firecracker) boot: the guest kernel and the initramfs built for it
// (Boot), and root disks with berth written in as the guests' init
// (Disks), with the checks they need of the executables involved (an
// x86-64 ELF, statically linked or not).
//
// It reads no environment: what to boot is given in its options, which
// cmd/berth reads from the environment (package drivers documents which).
package guest

import (
	"fmt"

	"github.com/berth-dev/berth/internal/vm"
)

// Init is where the agent goes in every guest disk: the drivers' default
// GuestInit.
const Init = "/berth-agent"

// LibDir is where a dynamically linked agent's interpreter and libraries
// (package agentbin) go in every guest disk. The guest runs the agent
// through that interpreter, so it never uses the image's libc.
const LibDir = "/berth-lib"

// Unavailablef is an error wrapping vm.ErrUnavailable, so that the driver
// it is about is logged as unavailable and berth serves on without it.
func Unavailablef(format string, args ...any) error {
	return fmt.Errorf(format+": %w", append(args, vm.ErrUnavailable)...)
}
