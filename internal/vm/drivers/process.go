package drivers

import (
	"io"

	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/process"
)

// processFactory opens the process driver, which every host can run.
var processFactory = Factory{
	Name: "process",
	Open: func(e *Env) (vm.Driver, io.Closer, error) {
		d, err := process.New(process.Options{
			Dir: StateDirs(e.DataDir)["process"], AgentCommand: e.AgentCommand, AgentEnv: e.AgentEnv, Log: e.Log,
			AllowUnlimited: e.AllowUnlimited,
			HideDirs:       []string{e.DataDir},
		})
		if err != nil {
			return nil, nil, err
		}
		return d, d, nil
	},
}
