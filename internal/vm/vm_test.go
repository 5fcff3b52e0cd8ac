package vm

import "testing"

func TestNameOwner(t *testing.T) {
	for _, dep := range []string{"web", "my-app", "a-b-c", "x.y"} {
		n := Name(dep, 0xdeadbeef)
		got, ok := ParseName(n)
		if !ok || got != dep {
			t.Errorf("ParseName(%q) = %q, %v; want %q", n, got, ok, dep)
		}
	}
	if n := Name("w", 1<<60|5); n != "berth-w-000000000005" {
		t.Errorf("Name = %q", n)
	}
	for _, bad := range []string{"web-000000000001", "berth-", "berth-web", "berth--000000000001", "berth-web-00000000000g", "berth-web-0001"} {
		if d, ok := ParseName(bad); ok {
			t.Errorf("ParseName(%q) = %q, want not owned", bad, d)
		}
		if o, ok := OwnerFromName(bad); ok {
			t.Errorf("OwnerFromName(%q) = %v, want none", bad, o)
		}
	}
	if !StateExited.Terminal() || StateRunning.Terminal() {
		t.Error("Terminal")
	}
}

// TestOwner: a Computer's sandbox names carry ComputerPrefix; replicas of an
// older berth (no recorded owner) get the owner their name implies, and a
// recorded owner wins over the name.
func TestOwner(t *testing.T) {
	c := Owner{Kind: OwnerComputer, ID: "desk"}
	d := Owner{Kind: OwnerDeployment, ID: "web"}
	for _, o := range []Owner{c, d} {
		n := o.Name(7)
		if got, ok := OwnerFromName(n); !ok || got != o {
			t.Errorf("OwnerFromName(%q) = %v, %v; want %v", n, got, ok, o)
		}
		if got := ResolveOwner(Owner{}, n); got != o {
			t.Errorf("ResolveOwner(zero, %q) = %v, want %v", n, got, o)
		}
	}
	if n := c.Name(7); n != "berth-cmp_desk-000000000007" {
		t.Errorf("Computer sandbox name = %q", n)
	}
	if got := ResolveOwner(d, c.Name(7)); got != d {
		t.Errorf("ResolveOwner(%v, a Computer's name) = %v: the recorded owner must win", d, got)
	}
	if got, _ := OwnerFromName(Name("cmp_", 1)); got != (Owner{Kind: OwnerDeployment, ID: "cmp_"}) {
		t.Errorf("OwnerFromName of a bare prefix = %v", got)
	}
}

// TestUserAgentFlag: the agent's --user value, groups comma-separated.
func TestUserAgentFlag(t *testing.T) {
	for u, want := range map[*User]string{
		{UID: 1000, GID: 1000}:                      "1000:1000",
		{UID: 1001, GID: 1002, Groups: []uint32{3}}: "1001:1002:3",
		{UID: 1, GID: 2, Groups: []uint32{3, 4}}:    "1:2:3,4",
	} {
		if got := u.AgentFlag(); got != want {
			t.Errorf("AgentFlag(%+v) = %q, want %q", *u, got, want)
		}
	}
}
