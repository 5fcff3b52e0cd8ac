package server

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/image"
	"github.com/berth-dev/berth/internal/syncbuf"
)

// TestSweepBuiltImages: POST /images/sweep over budget removes an earlier
// build's image (as the image-build job records one: ImportBuilt) and a
// tree no image names, says how many bytes that freed, and keeps the
// build the deployment runs, whose replica goes on serving from it.
func TestSweepBuiltImages(t *testing.T) {
	var logs syncbuf.Buffer
	h, restart := startContainersRestartable(t, &logs, func(o *Options) { o.ImageBudget = 1 })
	ctx := context.Background()
	base, err := h.s.images.Rootfs("busybox")
	if err != nil {
		t.Fatal(err)
	}
	cfg := image.Config{Cmd: []string{"/bin/sh", "-c", "echo built > /www; exec httpd -f -p $PORT -h /"}}
	built := func(name, marker string) image.Image {
		dir := filepath.Join(t.TempDir(), "rootfs")
		if out, err := exec.Command("cp", "-a", base, dir).CombinedOutput(); err != nil {
			t.Fatalf("copying busybox: %v: %s", err, out)
		}
		if err := os.WriteFile(filepath.Join(dir, "build"), []byte(strings.Repeat(marker, 50_000)), 0o644); err != nil {
			t.Fatal(err)
		}
		im, err := h.s.images.ImportBuilt(ctx, name, dir, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return im
	}
	old := built("app-0000aaaa", "a")
	built("app-0000bbbb", "b")
	// A tree no image names, as a crash between a tree's move into place
	// and its record leaves one: its record goes behind berth's back, and
	// berth starts again.
	stray := built("stray", "s")
	if _, _, err := h.s.store.DeleteImage(ctx, "stray"); err != nil {
		t.Fatal(err)
	}
	h = restart(h)
	strayTree := filepath.Join(h.s.images.Dir(), "sha256", strings.TrimPrefix(stray.Digest, image.DigestPrefix))

	sp := `{"id":"app","routes":[{"host":"app.test"}],"vm":{"driver":"container","image":"app-0000bbbb","port":8080},` +
		`"scaling":{"min_replicas":1,"max_replicas":1,"cold_start_timeout_secs":60}}`
	if r := h.json("POST", "/deployments", sp); r.code != 201 {
		t.Fatalf("register: %d %s", r.code, r.body)
	}
	defer h.deleteQuietly("app")
	if r := h.getEventually("app.test", "/www"); strings.TrimSpace(string(r.body)) != "built" {
		t.Fatalf("the built image's command served %q", r.body)
	}

	var sw apitype.ImageSweep
	r := h.do("POST", "/images/sweep", "", "")
	if r.code != 200 {
		t.Fatalf("sweep: %d %s", r.code, r.body)
	}
	if err := json.Unmarshal(r.body, &sw); err != nil {
		t.Fatal(err)
	}
	if !sw.Pressure || !slices.Contains(sw.Offloaded, "app-0000aaaa") || slices.Contains(sw.Offloaded, "app-0000bbbb") || sw.Orphans != 1 {
		t.Fatalf("sweep = %+v; want app-0000aaaa and the stray tree removed, app-0000bbbb kept", sw)
	}
	if sw.FreedBytes < old.Size+stray.Size {
		t.Errorf("freed %d bytes, want at least the old build's %d and the stray tree's %d", sw.FreedBytes, old.Size, stray.Size)
	}
	if h.s.images.Exists("app-0000aaaa") || !h.s.images.Exists("app-0000bbbb") {
		t.Errorf("after the sweep: old exists %v, current exists %v", h.s.images.Exists("app-0000aaaa"), h.s.images.Exists("app-0000bbbb"))
	}
	if _, err := os.Stat(strayTree); !os.IsNotExist(err) {
		t.Errorf("the stray tree is still there: %v", err)
	}
	if r := get(t, h.proxy+"/www", "app.test"); r.code != 200 || strings.TrimSpace(string(r.body)) != "built" {
		t.Errorf("after the sweep the replica served %d %q", r.code, r.body)
	}
}
