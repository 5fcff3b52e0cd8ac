package namespaces

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/store"
)

func TestDomains(t *testing.T) {
	st, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	s, ctx := New(st), context.Background()
	ds := func(d ...string) *[]string { return &d }
	if _, _, err := s.Declare(ctx, apitype.NamespaceSpec{Name: "team-a", Domains: ds("A.test.", "a.example")}); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		domains *[]string
		field   string // "" for a conflict
	}{
		{ds("a.test"), ""},
		{ds("x.a.test"), ""},
		{ds("test"), ""},
		{ds("*.b.test"), "domains[0]"},
		{ds("b.test", "b.test"), "domains[1]"},
		{ds("b.test", "x.b.test"), "domains[1]"},
		{ds("b.test:80"), "domains[0]"},
		{ds(""), "domains[0]"},
	} {
		_, _, err := s.Declare(ctx, apitype.NamespaceSpec{Name: "team-b", Domains: tt.domains})
		var fe *FieldError
		switch {
		case tt.field == "" && !errors.Is(err, ErrConflict):
			t.Errorf("%q: %v, want a conflict", *tt.domains, err)
		case tt.field != "" && (!errors.As(err, &fe) || fe.Field != tt.field):
			t.Errorf("%q: %v, want a %s error", *tt.domains, err, tt.field)
		}
	}
	if _, _, err := s.Declare(ctx, apitype.NamespaceSpec{Name: "team-a", Description: "kept"}); err != nil {
		t.Fatal(err)
	}
	m, err := s.Domains(ctx)
	if err != nil || !slices.Equal(m["team-a"], []string{"a.test", "a.example"}) || len(m) != 1 {
		t.Errorf("Domains = %v, %v", m, err)
	}
}
