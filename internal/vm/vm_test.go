package vm

import "testing"

func TestNameOwner(t *testing.T) {
	for _, dep := range []string{"web", "my-app", "a-b-c", "x.y"} {
		n := Name(dep, 0xdeadbeef)
		got, ok := Owner(n)
		if !ok || got != dep {
			t.Errorf("Owner(%q) = %q, %v; want %q", n, got, ok, dep)
		}
	}
	if n := Name("w", 1<<60|5); n != "berth-w-000000000005" {
		t.Errorf("Name = %q", n)
	}
	for _, bad := range []string{"web-000000000001", "berth-", "berth-web", "berth--000000000001", "berth-web-00000000000g", "berth-web-0001"} {
		if d, ok := Owner(bad); ok {
			t.Errorf("Owner(%q) = %q, want not owned", bad, d)
		}
	}
	if !StateExited.Terminal() || StateRunning.Terminal() {
		t.Error("Terminal")
	}
}
