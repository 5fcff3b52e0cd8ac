package metrics

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestDeploymentObserve(t *testing.T) {
	d := NewDeployment()
	d.ObserveRequest(200, 3*time.Millisecond)
	d.ObserveRequest(200, 1500*time.Microsecond)
	d.ObserveRequest(503, 20*time.Second)
	d.ObserveError()
	d.ObserveColdStart(1500 * time.Millisecond)
	d.Autoscale.VMsCreated.Add(2)
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	d.Autoscale.RecordCreateFailure("daemon said no", at)

	s := d.Snapshot()
	if want := (StatusCountsSnapshot{Total: 4, C2xx: 2, C5xx: 1, Errors: 1}); s.Requests != want {
		t.Errorf("Requests = %+v, want %+v", s.Requests, want)
	}
	if s.LatencyMs.Count != 3 || s.LatencyMs.Sum != 3+1.5+20000 {
		t.Errorf("LatencyMs count, sum = %d, %v; want 3, 20004.5 (errors are not timed)", s.LatencyMs.Count, s.LatencyMs.Sum)
	}
	if got := len(s.LatencyMs.Buckets); got != len(LatencyMsBounds)+1 {
		t.Errorf("LatencyMs has %d buckets, want %d", got, len(LatencyMsBounds)+1)
	}
	if s.ColdStartS.Count != 1 || s.ColdStartS.Sum != 1.5 {
		t.Errorf("ColdStartS count, sum = %d, %v; want 1, 1.5", s.ColdStartS.Count, s.ColdStartS.Sum)
	}
	wantA := AutoscaleSnapshot{VMsCreated: 2, CreateFailures: 1, LastCreateError: "daemon said no", LastCreateErrorAt: at}
	if diff := cmp.Diff(wantA, s.Autoscale); diff != "" {
		t.Errorf("Autoscale mismatch (-want +got):\n%s", diff)
	}
}

func TestAutoscaleAddKeepsLatestError(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	older := AutoscaleSnapshot{CreateFailures: 1, LastCreateError: "old", LastCreateErrorAt: t0}
	newer := AutoscaleSnapshot{CreateFailures: 2, LastCreateError: "new", LastCreateErrorAt: t0.Add(time.Minute)}
	none := AutoscaleSnapshot{VMsCreated: 1}
	tests := []struct {
		name string
		a, b AutoscaleSnapshot
		want string
	}{
		{"newer second", older, newer, "new"},
		{"newer first", newer, older, "new"},
		{"none second", older, none, "old"},
		{"none first", none, older, "old"},
		{"neither", none, none, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.a.Add(tt.b)
			if got.LastCreateError != tt.want {
				t.Errorf("LastCreateError = %q, want %q", got.LastCreateError, tt.want)
			}
			if got.CreateFailures != tt.a.CreateFailures+tt.b.CreateFailures {
				t.Errorf("CreateFailures = %d, want %d", got.CreateFailures, tt.a.CreateFailures+tt.b.CreateFailures)
			}
		})
	}
}

func TestRegistryGetLookupDelete(t *testing.T) {
	var r Registry // zero value is usable
	if _, ok := r.Lookup("a"); ok {
		t.Fatal("Lookup on an empty registry found something")
	}
	if r.Len() != 0 {
		t.Fatalf("Lookup created an entry: Len = %d", r.Len())
	}
	a := r.Get("a")
	if r.Get("a") != a {
		t.Error("second Get returned a different *Deployment")
	}
	if got, ok := r.Lookup("a"); !ok || got != a {
		t.Errorf("Lookup(a) = %p, %v; want %p, true", got, ok, a)
	}
	r.Get("c")
	r.Get("b")
	var ids []string
	r.Each(func(id string, _ *Deployment) { ids = append(ids, id) })
	if diff := cmp.Diff([]string{"a", "b", "c"}, ids); diff != "" {
		t.Errorf("Each order (-want +got):\n%s", diff)
	}
	r.Delete("a")
	r.Delete("nope")
	if _, ok := r.Lookup("a"); ok {
		t.Error("a still present after Delete")
	}
	if r.Len() != 2 {
		t.Errorf("Len = %d, want 2", r.Len())
	}
	if r.Get("a") == a {
		t.Error("Get after Delete returned the old *Deployment")
	}
}

