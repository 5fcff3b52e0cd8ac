package spec

import (
	"strings"
	"testing"

	"github.com/berth-dev/berth/apitype"
)

func TestCheckStore(t *testing.T) {
	for store, want := range map[string]string{
		"local":                   "",
		"/srv/art":                "",
		"https://art.example.com": "",
		"http://127.0.0.1:9090/namespaces/a/artifacts": "",
		"/srv/../etc":                     "clean absolute path",
		"/srv/art/":                       "clean absolute path",
		"s":                               "want local",
		"s3://bucket":                     "want local",
		"https://user:pw@art.example.com": "no credentials",
		"https://art.example.com/?x=1":    "no query",
		"http://169.254.169.254/":         "cloud metadata",
		"http://[fe80::1]:80/":            "link-local",
		"https://":                        "no host",
	} {
		got := CheckStore(store)
		if want == "" && got != "" || want != "" && !strings.Contains(got, want) {
			t.Errorf("CheckStore(%q) = %q, want %q", store, got, want)
		}
	}
}

// TestStoreFieldsValidated: every store field of a spec is checked, and
// the refusal names the field.
func TestStoreFieldsValidated(t *testing.T) {
	o := Options{Drivers: []string{"process"}}
	vm := func() *apitype.DeploymentSpec {
		return &apitype.DeploymentSpec{ID: "a", VM: &apitype.VmSpec{Driver: "process", Port: 8080}}
	}
	s := vm()
	s.VM.Mounts = []apitype.MountSpec{{Path: "/data", Store: "http://169.254.169.254/", Ref: "r"}}
	if err := Validate(s, o); err == nil || !strings.Contains(err.Error(), "vm.mounts[0].store: ") {
		t.Errorf("mount store: %v", err)
	}
	s = vm()
	s.Artifact = &apitype.ArtifactSpec{Store: "ftp://x", Ref: "r"}
	if err := Validate(s, o); err == nil || !strings.Contains(err.Error(), "artifact.store: ") {
		t.Errorf("artifact store: %v", err)
	}
	s = vm()
	s.Build = &apitype.BuildSpec{Store: "relative/dir", Ref: "r"}
	if err := Validate(s, o); err == nil || !strings.Contains(err.Error(), "build.store: ") {
		t.Errorf("build store: %v", err)
	}
	// A well-formed store gets as far as the process driver's refusal
	// (it has no images).
	s = vm()
	s.Artifact = &apitype.ArtifactSpec{Store: "local", Ref: "r"}
	if err := Validate(s, o); err == nil || !strings.Contains(err.Error(), "artifact: the process driver has no images") {
		t.Errorf("local artifact: %v", err)
	}
}

// TestStoreRoots: an absolute store root must lie in StoreRootsAllow.
func TestStoreRoots(t *testing.T) {
	s := &apitype.DeploymentSpec{ID: "a", VM: &apitype.VmSpec{Driver: "process", Port: 8080,
		Mounts: []apitype.MountSpec{{Path: "/data", Store: "/srv/art/team", Ref: "r"}}}}
	if err := Validate(s, Options{Drivers: []string{"process"}}); err == nil || !strings.Contains(err.Error(), "vm.mounts[0].store: ") || !strings.Contains(err.Error(), "--artifact-roots") {
		t.Errorf("no roots allowed: %v", err)
	}
	if err := Validate(s, Options{Drivers: []string{"process"}, StoreRootsAllow: []string{"/srv/other"}}); err == nil || !strings.Contains(err.Error(), "/srv/other") {
		t.Errorf("root elsewhere: %v", err)
	}
	if err := Validate(s, Options{Drivers: []string{"process"}, StoreRootsAllow: []string{"/srv/art"}}); err != nil {
		t.Errorf("allowed root: %v", err)
	}
	if err := Validate(s, Options{Drivers: []string{"process"}, StoreRootsAllow: []string{"/srv/ar"}}); err == nil {
		t.Errorf("/srv/ar must not allow /srv/art: %v", err)
	}
}
