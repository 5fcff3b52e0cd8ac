package server

import (
	"image/png"
	"os"
	"testing"
)

// browserRun is what every browser script (testdata/*.cjs) reports besides
// its own findings: the console errors it saw, axe-core's violations and
// runs, and the screenshots it wrote.
type browserRun struct {
	ConsoleErrors []string
	Axe           []struct {
		Page, ID, Impact, Help string
		Nodes                  []string
	}
	AxeRuns []struct {
		Page  string
		Rules int
	}
	Shots []string
}

// check fails on any console error or serious axe violation (logging the
// lesser ones), on axe runs or screenshots other than the counts wanted
// (the why strings say what they count), and on a screenshot that is not
// a PNG of at least 360×300.
func (r *browserRun) check(t *testing.T, axeRuns int, axeWhy string, shots int, shotsWhy string) {
	t.Helper()
	for _, e := range r.ConsoleErrors {
		t.Errorf("console: %s", e)
	}
	for _, v := range r.Axe {
		if v.Impact == "serious" || v.Impact == "critical" {
			t.Errorf("axe on %s: %s (%s) %s at %v", v.Page, v.ID, v.Impact, v.Help, v.Nodes)
		} else {
			t.Logf("axe on %s: %s (%s) %s at %v", v.Page, v.ID, v.Impact, v.Help, v.Nodes)
		}
	}
	if len(r.AxeRuns) != axeRuns {
		t.Errorf("axe ran on %d pages, want %d (%s)", len(r.AxeRuns), axeRuns, axeWhy)
	}
	for _, a := range r.AxeRuns {
		if a.Rules < 10 {
			t.Errorf("axe applied %d rules to %s", a.Rules, a.Page)
		}
	}
	if len(r.Shots) != shots {
		t.Errorf("%d screenshots, want %d (%s)", len(r.Shots), shots, shotsWhy)
	}
	for _, p := range r.Shots {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(f)
		f.Close()
		if err != nil {
			t.Fatalf("screenshot %s: %v", p, err)
		}
		if b := img.Bounds(); b.Dx() < 360 || b.Dy() < 300 {
			t.Errorf("screenshot %s is %v", p, b)
		}
	}
}
