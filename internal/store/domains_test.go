package store

import (
	"context"
	"slices"
	"testing"
)

// TestNamespaceDomains: a namespace's domains are stored, replaced by a
// redeclaration, and read back.
func TestNamespaceDomains(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	if _, _, err := s.PutNamespace(ctx, Namespace{Name: "team-a", Domains: []string{"a.test", "a.example"}}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.PutNamespace(ctx, Namespace{Name: "team-b"}); err != nil {
		t.Fatal(err)
	}
	ns, err := s.Namespaces(ctx)
	if err != nil || len(ns) != 2 || !slices.Equal(ns[0].Domains, []string{"a.test", "a.example"}) || ns[1].Domains == nil || len(ns[1].Domains) != 0 {
		t.Fatalf("namespaces = %+v, %v", ns, err)
	}
	if _, _, err := s.PutNamespace(ctx, Namespace{Name: "team-a", Domains: []string{"a.test"}}); err != nil {
		t.Fatal(err)
	}
	if ns, _ := s.Namespaces(ctx); !slices.Equal(ns[0].Domains, []string{"a.test"}) {
		t.Errorf("after redeclare: %+v", ns[0])
	}
}
