package drivers

import (
	"io"

	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/container"
	"github.com/berth-dev/berth/internal/vm/guest"
)

// containerFactory opens the container driver, which needs the guest
// network; container.New says what else is missing.
var containerFactory = Factory{
	Name:  "container",
	Check: needNet,
	Open: func(e *Env) (vm.Driver, io.Closer, error) {
		d, err := container.New(container.Options{
			Dir: StateDirs(e.DataDir)["container"], Images: e.Images, Net: e.Net, Log: e.Log,
			Agent: e.ContainerAgent, Runtime: e.OCIRuntime,
		})
		if err != nil {
			return nil, nil, err
		}
		return d, d, nil
	},
}

// needNet is the isolating drivers' check for the guest network.
func needNet(e *Env) error {
	if e.Net == nil {
		return guest.Unavailablef("no guest network (run berth host setup)")
	}
	return nil
}
