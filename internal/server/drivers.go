package server

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/firecracker"
	"github.com/berth-dev/berth/internal/vm/process"
)

// buildDrivers returns the vm drivers this host can run, by the name specs
// use in vm.driver. The process driver always works; the isolating drivers
// are added when their host requirements are met (a driver whose New
// answers an error wrapping vm.ErrUnavailable is left out and logged).
func buildDrivers(o Options) (map[string]vm.Driver, error) {
	ds := map[string]vm.Driver{}
	p, err := process.New(process.Options{
		Dir: filepath.Join(o.DataDir, "replicas"), AgentCommand: o.AgentCommand, AgentEnv: o.AgentEnv, Log: o.Log,
	})
	if err != nil {
		return nil, fmt.Errorf("process driver: %w", err)
	}
	ds["process"] = p
	// Further drivers register here, each guarded by its availability:
	//
	//	if d, err := container.New(...); err == nil { ds["container"] = d } else if !errors.Is(err, vm.ErrUnavailable) { return nil, err } else { o.Log.Info(...) }
	//
	// The firecracker driver also needs a guest kernel (Kernel), the image
	// store (Images) and host networking (Net); until they are wired in,
	// New reports it unavailable and says which is missing.
	if d, err := firecracker.New(firecracker.Options{Dir: filepath.Join(o.DataDir, "firecracker"), Log: o.Log}); err == nil {
		ds["firecracker"] = d
	} else if !errors.Is(err, vm.ErrUnavailable) {
		return nil, fmt.Errorf("firecracker driver: %w", err)
	} else {
		o.Log.Info("vm driver unavailable", "driver", "firecracker", "why", err)
	}
	return ds, nil
}
