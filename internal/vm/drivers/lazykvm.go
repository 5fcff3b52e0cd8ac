package drivers

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/guest"
	"github.com/berth-dev/berth/internal/vm/kvm"
)

// lazyKVM is the kvm driver while its boot files are not built: Start
// builds them first (guest.Boot). Meanwhile the replica is reported as
// starting (Inspect), as the driver itself reports a replica it is
// starting, so that the fleet does not take it for gone; a Stop meanwhile
// cancels its start. Everything else is the driver's own (embedded, so
// that its optional abilities stay visible to the fleet).
type lazyKVM struct {
	*kvm.Driver
	boot *guest.Boot

	mu      sync.Mutex
	waiting map[string]context.CancelFunc // Starts waiting for the build
	owners  map[string]vm.Owner           // their Spec.Owner
}

func newLazyKVM(d *kvm.Driver, b *guest.Boot) *lazyKVM {
	return &lazyKVM{Driver: d, boot: b, waiting: make(map[string]context.CancelFunc), owners: make(map[string]vm.Owner)}
}

// Start builds the guest's boot files if need be, then starts the replica.
func (l *lazyKVM) Start(ctx context.Context, spec vm.Spec) (vm.Instance, error) {
	if !l.boot.Ready() {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		l.mu.Lock()
		if _, dup := l.waiting[spec.Name]; dup {
			l.mu.Unlock()
			return vm.Instance{}, fmt.Errorf("kvm: start %s: the replica already exists", spec.Name)
		}
		l.waiting[spec.Name], l.owners[spec.Name] = cancel, spec.Owner
		l.mu.Unlock()
		err := l.boot.Wait(ctx)
		l.mu.Lock()
		delete(l.waiting, spec.Name)
		delete(l.owners, spec.Name)
		l.mu.Unlock()
		if err != nil {
			return vm.Instance{}, fmt.Errorf("kvm: start %s: waiting for the guest boot files: %w", spec.Name, err)
		}
	}
	return l.Driver.Start(ctx, spec)
}

// Inspect reports a replica whose Start waits for the boot files as
// starting; others are the driver's.
func (l *lazyKVM) Inspect(ctx context.Context, id string) (vm.Instance, error) {
	l.mu.Lock()
	_, waiting := l.waiting[id]
	owner := l.owners[id]
	l.mu.Unlock()
	if waiting {
		dep, _ := vm.ParseName(id)
		return vm.Instance{ID: id, Deployment: dep, Owner: vm.ResolveOwner(owner, id), State: vm.StateStarting}, nil
	}
	return l.Driver.Inspect(ctx, id)
}

// Stop cancels the Start of a replica that waits for the boot files, and
// stops the driver's replica otherwise.
func (l *lazyKVM) Stop(ctx context.Context, id string, grace time.Duration) error {
	l.mu.Lock()
	cancel, waiting := l.waiting[id]
	l.mu.Unlock()
	if waiting {
		cancel()
		return nil
	}
	return l.Driver.Stop(ctx, id, grace)
}
