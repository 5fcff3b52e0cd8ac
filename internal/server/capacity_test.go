package server

import (
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/apitype/computertype"

	"github.com/berth-dev/berth/internal/computer"
)

// TestComputerCapacityOptions: the host's Computer capacity and the
// recycling age are server options (berth serve's --computer-* flags),
// admission follows them, and GET /computers/hosts/capacity shows them
// (issue 10: they were set only in tests).
func TestComputerCapacityOptions(t *testing.T) {
	o := Options{
		DataDir:              t.TempDir(),
		ComputerCapacity:     computer.HostCapacity{MaxActive: 2, ReservedHeadroom: 1},
		ComputerRecycleAfter: time.Hour,
	}
	testOptions(&o)
	t.Cleanup(func() { stopReplicas(t, o.DataDir) })
	n := startNode(t, o)
	var cv computertype.Capacity
	n.must(200, "GET", "/computers/hosts/capacity", "", "", &cv)
	if cv.Hosts["local"] != (computer.HostCapacity{MaxActive: 2, ReservedHeadroom: 1}) || len(cv.Hosts) != 1 || cv.FleetLimit != 1 || cv.RecycleAfterSecs != 3600 {
		t.Errorf("capacity %+v", cv)
	}
	r := n.call(nil, "GET", "/computers/hosts/capacity", "", "")
	var raw map[string]json.RawMessage
	json.Unmarshal(r.body, &raw)
	if string(raw["hosts"]) != `{"local":{"maxActive":2,"reservedHeadroom":1}}` {
		t.Errorf("hosts %s: want the contract's hostCapacityRegistrySchema", raw["hosts"])
	}
	// One slot: the second Computer to start is refused.
	n.must(201, "POST", "/computers", "", `{"id":"one","start":true}`, nil)
	if r := n.call(nil, "POST", "/computers", "", `{"id":"two","start":true}`); r.code != 429 || !strings.Contains(string(r.body), "limit 1") {
		t.Errorf("second start: %s, want 429 at limit 1", r)
	}
	n.call(nil, "DELETE", "/computers/one", "", "")
	n.call(nil, "DELETE", "/computers/two", "", "")

	// Without the options: the registry is empty and the default applies.
	d := startNode(t, Options{})
	cv = computertype.Capacity{}
	d.must(200, "GET", "/computers/hosts/capacity", "", "", &cv)
	if len(cv.Hosts) != 0 || cv.FleetLimit != computer.DefaultFleetLimit || cv.RecycleAfterSecs != 0 {
		t.Errorf("default capacity %+v", cv)
	}
	// A capacity the contract's schema refuses stops the server.
	for _, c := range []computer.HostCapacity{{MaxActive: 2, ReservedHeadroom: 2}, {MaxActive: -1}, {ReservedHeadroom: 1}} {
		o := Options{ProxyAddr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0", DataDir: t.TempDir(), ComputerCapacity: c, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
		if s, err := New(t.Context(), o); err == nil || !strings.Contains(err.Error(), "Computer capacity") {
			if s != nil {
				t.Fatal("started") // listeners would leak; stop here
			}
			t.Errorf("capacity %+v: %v, want refused", c, err)
		}
	}
}
