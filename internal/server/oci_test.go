package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/berth-dev/berth/internal/hostnet"
	"github.com/berth-dev/berth/internal/hostnet/netnstest"
	"github.com/berth-dev/berth/internal/image/registrytest"
	"github.com/berth-dev/berth/internal/syncbuf"
	"github.com/berth-dev/berth/internal/vm/vmtest"
)

// TestContainerFromRegistry deploys a container whose vm.image is a
// reference on a loopback registry (docker-registry), with no
// start_command: berth pulls it and runs the image's own command, env and
// workdir, and a request held from zero replicas is served.
func TestContainerFromRegistry(t *testing.T) {
	skipShort(t, "runs a registry and a container")
	netnstest.Require(t)
	reg := registrytest.Start(t, registrytest.Options{})
	site := registrytest.Layer(t,
		registrytest.File{Name: "www/", Dir: true},
		registrytest.File{Name: "www/index.html", Body: []byte("served from a registry image\n")},
	)
	// The env and workdir are the image's: the page is found only when
	// httpd runs in /www (-h .) and names the env's greeting in a CGI-less
	// way: the command line expands it into the page's directory name.
	img := registrytest.Image(t, v1.Config{
		Entrypoint: []string{"/bin/sh", "-c"}, Cmd: []string{`exec /bin/busybox httpd -f -p "$PORT" -h "$DOCROOT"`},
		Env: []string{"DOCROOT=.", "PATH=/bin"}, WorkingDir: "/www", ExposedPorts: map[string]struct{}{"8080/tcp": {}},
	}, registrytest.BusyboxLayer(t), site)
	ref := reg.Push(t, "apps/site:v1", img)

	dir, err := os.MkdirTemp("", "bo") // short: agent sockets live below
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// The containers' agent is static, the zero-cost way into an image
	// (the -race test binary is not).
	agent := filepath.Join(dir, "agent")
	if err := vmtest.BuildAgent(agent, false); err != nil {
		t.Fatal(err)
	}
	t.Setenv("BERTH_GUEST_SUBNET", hostnet.DefaultSubnet)
	cfg, err := hostnet.ConfigFromEnv(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := hostnet.Setup(context.Background(), cfg); err != nil {
		t.Fatalf("guest network: %v", err)
	}
	t.Cleanup(func() { hostnet.Teardown(context.Background(), cfg) })

	var logs syncbuf.Buffer
	h := startWith(t, dir, func(o *Options) {
		o.Log = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		o.RegistryAllowInsecure = []string{"127.0.0.1"}
		o.Drivers.ContainerAgent = agent
	})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("server log:\n%s", logs.String())
		}
	})
	if !slices.Contains(h.s.fleet.DriverNames(), "container") {
		t.Skipf("no container driver on this host (drivers %v)", h.s.fleet.DriverNames())
	}
	spec := fmt.Sprintf(`{"id":"regsite","routes":[{"host":"regsite.test"}],"vm":{"driver":"container","port":8080,"image":%q},`+
		`"scaling":{"min_replicas":0,"max_replicas":1,"cold_start_timeout_secs":60}}`, ref)
	if r := h.json("POST", "/deployments", spec); r.code/100 != 2 {
		t.Fatalf("registering: %d %s", r.code, r.body)
	}
	req, _ := http.NewRequest("GET", h.proxy+"/index.html", nil)
	req.Host = "regsite.test"
	t0 := time.Now()
	resp, err := (&http.Client{Timeout: 90 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "served from a registry image\n" {
		t.Fatalf("GET: %d %q", resp.StatusCode, body)
	}
	t.Logf("served from zero in %v; X-Berth-Cold-Start: %s", time.Since(t0).Round(time.Millisecond), resp.Header.Get("X-Berth-Cold-Start"))
	if !strings.HasPrefix(resp.Header.Get("X-Berth-Cold-Start"), "held=") {
		t.Errorf("no cold-start report: %q", resp.Header.Get("X-Berth-Cold-Start"))
	}
	if !h.s.images.Usable(ref, "default") {
		t.Error("the reference is not recorded as pulled by the default namespace")
	}
	// A reference refused at dial time (metadata address) is accepted by
	// spec validation, but its replica start fails with the reason.
	if r := h.json("POST", "/images/pull", `{"ref":"169.254.169.254/x:y"}`); r.code != http.StatusBadGateway || !strings.Contains(string(r.body), "metadata") {
		t.Errorf("pull from a metadata address: %d %s", r.code, r.body)
	}
	if r := h.json("POST", "/images/pull", `{"ref":"alpine"}`); r.code != http.StatusBadRequest || !strings.Contains(string(r.body), `"ref`) {
		t.Errorf("pull of a local name: %d %s", r.code, r.body)
	}
}
