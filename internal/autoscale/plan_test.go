package autoscale

import (
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestMakePlan(t *testing.T) {
	ago := func(d time.Duration) time.Time { return t0.Add(-d) }
	idle := func(ids ...string) []Replica {
		var rs []Replica
		for _, id := range ids {
			rs = append(rs, Replica{ID: id, LastActive: ago(time.Minute)})
		}
		return rs
	}
	inBackoff := Backoff{}.Fail(t0)
	expired := Backoff{}.Fail(t0.Add(-time.Hour))
	tests := []struct {
		name    string
		desired int
		ready   []Replica
		pending int
		backoff Backoff
		want    Plan
	}{
		{"empty pool, want 1", 1, nil, 0, Backoff{}, Plan{Create: 1}},
		{"pending counts as live", 3, idle("a"), 1, Backoff{}, Plan{Create: 1}},
		{"enough pending", 3, idle("a"), 2, Backoff{}, Plan{}},
		{"backoff holds creates", 3, idle("a"), 0, inBackoff, Plan{}},
		{"expired backoff does not", 3, idle("a"), 0, expired, Plan{Create: 2}},
		{"steady", 2, idle("a", "b"), 0, Backoff{}, Plan{}},
		{"draining replicas are not live", 2,
			[]Replica{{ID: "a"}, {ID: "b", Draining: true}}, 0, Backoff{}, Plan{Create: 1}},
		{"draining replicas are not drained again", 1,
			[]Replica{{ID: "a", InFlight: 3}, {ID: "b", Draining: true}}, 0, Backoff{}, Plan{}},
		{"no drain to make room for pending", 3, idle("a", "b", "c"), 2, Backoff{}, Plan{}},
		{"surplus ready drained even with pending", 1, idle("a", "b"), 1, Backoff{}, Plan{Drain: []string{"a"}}},
		{"scale to zero drains all", 0, idle("b", "a"), 0, Backoff{}, Plan{Drain: []string{"a", "b"}}},
		{"backoff does not stop drains", 0, idle("a"), 0, inBackoff, Plan{Drain: []string{"a"}}},
		{"negative desired is zero", -2, idle("a"), 0, Backoff{}, Plan{Drain: []string{"a"}}},
		{"negative pending is zero", 2, idle("a"), -5, Backoff{}, Plan{Create: 1}},
		{"idlest first", 2, []Replica{
			{ID: "busy", InFlight: 2, LastActive: ago(time.Hour)},
			{ID: "recent", LastActive: ago(time.Second)},
			{ID: "older", LastActive: ago(time.Minute)},
			{ID: "never"},
			{ID: "one", InFlight: 1, LastActive: ago(2 * time.Hour)},
		}, 0, Backoff{}, Plan{Drain: []string{"never", "older", "recent"}}},
		{"ties broken by ID", 1, []Replica{
			{ID: "c", LastActive: t0}, {ID: "a", LastActive: t0}, {ID: "b", LastActive: t0},
		}, 0, Backoff{}, Plan{Drain: []string{"a", "b"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := slices.Clone(tt.ready)
			got := MakePlan(tt.desired, tt.ready, tt.pending, tt.backoff, t0)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("MakePlan(%d, %v, %d) mismatch (-want +got):\n%s", tt.desired, tt.ready, tt.pending, diff)
			}
			if !slices.Equal(before, tt.ready) {
				t.Errorf("MakePlan reordered its input: %v, was %v", tt.ready, before)
			}
		})
	}
}

func TestDrainDone(t *testing.T) {
	const timeout = 30 * time.Second
	tests := []struct {
		name         string
		inFlight     int
		lastActive   time.Time
		timeout      time.Duration
		done, forced bool
	}{
		{"no requests", 0, t0, timeout, true, false},
		{"negative in flight", -1, t0, timeout, true, false},
		{"busy, recently active", 2, t0.Add(-10 * time.Second), timeout, false, false},
		{"busy, just inside timeout", 2, t0.Add(-timeout + time.Nanosecond), timeout, false, false},
		{"busy, timeout reached", 2, t0.Add(-timeout), timeout, true, true},
		{"busy, never active", 1, time.Time{}, timeout, true, true},
		{"zero timeout forces", 1, t0, 0, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			done, forced := DrainDone(tt.inFlight, tt.lastActive, tt.timeout, t0)
			if done != tt.done || forced != tt.forced {
				t.Errorf("DrainDone(%d, %v, %v) = %v, %v; want %v, %v",
					tt.inFlight, t0.Sub(tt.lastActive), tt.timeout, done, forced, tt.done, tt.forced)
			}
		})
	}
}

func TestBootExpired(t *testing.T) {
	tests := []struct {
		age, timeout time.Duration
		want         bool
	}{
		{299 * time.Second, 300 * time.Second, false},
		{300 * time.Second, 300 * time.Second, true},
		{time.Hour, 300 * time.Second, true},
		{24 * time.Hour, 0, false},
		{24 * time.Hour, -time.Second, false},
		{-time.Second, time.Second, false}, // created in the future (clock step)
	}
	for _, tt := range tests {
		if got := BootExpired(t0.Add(-tt.age), tt.timeout, t0); got != tt.want {
			t.Errorf("BootExpired(age %v, timeout %v) = %v, want %v", tt.age, tt.timeout, got, tt.want)
		}
	}
}
