package placement_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/berth-dev/berth/internal/fleet/placement"
)

func hostsOf(ids ...string) []placement.Host {
	var hs []placement.Host
	for _, id := range ids {
		hs = append(hs, placement.Host{ID: id, Drivers: []string{"process"}, State: placement.Active, CPUMillis: 4000, MemoryBytes: 8 << 30, MaxActive: 10})
	}
	return hs
}

func req(unit, group string) placement.Request {
	return placement.Request{Unit: unit, Group: group, Driver: "process", CPUMillis: 100, MemoryBytes: 64 << 20}
}

// where maps unit → host.
func where(as []placement.Assignment) map[string]string {
	m := map[string]string{}
	for _, a := range as {
		m[a.Unit] = a.Host
	}
	return m
}

func reasons(us []placement.Unplaced) map[string]placement.Code {
	m := map[string]placement.Code{}
	for _, u := range us {
		m[u.Unit] = u.Code
	}
	return m
}

func TestOnlyActiveHosts(t *testing.T) {
	hs := hostsOf("a", "b", "c")
	hs[0].State = placement.Cordoned
	hs[1].State = placement.Draining
	as, un := placement.Place(hs, []placement.Request{req("u1", ""), req("u2", "")}, nil)
	if w := where(as); w["u1"] != "c" || w["u2"] != "c" || len(un) != 0 {
		t.Fatalf("placed %v, unplaced %v: want both on c", w, un)
	}
	hs[2].State = placement.Cordoned
	as, un = placement.Place(hs, []placement.Request{req("u1", "")}, nil)
	if len(as) != 0 || reasons(un)["u1"] != placement.NoHost {
		t.Fatalf("no active host: placed %v, unplaced %+v", as, un)
	}
}

func TestDriverRequired(t *testing.T) {
	hs := hostsOf("a", "b")
	hs[1].Drivers = []string{"process", "firecracker"}
	r := req("vm", "")
	r.Driver = "firecracker"
	as, _ := placement.Place(hs, []placement.Request{r}, nil)
	if where(as)["vm"] != "b" {
		t.Fatalf("placed %v, want vm on b", as)
	}
	r.Driver = "libvirt"
	as, un := placement.Place(hs, []placement.Request{r}, nil)
	if len(as) != 0 || reasons(un)["vm"] != placement.DriverMissing {
		t.Fatalf("placed %v, unplaced %+v: want driver-missing", as, un)
	}
}

func TestCapacityAndHeadroom(t *testing.T) {
	hs := hostsOf("a")
	hs[0].MaxActive, hs[0].ReservedHeadroom = 3, 1 // two units
	var reqs []placement.Request
	for i := range 3 {
		reqs = append(reqs, req(fmt.Sprintf("u%d", i), ""))
	}
	as, un := placement.Place(hs, reqs, nil)
	if len(as) != 2 || len(un) != 1 || un[0].Unit != "u2" || un[0].Code != placement.NoCapacity {
		t.Fatalf("placed %v, unplaced %+v: want two placed, u2 without room", as, un)
	}
	// CPU and memory bound too, with the host's load counted.
	hs = hostsOf("a")
	hs[0].Load = placement.Load{CPUMillis: 3900}
	big := req("big", "")
	big.CPUMillis = 200
	if as, un := placement.Place(hs, []placement.Request{big}, nil); len(as) != 0 || reasons(un)["big"] != placement.NoCapacity {
		t.Fatalf("cpu: placed %v, unplaced %+v", as, un)
	}
	hs[0].Load = placement.Load{}
	big.MemoryBytes = 9 << 30
	big.CPUMillis = 1
	if as, un := placement.Place(hs, []placement.Request{big}, nil); len(as) != 0 || reasons(un)["big"] != placement.NoCapacity {
		t.Fatalf("memory: placed %v, unplaced %+v", as, un)
	}
	// Headroom equal to MaxActive: nothing runs there.
	hs = hostsOf("a")
	hs[0].MaxActive, hs[0].ReservedHeadroom = 2, 2
	if as, _ := placement.Place(hs, []placement.Request{req("u", "")}, nil); len(as) != 0 {
		t.Fatalf("placed %v on a host whose headroom is all of it", as)
	}
	// Zero capacity means no limit.
	hs = []placement.Host{{ID: "z", Drivers: []string{"process"}}}
	reqs = nil
	for i := range 50 {
		reqs = append(reqs, req(fmt.Sprintf("u%02d", i), ""))
	}
	if as, un := placement.Place(hs, reqs, nil); len(as) != 50 || len(un) != 0 {
		t.Fatalf("unlimited host: %d placed, unplaced %+v", len(as), un)
	}
}

