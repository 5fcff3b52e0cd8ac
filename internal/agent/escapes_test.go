package agent

import "testing"

// TestEscapesRoot pins the one lexical ".." check that the agent's file
// endpoints and the Computer API's workPath share.
func TestEscapesRoot(t *testing.T) {
	for p, want := range map[string]bool{
		"": false, ".": false, "a": false, "/a/b": false, "a/../b": false, "a/b/../..": false,
		"..": true, "../a": true, "/..": true, "a/../../b": true, "./../a": true, "a/../..": true,
	} {
		if got := EscapesRoot(p); got != want {
			t.Errorf("EscapesRoot(%q) = %v, want %v", p, got, want)
		}
	}
}
