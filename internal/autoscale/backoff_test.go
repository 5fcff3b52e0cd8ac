package autoscale

import (
	"testing"
	"time"
)

func TestBackoffDelay(t *testing.T) {
	tests := []struct {
		n    int
		want time.Duration
	}{
		{-1, 0}, {0, 0},
		{1, 30 * time.Second}, {2, 60 * time.Second}, {3, 120 * time.Second},
		{4, 240 * time.Second}, {5, 480 * time.Second}, {6, 960 * time.Second},
		{7, 1920 * time.Second}, {8, 3600 * time.Second}, {9, 3600 * time.Second},
		{64, 3600 * time.Second}, {1 << 40, 3600 * time.Second},
	}
	for _, tt := range tests {
		if got := BackoffDelay(tt.n); got != tt.want {
			t.Errorf("BackoffDelay(%d) = %v, want %v", tt.n, got, tt.want)
		}
	}
}

func TestBackoffTimeline(t *testing.T) {
	var b Backoff
	if b.Active(t0) || b.Remaining(t0) != 0 {
		t.Fatalf("zero Backoff active: %+v", b)
	}
	now := t0
	// Each failure is recorded when the previous wait has just run out.
	for n, want := range []time.Duration{30, 60, 120, 240, 480, 960, 1920, 3600, 3600, 3600} {
		want *= time.Second
		b = b.Fail(now)
		if b.Failures != n+1 {
			t.Fatalf("after %d failures: Failures = %d", n+1, b.Failures)
		}
		if got := b.Remaining(now); got != want {
			t.Fatalf("after %d failures: Remaining = %v, want %v", n+1, got, want)
		}
		if !b.Active(now.Add(want - time.Nanosecond)) {
			t.Fatalf("after %d failures: not active just before %v", n+1, want)
		}
		now = now.Add(want)
		if b.Active(now) || b.Remaining(now) != 0 {
			t.Fatalf("after %d failures: still active after %v: %+v", n+1, want, b)
		}
	}
	b = b.Fail(now).Reset()
	if b.Active(now) || b.Failures != 0 || b.Remaining(now) != 0 {
		t.Errorf("Reset left %+v", b)
	}
	if b = b.Fail(now); b.Remaining(now) != 30*time.Second {
		t.Errorf("first failure after Reset waits %v, want 30s", b.Remaining(now))
	}
}

func TestBackoffFailSaturates(t *testing.T) {
	b := Backoff{Failures: 1 << 30}.Fail(t0)
	if b.Failures != 1<<30 || b.Remaining(t0) != time.Hour {
		t.Errorf("Fail at a huge count = %+v, remaining %v", b, b.Remaining(t0))
	}
	b = Backoff{Failures: -3}.Fail(t0)
	if b.Failures != 1 || b.Remaining(t0) != 30*time.Second {
		t.Errorf("Fail from a negative count = %+v, remaining %v", b, b.Remaining(t0))
	}
}
