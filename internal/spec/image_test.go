package spec

import (
	"strings"
	"testing"

	"github.com/berth-dev/berth/apitype"
)

func TestImageExists(t *testing.T) {
	o := Options{
		Drivers:     []string{"process", "container", "firecracker"},
		ImageExists: func(name string) bool { return name == "busybox" },
	}
	for _, tc := range []struct {
		driver, image string
		want          string // substring of the error; "" means valid
	}{
		{"container", "busybox", ""},
		{"container", "", "vm.image: required for the container driver"},
		{"container", "nope", `vm.image: no image "nope" on this host`},
		{"firecracker", "nope", `vm.image: no image "nope"`},
		{"process", "", ""},
		{"process", "busybox", "vm.image: the process driver runs start_command on this host and has no images"},
	} {
		s := vmSpec()
		s.VM.Driver, s.VM.Image = apitype.Driver(tc.driver), tc.image
		err := Validate(s, o)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s with image %q: %v, want valid", tc.driver, tc.image, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s with image %q: %v, want an error containing %q", tc.driver, tc.image, err, tc.want)
		}
	}
	// A process spec naming an image is refused without an image store too:
	// the driver would run it on the host and ignore the image.
	s0 := vmSpec()
	s0.VM.Image = "busybox"
	if err := Validate(s0, Options{Drivers: []string{"process"}}); err == nil || !strings.HasPrefix(err.Error(), "vm.image: ") {
		t.Errorf("process with an image, no image store: %v, want vm.image refused", err)
	}
	// Without an image store nothing is checked.
	s := vmSpec()
	s.VM.Driver, s.VM.Image = "container", "anything"
	if err := Validate(s, Options{Drivers: []string{"container"}}); err != nil {
		t.Errorf("without ImageExists: %v", err)
	}
}
