package firecracker

import (
	"context"

	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/proc"
)

// Usage reports the VMM's resident memory (guest memory the guest has
// touched, plus the VMM's own) and its CPU use since the previous call
// (since its start on the first). A suspended replica uses nothing.
func (d *Driver) Usage(ctx context.Context, id string) (vm.Usage, error) {
	st, err := d.rd.Load(id)
	if err != nil {
		return vm.Usage{}, err
	}
	if st.Suspended || !proc.Alive(st.PID, st.StartTicks) {
		return vm.Usage{}, nil
	}
	mem, cpu, ok := d.cpu.Process(id, st.PID, st.StartedAt)
	if !ok {
		return vm.Usage{}, nil
	}
	return vm.Usage{MemoryBytes: mem, CPUPercent: cpu}, nil
}
