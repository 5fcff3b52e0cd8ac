package store

import (
	"strconv"
	"testing"
)

func TestSecurityAlerts(t *testing.T) {
	s, dir := openTest(t)
	ctx := t.Context()
	alert := func(id int64, dep string) SecurityAlert {
		return SecurityAlert{ID: id, Rule: "web.sqli", Severity: "high", Deployment: dep, Namespace: "ns",
			LastTs: 1000 + id, JSON: []byte(`{"id":` + strconv.FormatInt(id, 10) + `}`)}
	}
	if got, last, err := s.SecurityAlerts(ctx); err != nil || len(got) != 0 || last != 0 {
		t.Fatalf("empty store: %v, %d, %v", got, last, err)
	}
	if err := s.PutSecurityAlerts(ctx, []SecurityAlert{alert(1, "a"), alert(2, ""), alert(3, "b")}, 0); err != nil {
		t.Fatal(err)
	}
	// A fold rewrites an alert in place.
	a2 := alert(2, "")
	a2.LastTs, a2.JSON = 9999, []byte(`{"id":2,"count":5}`)
	if err := s.PutSecurityAlerts(ctx, []SecurityAlert{a2, alert(4, "a")}, 3); err != nil {
		t.Fatal(err)
	}
	got, last, err := s.SecurityAlerts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].ID != 2 || got[1].ID != 3 || got[2].ID != 4 || last != 4 {
		t.Fatalf("after trim to 3: %+v, last %d; want ids 2,3,4 (the oldest evicted), last 4", got, last)
	}
	if got[0].LastTs != 9999 || string(got[0].JSON) != `{"id":2,"count":5}` || got[0].Namespace != "ns" {
		t.Errorf("folded alert = %+v", got[0])
	}
	if err := s.PutSecurityAlerts(ctx, []SecurityAlert{{ID: 5, JSON: []byte("{")}}, 0); err == nil {
		t.Error("invalid JSON accepted")
	}
	if err := s.PutSecurityAlerts(ctx, []SecurityAlert{{ID: 0, JSON: []byte("{}")}}, 0); err == nil {
		t.Error("id 0 accepted")
	}
	// Trimming to one keeps the newest; the sequence survives a reopen
	// even past alerts that are gone.
	if err := s.PutSecurityAlerts(ctx, []SecurityAlert{alert(7, "")}, 1); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s2, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	got, last, err = s2.SecurityAlerts(ctx)
	if err != nil || len(got) != 1 || got[0].ID != 7 || last != 7 {
		t.Fatalf("after reopen: %+v, %d, %v", got, last, err)
	}
}
