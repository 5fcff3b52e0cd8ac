package server

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/berth-dev/berth/internal/auth"
)

// TestArtifactWalls drives /namespaces/{ns}/artifacts on a real server:
// a namespace's admin publishes, its viewer reads, another namespace's
// token gets one identical 403 whether a tag exists or not, and reads a
// blob of A's through its own path only as the 404 of a digest nobody
// stored.
func TestArtifactWalls(t *testing.T) {
	n, op, adminA := limitsWorld(t, Options{})
	var m auth.MintedView
	n.must(201, "POST", "/tokens", op, `{"name":"a viewer","admin":"view","namespace":"team-a","deployments":[]}`, &m)
	viewA := bearer(m.Token)
	n.must(201, "POST", "/tokens", op, `{"name":"a one-app admin","admin":"admin","namespace":"team-a","deployments":["web"]}`, &m)
	appA := bearer(m.Token)
	n.must(201, "POST", "/tokens", op, `{"name":"b admin","admin":"admin","namespace":"team-b","deployments":[]}`, &m)
	adminB := bearer(m.Token)

	blob := "a's private tarball"
	d := fmt.Sprintf("%x", sha256.Sum256([]byte(blob)))
	var info map[string]any
	n.must(200, "GET", "/namespaces/team-a/artifacts", viewA, "", &info)
	if info["namespace"] != "team-a" || info["available"] != true || info["writable"] != false || info["prefix"] != "team-a/" {
		t.Errorf("viewer's info: %v", info)
	}
	n.must(200, "GET", "/namespaces/team-a/artifacts", adminA, "", &info)
	if info["writable"] != true {
		t.Errorf("admin's info: %v", info)
	}

	if r := n.call(nil, "PUT", "/namespaces/team-a/artifacts/blobs/"+d, appA, blob); r.code != 403 || !strings.Contains(string(r.body), `publishing artifacts needs an admin credential for all of namespace \"team-a\"`) {
		t.Errorf("a one-deployment admin publishing: %s", r)
	}
	if r := n.call(nil, "PUT", "/namespaces/team-a/artifacts/blobs/"+d, viewA, blob); r.code != 403 {
		t.Errorf("a viewer publishing: %s", r)
	}
	n.must(201, "PUT", "/namespaces/team-a/artifacts/blobs/"+d, adminA, blob, nil)
	n.must(200, "PUT", "/namespaces/team-a/artifacts/tags/app", adminA, d, nil)
	if r := n.call(nil, "GET", "/namespaces/team-a/artifacts/blobs/"+d, viewA, ""); r.code != 200 || string(r.body) != blob {
		t.Errorf("viewer reading: %s", r)
	}
	if r := n.call(nil, "HEAD", "/namespaces/team-a/artifacts/blobs/"+d, viewA, ""); r.code != 200 || r.header.Get("Content-Length") != fmt.Sprint(len(blob)) {
		t.Errorf("viewer HEAD: %s %v", r, r.header)
	}
	if r := n.call(nil, "GET", "/namespaces/team-a/artifacts/tags", viewA, ""); r.code != 200 || !strings.Contains(string(r.body), `"tag":"app"`) {
		t.Errorf("viewer listing: %s", r)
	}

	// B at A's path: one answer, tag or no tag.
	exists := n.call(nil, "GET", "/namespaces/team-a/artifacts/tags/app", adminB, "")
	missing := n.call(nil, "GET", "/namespaces/team-a/artifacts/tags/nope", adminB, "")
	if exists.code != 403 || exists.String() != missing.String() {
		t.Errorf("B reading A's tags: %s vs %s (must be one identical 403)", exists, missing)
	}
	if r := n.call(nil, "GET", "/namespaces/team-a/artifacts/blobs/"+d, adminB, ""); r.String() != exists.String() {
		t.Errorf("B reading A's blob at A's path: %s", r)
	}
	if r := n.call(nil, "PUT", "/namespaces/team-a/artifacts/tags/x", adminB, d); r.String() != exists.String() {
		t.Errorf("B writing A's tags: %s", r)
	}
	// B at its own path with A's digest: the 404 of a digest nobody stored.
	nobody := fmt.Sprintf("%x", sha256.Sum256([]byte("nobody")))
	theirs := n.call(nil, "GET", "/namespaces/team-b/artifacts/blobs/"+d, adminB, "")
	none := n.call(nil, "GET", "/namespaces/team-b/artifacts/blobs/"+nobody, adminB, "")
	if theirs.code != 404 || strings.ReplaceAll(theirs.String(), d, nobody) != none.String() {
		t.Errorf("B fetching A's digest: %s vs %s", theirs, none)
	}
	if r := n.call(nil, "PUT", "/namespaces/team-b/artifacts/tags/stolen", adminB, d); r.code != 404 {
		t.Errorf("B tagging A's digest: %s", r)
	}
	if r := n.call(nil, "GET", "/namespaces/team-b/artifacts/tags", adminB, ""); strings.TrimSpace(string(r.body)) != "[]" {
		t.Errorf("B's tags: %s", r)
	}
	// Bad input names the field.
	if r := n.call(nil, "PUT", "/namespaces/team-a/artifacts/blobs/"+nobody, adminA, blob); r.code != 400 || !strings.Contains(string(r.body), "digest: ") || !strings.Contains(string(r.body), d) {
		t.Errorf("mismatched upload: %s", r)
	}
	if r := n.call(nil, "GET", "/namespaces/Bad_NS/artifacts", op, ""); r.code != 400 {
		t.Errorf("invalid namespace: %s", r)
	}

	// A deployment in team-a reads "local" through its namespace, and
	// berth's own admin URL is the same store, held to the namespace.
	src, err := n.s.ArtifactSource("local", "team-a", "")
	if err != nil {
		t.Fatal(err)
	}
	got, err := src.Resolve(context.Background(), "app")
	if err != nil || got != d {
		t.Fatalf("resolve app: %q %v", got, err)
	}
	rc, _, err := src.Fetch(context.Background(), got)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || string(b) != blob {
		t.Errorf("fetch: %q %v", b, err)
	}
	if src, err := n.s.ArtifactSource(n.admin+"/namespaces/team-a/artifacts", "team-a", ""); err != nil {
		t.Errorf("own admin URL: %v", err)
	} else if got, err := src.Resolve(context.Background(), "app"); err != nil || got != d {
		t.Errorf("own admin URL resolve: %q %v", got, err)
	}
	if _, err := n.s.ArtifactSource(n.admin+"/namespaces/team-a/artifacts", "team-b", ""); err == nil {
		t.Errorf("a team-b deployment opened team-a's artifacts through berth's own URL")
	}
	// The tarball unpacks once into the trees every replica shares.
	tr, err := n.s.ArtifactTrees().Unpack(context.Background(), src, d, 0)
	if err == nil || tr.Dir != "" {
		t.Errorf("a blob that is no tarball unpacked: %+v %v", tr, err)
	}
}

// TestArtifactRootsOverlappingData: an artifact store root directory may
// not contain the data directory or lie in it (berth's own store would be
// read past its namespaces).
func TestArtifactRootsOverlappingData(t *testing.T) {
	dir := t.TempDir()
	for _, roots := range [][]string{{dir}, {dir + "/artifacts"}, {"relative"}} {
		if _, err := tryStart(t, Options{DataDir: dir, ArtifactRoots: roots}); err == nil || !strings.Contains(err.Error(), "artifact store root directory") {
			t.Errorf("ArtifactRoots %v: %v", roots, err)
		}
	}
}
