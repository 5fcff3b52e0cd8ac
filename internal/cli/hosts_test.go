package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/fleet/etcdtest"
	"github.com/berth-dev/berth/internal/server"
)

// TestHostCommands: get hosts and host cordon|drain|uncordon against two
// real berths on a real etcd member; a berth with no fleet says so.
func TestHostCommands(t *testing.T) {
	c := etcdtest.Start(t, 1)
	fleet := func(id string) server.Options {
		return server.Options{Fleet: server.FleetOptions{Endpoints: c.Endpoints(), HostID: id, Slots: 4, LeaseTTL: 2 * time.Second}}
	}
	a := runServer(t, fleet("alpha"), nil)
	runServer(t, fleet("beta"), nil)
	op := []string{"--server", a, "--password", "opw"}
	out := mustRun(t, "", append(op, "get", "hosts")...)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 5 || !strings.HasPrefix(lines[0], "HOST") || !strings.HasPrefix(lines[1], "alpha (this)") || !strings.Contains(lines[1], "active") ||
		!strings.HasPrefix(lines[2], "beta ") || lines[4] != "0 fleet slots held, of 4" {
		t.Fatalf("get hosts:\n%s", out)
	}
	if out := mustRun(t, "", append(op, "host", "cordon", "beta")...); out != "host/beta cordoned\n" {
		t.Fatalf("host cordon: %q", out)
	}
	if out := mustRun(t, "", append(op, "get", "host", "beta", "-o", "wide")...); !strings.Contains(out, "cordoned") || !strings.Contains(out, "process") {
		t.Fatalf("get host beta -o wide:\n%s", out)
	}
	if out := mustRun(t, "", append(op, "host", "drain", "beta", "-o", "json")...); !strings.Contains(out, `"state": "draining"`) {
		t.Fatalf("host drain -o json: %q", out)
	}
	if out := mustRun(t, "", append(op, "host", "uncordon", "beta")...); out != "host/beta active\n" {
		t.Fatalf("host uncordon: %q", out)
	}
	if out := mustRun(t, "", append(op, "get", "hosts", "-o", "name")...); out != "host/alpha\nhost/beta\n" {
		t.Fatalf("get hosts -o name: %q", out)
	}
	if code, _, errs := berth(t, "", append(op, "host", "cordon", "gamma")...); code == 0 || !strings.Contains(errs, `no host "gamma"`) {
		t.Fatalf("cordon of an unknown host: %d %q", code, errs)
	}
	if code, _, _ := berth(t, "", append(op, "host", "cordon")...); code != exitUsage {
		t.Fatalf("host cordon without an ID: exit %d", code)
	}

	alone := runServer(t, server.Options{}, nil)
	if code, _, errs := berth(t, "", "--server", alone, "--password", "opw", "get", "hosts"); code == 0 || !strings.Contains(errs, "not part of a fleet") {
		t.Fatalf("get hosts without a fleet: %d %q", code, errs)
	}
}
