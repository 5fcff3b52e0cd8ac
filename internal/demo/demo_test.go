package demo

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/spec"
)

// TestDocsSiteUnderSitesDir: the demo's site gets the managed root in the
// default namespace's subtree of the sites directory, which is where
// WriteSite is pointed, and passes the site-root confinement (issue 9).
func TestDocsSiteUnderSitesDir(t *testing.T) {
	sites := t.TempDir()
	o := spec.Options{SitesDir: sites, Drivers: []string{"process"}}
	var docs *apitype.DeploymentSpec
	for _, s := range Specs("/bin/berth") {
		spec.Normalize(&s, o)
		if err := spec.Validate(&s, o); err != nil {
			t.Fatalf("%s: %v", s.ID, err)
		}
		if s.Site != nil {
			docs = &s
		}
	}
	if docs == nil || docs.Site.Root != SiteRoot(sites) {
		t.Fatalf("docs root = %+v, want %s", docs, SiteRoot(sites))
	}
	if _, err := WriteSite(SiteRoot(sites)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(docs.Site.Root, "index.html")); err != nil {
		t.Error(err)
	}
}