func TestPinned(t *testing.T) {
	hs := hostsOf("a", "b", "c", "d")
	hs[1].State = placement.Cordoned
	hs[2].Drivers = []string{"other"}
	hs[3].MaxActive = 1
	pin := func(unit, host string) placement.Request {
		r := req(unit, "")
		r.Host = host
		return r
	}
	reqs := []placement.Request{
		pin("ok", "a"), pin("gone", "zz"), pin("cordoned", "b"), pin("nodriver", "c"),
		pin("d1", "d"), pin("d2", "d"),
	}
	as, un := placement.Place(hs, reqs, nil)
	w, r := where(as), reasons(un)
	if w["ok"] != "a" || w["d1"] != "d" || len(as) != 2 {
		t.Fatalf("placed %v", w)
	}
	want := map[string]placement.Code{"gone": placement.UnknownHost, "cordoned": placement.HostNotActive, "nodriver": placement.DriverMissing, "d2": placement.NoCapacity}
	if fmt.Sprint(r) != fmt.Sprint(want) {
		t.Fatalf("unplaced %+v, want %v", un, want)
	}
	for _, u := range un {
		if u.Reason == "" {
			t.Errorf("%s unplaced without a reason", u.Unit)
		}
	}
	// A pinned unit already on its cordoned host stays.
	as, un = placement.Place(hs, []placement.Request{pin("cordoned", "b")}, map[string]string{"cordoned": "b"})
	if where(as)["cordoned"] != "b" || len(un) != 0 {
		t.Fatalf("pinned unit on its cordoned host: placed %v, unplaced %+v", as, un)
	}
	// Pinned units are placed before the others take the room.
	hs = hostsOf("a")
	hs[0].MaxActive = 1
	as, _ = placement.Place(hs, []placement.Request{req("a-free", ""), pin("z-pinned", "a")}, nil)
	if w := where(as); w["z-pinned"] != "a" || len(w) != 1 {
		t.Fatalf("placed %v: want the pinned unit to get the last room", w)
	}
}

func TestSpread(t *testing.T) {
	hs := hostsOf("a", "b", "c")
	var reqs []placement.Request
	for i := range 6 {
		reqs = append(reqs, req(fmt.Sprintf("web/%d", i), "web"))
	}
	as, _ := placement.Place(hs, reqs, nil)
	per := map[string]int{}
	for _, a := range as {
		per[a.Host]++
	}
	if per["a"] != 2 || per["b"] != 2 || per["c"] != 2 {
		t.Fatalf("6 replicas over 3 hosts: %v", per)
	}
	// Spread wins over free capacity: b is nearly full, yet takes the
	// second replica rather than doubling up on a.
	hs = hostsOf("a", "b")
	hs[1].Load = placement.Load{CPUMillis: 3000}
	as, _ = placement.Place(hs, []placement.Request{req("g/0", "g"), req("g/1", "g")}, nil)
	if w := where(as); w["g/0"] == w["g/1"] {
		t.Fatalf("two replicas on one host: %v", w)
	}
}

func TestImageLocality(t *testing.T) {
	hs := hostsOf("a", "b", "c")
	hs[2].Images = []string{"nginx:1"}
	hs[2].Load = placement.Load{CPUMillis: 2000} // less free than a and b
	r := req("u", "")
	r.Image = "nginx:1"
	as, _ := placement.Place(hs, []placement.Request{r}, nil)
	if where(as)["u"] != "c" {
		t.Fatalf("placed %v: want the host with the image", as)
	}
	// Spread still comes first.
	r2 := req("g/1", "g")
	r2.Image = "nginx:1"
	r1 := req("g/0", "g")
	r1.Image = "nginx:1"
	as, _ = placement.Place(hs, []placement.Request{r1, r2}, nil)
	if w := where(as); w["g/0"] != "c" || w["g/1"] == "c" {
		t.Fatalf("placed %v: want one replica on c, the other elsewhere", w)
	}
}

