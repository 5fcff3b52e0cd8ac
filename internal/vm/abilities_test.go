package vm

import "testing"

// complete has exactly Complete's methods.
type complete struct{ Complete }

// TestComplete: Complete embeds every ability's interface, so that a
// driver asserting it at compile time offers all of AllAbilities.
func TestComplete(t *testing.T) {
	for _, a := range AllAbilities {
		if !Implements(complete{}, a) {
			t.Errorf("Complete lacks %s", a)
		}
	}
}
