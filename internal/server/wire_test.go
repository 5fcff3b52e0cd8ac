package server

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/auth"
	"github.com/berth-dev/berth/internal/contracttest"
)

// TestTokensWire: the /tokens routes answer exactly the contract's
// MintedToken and TokenSummary (issue 10: they carried `minted_by`, which
// the contract does not declare); who minted a token is berth's own
// GET /tokens/{id}/provenance, behind the same walls as the token.
func TestTokensWire(t *testing.T) {
	c := contracttest.MustLoad(t)
	w := startTenants(t, Options{})
	check := func(typ string, r reply) {
		t.Helper()
		if err := c.CheckJSON(typ, r.body); err != nil {
			t.Errorf("%s: %v\n%s", typ, err, r.body)
		}
	}
	r := w.call(nil, "POST", "/tokens", w.a, `{"name":"ci","admin":"view","namespace":"team-a"}`)
	if r.code != 201 {
		t.Fatalf("mint: %s", r)
	}
	check("MintedToken", r)
	var mt auth.MintedView
	w.must(201, "POST", "/tokens", w.op, `{"name":"deploy","admin":"admin","deployments":["web"]}`, &mt)
	for _, path := range []string{"/tokens", "/tokens/" + mt.ID} {
		r := w.call(nil, "GET", path, w.op, "")
		if r.code != 200 {
			t.Fatalf("GET %s: %s", path, r)
		}
		check("TokenSummary", r)
	}
	r = w.call(nil, "PATCH", "/tokens/"+mt.ID, w.op, `{"name":"deploy2"}`)
	if r.code != 200 {
		t.Fatalf("PATCH: %s", r)
	}
	check("TokenSummary", r)

	var p apitype.TokenProvenance
	w.must(200, "GET", "/tokens/"+mt.ID+"/provenance", w.op, "", &p)
	if p.ID != mt.ID || p.MintedBy != "user:admin" {
		t.Errorf("provenance %+v, want user:admin", p)
	}
	// Walls: team-b does not see team-a's tokens, nor the operator's.
	var list []apitype.TokenSummary
	w.must(200, "GET", "/tokens", w.a, "", &list)
	for _, tk := range list {
		if tk.Name == "ci" {
			w.must(404, "GET", "/tokens/"+tk.ID+"/provenance", w.b, "", nil)
		}
	}
	w.must(404, "GET", "/tokens/"+mt.ID+"/provenance", w.b, "", nil)
	w.must(404, "GET", "/tokens/nope/provenance", w.op, "", nil)
}

// TestImagesWire: GET /images and the image view answer the shape app-lb
// documents and its clients decode (issue 10: generated_at was an RFC 3339
// string, last_used null, and created_at berth's own key).
func TestImagesWire(t *testing.T) {
	c := contracttest.MustDocumented(t)
	h := start(t, "")
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "hello"), []byte("hello\n"), 0o644)
	if r := h.json("POST", "/images", fmt.Sprintf(`{"name":"tiny","path":%q}`, dir)); r.code != 201 {
		t.Fatalf("import: %d %s", r.code, r.body)
	} else if err := c.CheckJSON("ImageView", r.body); err != nil {
		t.Errorf("POST /images: %v\n%s", err, r.body)
	}
	for _, q := range []struct{ method, path, body, typ string }{
		{"GET", "/images", "", "ImageInventory"},
		{"GET", "/images/tiny", "", "ImageView"},
		{"PATCH", "/images/tiny", `{"pinned":true}`, "ImageView"},
	} {
		r := h.json(q.method, q.path, q.body)
		if r.code != 200 {
			t.Fatalf("%s %s: %d %s", q.method, q.path, r.code, r.body)
		}
		if err := c.CheckJSON(q.typ, r.body); err != nil {
			t.Errorf("%s %s: %v\n%s", q.method, q.path, err, r.body)
		}
	}
}
