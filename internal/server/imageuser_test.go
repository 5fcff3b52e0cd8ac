package server

import (
	"fmt"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/berth-dev/berth/internal/image/registrytest"
	"github.com/berth-dev/berth/internal/syncbuf"
)

// TestContainerRunsAsImageUser: a registry image whose config sets User
// runs its process as that user in a container replica — "1000:1000" as
// given, a name through the image's own /etc/passwd and /etc/group (with
// its supplementary groups and HOME) — and a user the image does not
// define fails the replica's create, naming it, instead of running as
// root.
func TestContainerRunsAsImageUser(t *testing.T) {
	var logs syncbuf.Buffer
	h := startContainers(t, &logs, func(o *Options) { o.RegistryAllowInsecure = []string{"127.0.0.1"} })
	reg := registrytest.Start(t, registrytest.Options{})
	accounts := registrytest.Layer(t,
		registrytest.File{Name: "etc/passwd", Body: []byte("root:x:0:0:root:/root:/bin/sh\napp:x:1001:1002:App:/home/app:/bin/sh\n")},
		registrytest.File{Name: "etc/group", Body: []byte("root:x:0:\napp:x:1002:\nextra:x:1003:other,app\n")},
		registrytest.File{Name: "home/app/", Dir: true},
	)
	// The app reports who it runs as: uid, gid, groups and HOME, as the
	// page it serves (the agent's working directory is /, which only
	// root may write: the page goes to /tmp).
	cmd := `mkdir -p /tmp/www && { /bin/busybox id -u; /bin/busybox id -g; /bin/busybox id -G; echo "$HOME"; } > /tmp/www/index.html && exec /bin/busybox httpd -f -p "$PORT" -h /tmp/www`
	push := func(repo, user string) string {
		return reg.Push(t, repo, registrytest.Image(t, v1.Config{
			User: user, Entrypoint: []string{"/bin/sh", "-c"}, Cmd: []string{cmd},
			ExposedPorts: map[string]struct{}{"8080/tcp": {}},
		}, registrytest.BusyboxLayer(t), accounts))
	}
	deploy := func(id, ref string) {
		t.Helper()
		sp := fmt.Sprintf(`{"id":%q,"routes":[{"host":"%s.test"}],"vm":{"driver":"container","port":8080,"image":%q},`+
			`"scaling":{"min_replicas":0,"max_replicas":1,"cold_start_timeout_secs":60}}`, id, id, ref)
		if r := h.json("POST", "/deployments", sp); r.code != 201 {
			t.Fatalf("register %s: %d %s", id, r.code, r.body)
		}
		t.Cleanup(func() { h.deleteQuietly(id) })
	}
	for _, c := range []struct{ id, user, want string }{
		{"numeric", "1000:1000", "1000\n1000\n1000\n/root\n"},
		{"named", "app", "1001\n1002\n1002 1003\n/home/app\n"},
		{"namegroup", "app:extra", "1001\n1003\n1003\n/home/app\n"},
		{"rootuser", "root", "0\n0\n0\n/root\n"},
	} {
		deploy(c.id, push("apps/"+c.id+":v1", c.user))
		r := h.getEventually(c.id+".test", "/")
		if string(r.body) != c.want {
			t.Errorf("user %q: the app reports %q, want %q", c.user, r.body, c.want)
		}
	}

	deploy("ghost", push("apps/ghost:v1", "ghost"))
	if r := get(t, h.proxy+"/", "ghost.test"); r.code == 200 {
		t.Errorf("an undefined user served: %d %q", r.code, r.body)
	}
	// The full error is the admin API's (last_create_error).
	if v := h.view("ghost"); !strings.Contains(v.Metrics.Autoscale.LastCreateError, `no user "ghost" in the image's /etc/passwd`) {
		t.Errorf("last_create_error %q does not say why the create was refused", v.Metrics.Autoscale.LastCreateError)
	}
}
