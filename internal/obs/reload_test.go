package obs

import (
	"context"
	"testing"
)

// TestReload: two handlers over one store (two hosts sharing it): a rule
// posted on one is evaluated by the other after Reload, and its deletion
// takes it away there; a rule that stays keeps its state.
func TestReload(t *testing.T) {
	f := newFixture(t, nil)
	other, err := NewHandler(context.Background(), f.h.o)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	a := f.do(t, "team-a", "POST", "/api/alerts", map[string]any{"deployment": "web", "threshold": 1, "webhook_url": "https://hooks.example.com/x"})
	if a.status != 201 {
		t.Fatalf("post: %d %s", a.status, a.body)
	}
	if n := len(other.rulesOf("team-a")); n != 0 {
		t.Fatalf("before Reload the other handler has %d rules", n)
	}
	if err := other.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	rules := other.rulesOf("team-a")
	if len(rules) != 1 || rules[0].WebhookURL != "https://hooks.example.com/x" {
		t.Fatalf("after Reload: %+v", rules)
	}
	other.mu.Lock()
	ru := other.rules[rules[0].ID]
	ru.firing = true
	other.mu.Unlock()
	if err := other.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	other.mu.Lock()
	kept := other.rules[rules[0].ID] == ru && ru.firing
	other.mu.Unlock()
	if !kept {
		t.Error("a Reload replaced a rule that did not change (its firing state lost)")
	}
	if d := f.do(t, "team-a", "DELETE", "/api/alerts/"+rules[0].ID, nil); d.status != 204 {
		t.Fatalf("delete: %d %s", d.status, d.body)
	}
	if err := other.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := len(other.rulesOf("team-a")); n != 0 {
		t.Errorf("after the delete and Reload the other handler has %d rules", n)
	}
}