func TestRegistryConcurrentGet(t *testing.T) {
	r := NewRegistry()
	const goroutines = 16
	got := make([]*Deployment, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range 100 {
				d := r.Get(fmt.Sprintf("dep-%d", i%10))
				d.ObserveRequest(200, time.Millisecond)
			}
			got[g] = r.Get("dep-0")
		})
	}
	wg.Wait()
	for g, d := range got {
		if d != got[0] {
			t.Fatalf("goroutine %d got a different dep-0", g)
		}
	}
	if g := r.Global(); g.Requests.C2xx != goroutines*100 {
		t.Errorf("Global 2xx = %d, want %d (no observation lost to a racing create)", g.Requests.C2xx, goroutines*100)
	}
	if r.Len() != 10 {
		t.Errorf("Len = %d, want 10", r.Len())
	}
}

func TestRegistryGlobalSinceStart(t *testing.T) {
	r := NewRegistry()

	empty := r.Global()
	if empty.Requests.Total != 0 || len(empty.LatencyMs.Buckets) != len(LatencyMsBounds)+1 || len(empty.ColdStartS.Buckets) != len(ColdStartSecBounds)+1 {
		t.Errorf("empty Global = %+v; want zero counts with the standard buckets", empty)
	}

	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	a, b := r.Get("a"), r.Get("b")
	for range 10 {
		a.ObserveRequest(200, 10*time.Millisecond)
	}
	a.ObserveColdStart(2 * time.Second)
	a.Autoscale.RecordCreateFailure("a failed later", t0.Add(time.Hour))
	for range 5 {
		b.ObserveRequest(404, 100*time.Millisecond)
	}
	b.ObserveError()
	b.Autoscale.ScaleUpEvents.Add(3)
	b.Autoscale.RecordCreateFailure("b failed first", t0)

	before := r.Global()
	r.Delete("a")
	after := r.Global()
	if diff := cmp.Diff(before, after); diff != "" {
		t.Errorf("Global changed when a deployment was deleted (-before +after):\n%s", diff)
	}

	wantReq := StatusCountsSnapshot{Total: 16, C2xx: 10, C4xx: 5, Errors: 1}
	if after.Requests != wantReq {
		t.Errorf("Global requests = %+v, want %+v", after.Requests, wantReq)
	}
	if after.LatencyMs.Count != 15 || after.LatencyMs.Sum != 10*10+5*100 {
		t.Errorf("Global latency count, sum = %d, %v; want 15, 600", after.LatencyMs.Count, after.LatencyMs.Sum)
	}
	if after.ColdStartS.Count != 1 {
		t.Errorf("Global cold starts = %d, want 1", after.ColdStartS.Count)
	}
	if after.Autoscale.ScaleUpEvents != 3 || after.Autoscale.CreateFailures != 2 || after.Autoscale.LastCreateError != "a failed later" {
		t.Errorf("Global autoscale = %+v; want 3 scale-ups, 2 failures, last error from a", after.Autoscale)
	}

	// A re-created "a" starts from zero; Global keeps counting.
	r.Get("a").ObserveRequest(500, time.Millisecond)
	if got := r.Get("a").Snapshot().Requests.Total; got != 1 {
		t.Errorf("re-created a has %d requests, want 1", got)
	}
	if g := r.Global(); g.Requests.Total != 17 || g.Requests.C5xx != 1 {
		t.Errorf("Global after re-create = %+v, want total 17 with one 5xx", g.Requests)
	}

	// Global's result is a copy: editing it must not change the next one.
	g := r.Global()
	*g.LatencyMs.Buckets[0].Le = -42
	g.LatencyMs.Buckets[0].Count = 1 << 40
	if g2 := r.Global(); *g2.LatencyMs.Buckets[0].Le != LatencyMsBounds[0] || g2.LatencyMs.Buckets[0].Count == 1<<40 {
		t.Error("Global shares storage between calls")
	}
}