func TestMostFreeAndTies(t *testing.T) {
	hs := hostsOf("a", "b", "c")
	hs[0].Load = placement.Load{CPUMillis: 1000}
	hs[2].Load = placement.Load{MemoryBytes: 1 << 30}
	as, _ := placement.Place(hs, []placement.Request{req("u", "")}, nil)
	if where(as)["u"] != "b" {
		t.Fatalf("placed %v: want b, the freest", as)
	}
	// Equal hosts: the lowest id; and the answer does not depend on the
	// order of the input.
	hs = hostsOf("c", "a", "b")
	as, _ = placement.Place(hs, []placement.Request{req("u", "")}, nil)
	if where(as)["u"] != "a" {
		t.Fatalf("placed %v: want a, the lowest id", as)
	}
	// Hosts that declare no capacity: the one with the fewest units.
	hs = []placement.Host{{ID: "a", Drivers: []string{"process"}}, {ID: "b", Drivers: []string{"process"}, Load: placement.Load{Units: 1}}}
	as, _ = placement.Place(hs, []placement.Request{req("u1", ""), req("u2", ""), req("u3", "")}, nil)
	if w := where(as); w["u1"] != "a" || w["u2"] != "a" || w["u3"] != "b" {
		t.Fatalf("placed %v over hosts without limits: want a, a (a tie, the lower id), b", w)
	}
	var reqs []placement.Request
	for i := range 40 {
		reqs = append(reqs, req(fmt.Sprintf("d%d/%d", i%7, i), fmt.Sprintf("d%d", i%7)))
	}
	first := fmt.Sprint(placement.Place(hostsOf("a", "b", "c", "d", "e"), reqs, nil))
	for range 5 {
		hs := hostsOf("a", "b", "c", "d", "e")
		rand.Shuffle(len(hs), func(i, j int) { hs[i], hs[j] = hs[j], hs[i] })
		rs := append([]placement.Request(nil), reqs...)
		rand.Shuffle(len(rs), func(i, j int) { rs[i], rs[j] = rs[j], rs[i] })
		if got := fmt.Sprint(placement.Place(hs, rs, nil)); got != first {
			t.Fatalf("another order of the input gave another answer:\n%s\n%s", got, first)
		}
	}
}

func TestKeepExisting(t *testing.T) {
	hs := hostsOf("a", "b", "c")
	// Everything on c, which a fresh placement would not choose: it
	// stays, even though spread would prefer otherwise.
	cur := map[string]string{"web/0": "c", "web/1": "c"}
	as, _ := placement.Place(hs, []placement.Request{req("web/0", "web"), req("web/1", "web"), req("web/2", "web")}, cur)
	w := where(as)
	if w["web/0"] != "c" || w["web/1"] != "c" || w["web/2"] == "c" {
		t.Fatalf("placed %v: want the two kept on c, the new one elsewhere", w)
	}
	for _, a := range as {
		if a.Kept != (a.Unit != "web/2") {
			t.Errorf("%s kept=%v", a.Unit, a.Kept)
		}
	}
	// A unit on a cordoned host stays; on a draining or vanished one it
	// moves; one whose host lost its driver moves.
	hs[0].State = placement.Cordoned
	hs[1].State = placement.Draining
	cur = map[string]string{"x": "a", "y": "b", "z": "gone"}
	as, _ = placement.Place(hs, []placement.Request{req("x", ""), req("y", ""), req("z", "")}, cur)
	if w := where(as); w["x"] != "a" || w["y"] != "c" || w["z"] != "c" {
		t.Fatalf("placed %v", w)
	}
	hs[0].Drivers = nil
	as, un := placement.Place(hs, []placement.Request{req("x", "")}, map[string]string{"x": "a"})
	if where(as)["x"] != "c" || len(un) != 0 {
		t.Fatalf("placed %v, unplaced %v: want x moved to c", as, un)
	}
	// A host overfull with kept units (its capacity shrank) moves the
	// excess, in unit order.
	hs = hostsOf("a", "b")
	hs[0].MaxActive = 1
	as, _ = placement.Place(hs, []placement.Request{req("p", ""), req("q", "")}, map[string]string{"p": "a", "q": "a"})
	if w := where(as); w["p"] != "a" || w["q"] != "b" {
		t.Fatalf("placed %v", w)
	}
}

func TestInvalid(t *testing.T) {
	hs := hostsOf("a", "", "a") // the empty and the repeated host are ignored
	reqs := []placement.Request{req("", ""), req("u", ""), req("u", ""), {Unit: "nod"}, {Unit: "neg", Driver: "process", CPUMillis: -1}}
	as, un := placement.Place(hs, reqs, nil)
	if len(as) != 1 || as[0].Unit != "u" || as[0].Host != "a" {
		t.Fatalf("placed %v", as)
	}
	if len(un) != 4 {
		t.Fatalf("unplaced %+v: want 4 invalid", un)
	}
	for _, u := range un {
		if u.Code != placement.Invalid || u.Reason == "" {
			t.Errorf("unplaced %+v", u)
		}
	}
	if as, un := placement.Place(nil, nil, nil); len(as)+len(un) != 0 {
		t.Fatal("empty input gave an answer")
	}
}
