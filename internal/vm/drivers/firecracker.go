package drivers

import (
	"io"
	"os"
	"os/exec"

	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/firecracker"
	"github.com/berth-dev/berth/internal/vm/guest"
)

// firecrackerFactory opens the firecracker driver. It needs, in the order
// a host would get them: KVM, the binary, a guest kernel of its own, the
// guest network, and an agent, which must be static: Firecracker boots
// without an initramfs, and its driver cannot run a dynamic berth through
// its interpreter yet.
var firecrackerFactory = Factory{
	Name:  "firecracker",
	Check: firecrackerCheck,
	Open: func(e *Env) (vm.Driver, io.Closer, error) {
		disks := e.Disks()
		if err := disks.Err(); err != nil {
			return nil, nil, err
		}
		if !disks.Static() {
			return nil, nil, guest.Unavailablef("the guest agent %s is dynamically linked, which the firecracker driver cannot start yet: set BERTH_GUEST_AGENT to a static berth (CGO_ENABLED=0 go build ./cmd/berth)", disks.Agent())
		}
		d, err := firecracker.New(firecracker.Options{
			Dir: StateDirs(e.DataDir)["firecracker"], FirecrackerBin: e.FirecrackerBin, Kernel: e.FirecrackerKernel,
			Images: disks, Net: e.Net, Log: e.Log,
		})
		if err != nil {
			return nil, nil, err
		}
		return d, nil, nil
	},
}

// firecrackerCheck checks the host: KVM, the binary, a kernel, the guest
// network.
func firecrackerCheck(e *Env) error {
	if _, err := os.Stat("/dev/kvm"); err != nil {
		return guest.Unavailablef("no KVM on this host (%v); Firecracker cannot emulate, the kvm driver can (TCG)", err)
	}
	bin := e.FirecrackerBin
	if bin == "" {
		bin = "firecracker"
	}
	if _, err := exec.LookPath(bin); err != nil {
		return guest.Unavailablef("no firecracker binary (%v): put a release's firecracker in PATH or set BERTH_FC_BIN", err)
	}
	if e.FirecrackerKernel == "" {
		return guest.Unavailablef("no guest kernel: set BERTH_FC_KERNEL to a vmlinux with virtio-mmio, ext4 and IP_PNP built in (Firecracker boots it without an initramfs)")
	}
	return needNet(e)
}
