package server

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/client"
)

// TestImages drives the image routes through the client, as `berth image`
// does: upload a directory, list, pin, refuse deletes while pinned or
// used, and refuse a deployment naming an image that is not there.
func TestImages(t *testing.T) {
	h := start(t, "")
	c, err := client.New(h.admin)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "bin"), 0o755)
	os.WriteFile(filepath.Join(dir, "bin", "hello"), []byte("#!/bin/sh\necho hello\n"), 0o755)
	os.Symlink("hello", filepath.Join(dir, "bin", "hi"))

	im, err := c.ImportImage(ctx, "tiny", dir)
	if err != nil {
		t.Fatalf("ImportImage: %v", err)
	}
	if !strings.HasPrefix(im.Digest, "sha256:") || im.Bytes != int64(len("#!/bin/sh\necho hello\n")) || im.Source != "upload" {
		t.Errorf("imported %+v", im)
	}
	// The same tree imported from the server's host has the same digest.
	host, err := c.ImportImageFromHost(ctx, "tiny-host", dir)
	if err != nil {
		t.Fatalf("ImportImageFromHost: %v", err)
	}
	if host.Digest != im.Digest {
		t.Errorf("host import digest %s, upload digest %s", host.Digest, im.Digest)
	}
	if _, err := c.ImportImageFromHost(ctx, "bad name!", dir); client.StatusCode(err) != http.StatusBadRequest {
		t.Errorf("bad name: %v, want 400", err)
	}
	if _, err := c.ImportImageFromHost(ctx, "missing", filepath.Join(dir, "nope")); client.StatusCode(err) != http.StatusBadRequest {
		t.Errorf("missing path: %v, want 400", err)
	}
	if r := h.do("POST", "/images?name=junk", "application/x-tar", "this is not a tarball"); r.code != http.StatusBadRequest {
		t.Errorf("junk upload: %d %s, want 400", r.code, r.body)
	}

	inv, err := c.Images(ctx)
	if err != nil {
		t.Fatalf("Images: %v", err)
	}
	if len(inv.Images) != 2 || !inv.Complete || !inv.DeleteSupported || inv.LocalBytes != im.Bytes {
		t.Errorf("inventory %+v: want 2 images sharing %d bytes", inv, im.Bytes)
	}

	if got, err := c.PinImage(ctx, "tiny", true); err != nil || !got.Pinned {
		t.Fatalf("PinImage: %+v, %v", got, err)
	}
	if err := c.DeleteImage(ctx, "tiny"); !client.IsConflict(err) {
		t.Errorf("delete pinned: %v, want 409", err)
	}
	if r := h.json("PATCH", "/images/tiny", `{}`); r.code != http.StatusBadRequest {
		t.Errorf("PATCH without pinned: %d, want 400", r.code)
	}
	if _, err := c.PinImage(ctx, "nope", true); !client.IsNotFound(err) {
		t.Errorf("pin unknown: %v, want 404", err)
	}

	// A deployment naming an image that is not there is refused at once.
	for _, driver := range []string{"container", "process"} {
		body := `{"id":"web-` + driver + `","vm":{"driver":"` + driver + `","port":8080,"image":"no-such-image"}}`
		r := h.json("POST", "/deployments", body)
		if driver == "container" && r.code != http.StatusBadRequest {
			t.Errorf("container deployment with a missing image: %d %s, want 400", r.code, r.body)
		}
		if driver == "process" && (r.code != http.StatusBadRequest || !strings.Contains(string(r.body), `"vm.image: `)) {
			t.Errorf("process deployments have no image; naming one got %d %s, want 400 naming vm.image", r.code, r.body)
		}
	}

	// A deployment that uses an image holds it. The process driver has no
	// images (a process spec naming one is refused), so this takes an
	// image driver.
	driver := ""
	for _, d := range h.s.fleet.DriverNames() {
		if d != "process" {
			driver = d
			break
		}
	}
	if driver == "" {
		t.Skip("holding an image takes an image driver (container, kvm, libvirt or firecracker); this host has only process")
	}
	if r := h.json("POST", "/deployments", `{"id":"user","vm":{"driver":"`+driver+`","port":8080,"image":"tiny-host"},"scaling":{"min_replicas":0}}`); r.code/100 != 2 {
		t.Fatalf("registering a user of tiny-host: %d %s", r.code, r.body)
	}
	r := h.do("DELETE", "/images/tiny-host", "", "")
	if r.code != http.StatusConflict {
		t.Fatalf("delete in use: %d %s, want 409", r.code, r.body)
	}
	var conflict struct {
		Error      string                   `json:"error"`
		References []apitype.ImageReference `json:"references"`
	}
	if err := json.Unmarshal(r.body, &conflict); err != nil || len(conflict.References) != 1 || conflict.References[0].ID != "user" {
		t.Errorf("409 body %s: want the user deployment in references", r.body)
	}
	if r := h.do("DELETE", "/deployments/user", "", ""); r.code/100 != 2 {
		t.Fatalf("deleting the user: %d %s", r.code, r.body)
	}
	if err := c.DeleteImage(ctx, "tiny-host"); err != nil {
		t.Errorf("delete once unused: %v", err)
	}
	if _, err := c.Image(ctx, "tiny-host"); !client.IsNotFound(err) {
		t.Errorf("deleted image: %v, want 404", err)
	}
}
