package server

import (
	"context"
	"encoding/base64"
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

	"github.com/berth-dev/berth/apitype"
	agentapi "github.com/berth-dev/berth/internal/agent"
	"github.com/berth-dev/berth/internal/auth"
	"github.com/berth-dev/berth/internal/computer"
	"github.com/berth-dev/berth/internal/hostnet"
	"github.com/berth-dev/berth/internal/hostnet/netnstest"
	"github.com/berth-dev/berth/internal/image/registrytest"
	"github.com/berth-dev/berth/internal/syncbuf"
	"github.com/berth-dev/berth/internal/vm"
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
	// A Computer starts from the same reference: its sandbox gets the
	// image's files (and env), not its command (berth's agent runs).
	ctx := context.Background()
	if _, err := h.s.computers.Create(ctx, computer.CreateRequest{ID: "regdesk", Image: ref, Backings: []computer.Backing{{Kind: computer.KindContainer}}, Start: true}); err != nil {
		t.Fatalf("a Computer from %s: %v", ref, err)
	}
	c, release, err := h.s.computers.Use(ctx, "regdesk")
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Exec(ctx, agentapi.ExecRequest{Command: `/bin/busybox cat /www/index.html; echo "docroot=$DOCROOT"`})
	release()
	if err != nil || res.Stdout != "served from a registry image\ndocroot=.\n" {
		t.Errorf("in the Computer: %q, %v", res.Stdout, err)
	}
	if err := h.s.computers.Delete(ctx, "regdesk"); err != nil {
		t.Error(err)
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

// TestRegistryCredentials: a namespace maps a registry host to a secret of
// its own (username/password, or a docker config.json) and pulls a private
// image with it; another namespace can neither manage that mapping nor use
// the cached image without credentials of its own.
func TestRegistryCredentials(t *testing.T) {
	reg := registrytest.Start(t, registrytest.Options{User: "alice", Password: "pw-1"})
	ref := reg.Push(t, "private/app:v1", registrytest.Image(t, v1.Config{}, registrytest.Layer(t, registrytest.File{Name: "secret.txt", Body: []byte("private")})))
	n, op, nsA := limitsWorld(t, Options{RegistryAllowInsecure: []string{"127.0.0.1"}})
	if r := n.call(nil, "POST", "/namespaces", op, `{"name":"team-b"}`); r.code/100 != 2 {
		t.Fatalf("POST /namespaces = %s", r)
	}
	var mb auth.MintedView
	n.must(201, "POST", "/tokens", op, `{"name":"team-b admin","admin":"admin","namespace":"team-b","deployments":[]}`, &mb)
	nsB := bearer(mb.Token)
	credPath := func(ns string) string { return "/namespaces/" + ns + "/registry-credentials/" + reg.Host }

	n.must(201, "POST", "/secrets", nsA, `{"id":"reg","namespace":"team-a","data":{"username":"alice","password":"pw-1"}}`, nil)
	refused(t, n.call(nil, "PUT", credPath("team-a"), nsA, `{"secret":"nope"}`), 400, "secret")
	refused(t, n.call(nil, "PUT", credPath("team-a"), nsA, `{}`), 400, "secret")
	refused(t, n.call(nil, "PUT", "/namespaces/team-a/registry-credentials/bad%20host", nsA, `{"secret":"reg"}`), 400, "host")
	n.must(200, "PUT", credPath("team-a"), nsA, `{"secret":"reg"}`, nil)
	// The walls: team-b may not read or change team-a's mappings.
	n.must(403, "PUT", credPath("team-a"), nsB, `{"secret":"reg"}`, nil)
	n.must(403, "GET", "/namespaces/team-a/registry-credentials", nsB, "", nil)
	n.must(403, "DELETE", credPath("team-a"), nsB, "", nil)
	var list []apitype.RegistryCredential
	n.must(200, "GET", "/namespaces/team-a/registry-credentials", nsA, "", &list)
	if len(list) != 1 || list[0].Host != reg.Host || list[0].Secret != "reg" {
		t.Errorf("mappings = %+v", list)
	}

	var im apitype.ImageView
	n.must(200, "POST", "/images/pull", nsA, fmt.Sprintf(`{"ref":%q}`, ref), &im)
	if im.Name != ref || !strings.HasPrefix(im.Digest, "sha256:") {
		t.Errorf("pulled %+v", im)
	}
	// team-b may not pull for team-a, nor use the cached copy anonymously.
	n.must(403, "POST", "/images/pull", nsB, fmt.Sprintf(`{"ref":%q,"namespace":"team-a"}`, ref), nil)
	if r := n.call(nil, "POST", "/images/pull", nsB, fmt.Sprintf(`{"ref":%q}`, ref)); r.code != http.StatusBadGateway {
		t.Errorf("team-b's anonymous pull of team-a's private image: %s", r)
	}
	if n.s.images.Usable(ref, "team-b") {
		t.Error("team-b may use team-a's private image")
	}
	// With a docker config.json of its own, team-b proves access.
	dcj := fmt.Sprintf(`{"auths":{%q:{"auth":%q}}}`, reg.Host, base64.StdEncoding.EncodeToString([]byte("alice:pw-1")))
	n.must(201, "POST", "/secrets", nsB, fmt.Sprintf(`{"id":"dcj","namespace":"team-b","data":{".dockerconfigjson":%s}}`, jsonString(dcj)), nil)
	n.must(200, "PUT", credPath("team-b"), nsB, `{"secret":"dcj"}`, nil)
	n.must(200, "POST", "/images/pull", nsB, fmt.Sprintf(`{"ref":%q}`, ref), nil)
	if !n.s.images.Usable(ref, "team-b") {
		t.Error("team-b's proven pull is not recorded")
	}

	n.must(204, "DELETE", credPath("team-a"), nsA, "", nil)
	n.must(404, "DELETE", credPath("team-a"), nsA, "", nil)
	var sw apitype.ImageSweep
	n.must(403, "POST", "/images/sweep", nsA, "", nil)
	n.must(200, "POST", "/images/sweep", op, "", &sw)
	if sw.Pressure || len(sw.Offloaded) != 0 || sw.Failed == nil {
		t.Errorf("sweep under budget = %+v", sw)
	}
}

func TestDockerConfigAuth(t *testing.T) {
	b64 := base64.StdEncoding.EncodeToString([]byte("u:p:with:colons"))
	for _, c := range []struct{ cfg, host, user, pass string }{
		{fmt.Sprintf(`{"auths":{"ghcr.io":{"auth":%q}}}`, b64), "ghcr.io", "u", "p:with:colons"},
		{`{"auths":{"https://index.docker.io/v1/":{"username":"hub","password":"pw"}}}`, "index.docker.io", "hub", "pw"},
		{`{"auths":{"other.io":{"username":"x","password":"y"}}}`, "ghcr.io", "", ""},
	} {
		a, err := dockerConfigAuth(c.cfg, c.host)
		if err != nil {
			t.Fatal(err)
		}
		ac, err := a.Authorization()
		if err != nil {
			t.Fatal(err)
		}
		if ac.Username != c.user || ac.Password != c.pass {
			t.Errorf("%s for %s: %q/%q, want %q/%q", c.cfg, c.host, ac.Username, ac.Password, c.user, c.pass)
		}
	}
	if _, err := dockerConfigAuth("{", "ghcr.io"); err == nil {
		t.Error("a broken config.json was accepted")
	}
}

// TestRegistrySecondDeploymentSendsNoRequest: once a namespace has pulled
// a reference, another deployment of it in that namespace starts (its
// spec write's prefetch, its replica's pull phase) with no request to
// the registry, counted at a proxy in front of it.
func TestRegistrySecondDeploymentSendsNoRequest(t *testing.T) {
	reg := registrytest.Start(t, registrytest.Options{})
	proxy := reg.CountingProxy(t)
	reg.Push(t, "apps/twice:v1", registrytest.Image(t, v1.Config{Cmd: []string{"run", "it"}},
		registrytest.Layer(t, registrytest.File{Name: "f.txt", Body: []byte("x")})))
	ref := proxy.Host + "/apps/twice:v1"
	n, _, nsA := limitsWorld(t, Options{RegistryAllowInsecure: []string{"127.0.0.1"}})
	prep := &imagePreparer{s: n.s, log: slog.New(slog.DiscardHandler), started: map[string]bool{}}
	// The first deployment pulls.
	first := &vm.Spec{Image: ref}
	if err := prep.Prepare(t.Context(), "team-a", first); err != nil {
		t.Fatal(err)
	}
	pulled := proxy.Requests()
	if pulled == 0 || first.Command != "run it" {
		t.Fatalf("the first deployment's pull: %d requests, command %q", pulled, first.Command)
	}
	// The second: its spec's prefetch, then its replica's pull phase.
	prep.Prefetch("team-a", ref)
	second := &vm.Spec{Image: ref}
	if err := prep.Prepare(t.Context(), "team-a", second); err != nil {
		t.Fatal(err)
	}
	n.must(200, "POST", "/images/pull", nsA, fmt.Sprintf(`{"ref":%q}`, ref), nil)
	if got := proxy.Requests() - pulled; got != 0 {
		t.Errorf("a second deployment of a pulled image sent %d requests to the registry, want 0", got)
	}
	if second.Command != "run it" {
		t.Errorf("second deployment's command %q", second.Command)
	}
}
