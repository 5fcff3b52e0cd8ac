package spec

import (
	"strings"
	"testing"

	"github.com/berth-dev/berth/apitype"
)

// TestSiteRootConfined: a site root lies in the namespace's subtree of the
// sites directory, or in a directory the operator allowed; everything else
// (the host's /, /etc, a path climbing out with .., another namespace's
// subtree) is refused naming site.root (issue 9).
func TestSiteRootConfined(t *testing.T) {
	o := Options{SitesDir: "/var/lib/berth/sites", SiteRootsAllow: []string{"/srv/www"}}
	tests := []struct {
		ns, root string
		opts     Options
		want     string // normalized root; "" when refused
	}{
		{"", "", o, "/var/lib/berth/sites/default/docs"},
		{"team-a", "", o, "/var/lib/berth/sites/team-a/docs"},
		{"team-a", "public", o, "/var/lib/berth/sites/team-a/public"},
		{"team-a", "./a/../b", o, "/var/lib/berth/sites/team-a/b"},
		{"team-a", "/var/lib/berth/sites/team-a", o, "/var/lib/berth/sites/team-a"},
		{"team-a", "/var/lib/berth/sites/team-a/x/", o, "/var/lib/berth/sites/team-a/x"},
		{"team-a", "/srv/www/a", o, "/srv/www/a"},
		{"team-a", "/", o, ""},
		{"team-a", "/etc", o, ""},
		{"team-a", "/tmp/../etc", o, ""},
		{"team-a", "/var/lib/berth", o, ""},
		{"team-a", "/var/lib/berth/sites", o, ""},
		{"team-a", "/var/lib/berth/sites/team-b/x", o, ""},
		{"team-a", "/var/lib/berth/sites/team-a/../team-b", o, ""},
		{"team-a", "/var/lib/berth/sites/team-ab", o, ""},
		{"team-a", "../team-b", o, ""},
		{"team-a", "../../../../etc", o, ""},
		{"team-a", "/srv/wwwx", o, ""},
		{"team-a", "/srv/www/a", Options{SitesDir: o.SitesDir}, ""}, // a confined writer's options
		{"team-a", "/srv/www/a", Options{}, ""},
	}
	for _, tt := range tests {
		s := &apitype.DeploymentSpec{ID: "docs", Namespace: tt.ns, Routes: []apitype.RouteRule{{Host: "docs.test"}}, Site: &apitype.SiteSpec{Root: tt.root}}
		Normalize(s, tt.opts)
		err := Validate(s, tt.opts)
		switch {
		case tt.want == "" && err == nil:
			t.Errorf("ns %q root %q: accepted as %q, want refused", tt.ns, tt.root, s.Site.Root)
		case tt.want == "" && !strings.HasPrefix(err.Error(), "site.root: "):
			t.Errorf("ns %q root %q: %v, want a site.root error", tt.ns, tt.root, err)
		case tt.want != "" && err != nil:
			t.Errorf("ns %q root %q: %v", tt.ns, tt.root, err)
		case tt.want != "" && s.Site.Root != tt.want:
			t.Errorf("ns %q root %q: normalized to %q, want %q", tt.ns, tt.root, s.Site.Root, tt.want)
		}
		if tt.want != "" {
			if base, ok := SiteBase(s, tt.opts); !ok || !strings.HasPrefix(tt.want, base) {
				t.Errorf("ns %q root %q: SiteBase = %q, %v", tt.ns, tt.root, base, ok)
			}
			again := *s.Site
			Normalize(s, tt.opts)
			if *s.Site != again {
				t.Errorf("ns %q root %q: Normalize not idempotent: %q then %q", tt.ns, tt.root, again.Root, s.Site.Root)
			}
		}
	}
}
