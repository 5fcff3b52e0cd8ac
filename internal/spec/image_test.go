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
		{"process", "ignored", ""},
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
	// Without an image store nothing is checked.
	s := vmSpec()
	s.VM.Driver, s.VM.Image = "container", "anything"
	if err := Validate(s, Options{Drivers: []string{"container"}}); err != nil {
		t.Errorf("without ImageExists: %v", err)
	}
}
