package spec

import (
	"testing"

	"github.com/berth-dev/berth/apitype"
)

// TestVMDefaults: vm.driver defaults to process, as the README says, and
// a process spec may leave vm.port out; both come back filled in.
func TestVMDefaults(t *testing.T) {
	s := &apitype.DeploymentSpec{ID: "a", VM: &apitype.VmSpec{StartCommand: "true"}}
	Normalize(s, testOpts)
	if err := Validate(s, testOpts); err != nil {
		t.Fatalf("Validate = %v", err)
	}
	if s.VM.Driver != apitype.DriverProcess || s.VM.Port != 0 {
		t.Errorf("driver %q port %d, want process and 0 (assigned per replica)", s.VM.Driver, s.VM.Port)
	}
}
