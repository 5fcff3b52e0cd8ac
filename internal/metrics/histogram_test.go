package metrics

import (
	"errors"
	"math"
	"slices"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func newTestHistogram(t *testing.T, bounds ...float64) *Histogram {
	t.Helper()
	h, err := NewHistogram(bounds)
	if err != nil {
		t.Fatalf("NewHistogram(%v): %v", bounds, err)
	}
	return h
}

// les flattens a snapshot's buckets to (le, cumulative count) pairs, +Inf
// for nil, so tests can compare them with cmp.
type le struct {
	Le    float64
	Count uint64
}

func les(s HistogramSnapshot) []le {
	var out []le
	for _, b := range s.Buckets {
		out = append(out, le{leOf(b), b.Count})
	}
	return out
}

func TestNewHistogramBounds(t *testing.T) {
	tests := []struct {
		name   string
		bounds []float64
		want   []float64 // ignored when err
		err    bool
	}{
		{"ascending", []float64{1, 2, 5}, []float64{1, 2, 5}, false},
		{"trailing inf dropped", []float64{1, 2, math.Inf(1)}, []float64{1, 2}, false},
		{"only inf", []float64{math.Inf(1)}, []float64{}, false},
		{"empty", nil, []float64{}, false},
		{"negative ok", []float64{-5, 0, 5}, []float64{-5, 0, 5}, false},
		{"unsorted", []float64{1, 5, 2}, nil, true},
		{"duplicate", []float64{1, 1}, nil, true},
		{"nan", []float64{1, math.NaN()}, nil, true},
		{"inner inf", []float64{1, math.Inf(1), 5}, nil, true},
		{"minus inf", []float64{math.Inf(-1), 1}, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := NewHistogram(tt.bounds)
			if tt.err {
				if !errors.Is(err, ErrBounds) {
					t.Fatalf("NewHistogram(%v) error = %v, want ErrBounds", tt.bounds, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("NewHistogram(%v): %v", tt.bounds, err)
			}
			if got := h.Bounds(); !slices.Equal(got, tt.want) {
				t.Errorf("Bounds() = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestPackageBoundsAreValid(t *testing.T) {
	for name, b := range map[string][]float64{"LatencyMsBounds": LatencyMsBounds, "ColdStartSecBounds": ColdStartSecBounds} {
		if _, err := NewHistogram(b); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestHistogramCumulativeBuckets(t *testing.T) {
	h := newTestHistogram(t, 1, 5, 10)
	for _, v := range []float64{-3, 0.5, 1, 1.01, 5, 7, 10, 11, 1e9, math.NaN()} {
		h.Observe(v)
	}
	s := h.Snapshot()
	want := []le{{1, 3}, {5, 5}, {10, 7}, {math.Inf(1), 9}}
	if diff := cmp.Diff(want, les(s)); diff != "" {
		t.Errorf("buckets mismatch (-want +got):\n%s", diff)
	}
	if s.Count != 9 {
		t.Errorf("Count = %d, want 9 (NaN ignored)", s.Count)
	}
	if wantSum := -3 + 0.5 + 1 + 1.01 + 5 + 7 + 10 + 11 + 1e9; s.Sum != wantSum {
		t.Errorf("Sum = %v, want %v", s.Sum, wantSum)
	}
	if s.Buckets[len(s.Buckets)-1].Le != nil {
		t.Errorf("last bucket Le = %v, want nil (+Inf)", *s.Buckets[len(s.Buckets)-1].Le)
	}
}

func TestSnapshotDoesNotAliasBounds(t *testing.T) {
	h := newTestHistogram(t, 1, 2)
	s := h.Snapshot()
	*s.Buckets[0].Le = 99
	if got := h.Bounds()[0]; got != 1 {
		t.Errorf("after editing a snapshot, bound 0 = %v, want 1", got)
	}
}

func TestHistogramPercentiles(t *testing.T) {
	tens := []float64{10, 20, 30, 40, 50, 60, 70, 80, 90, 100}
	tests := []struct {
		name          string
		bounds        []float64
		values        []float64
		p50, p90, p99 float64
		mean          float64
	}{
		{
			name:   "1..100 in buckets of 10",
			bounds: tens,
			values: seq(1, 100),
			p50:    50, p90: 90, p99: 99,
			mean: 50.5,
		},
		{
			name:   "all in first bucket interpolates from 0",
			bounds: []float64{10, 20},
			values: []float64{1, 2, 3, 4},
			p50:    5, p90: 9, p99: 9.9,
			mean: 2.5,
		},
		{
			name:   "tail in +Inf reports largest finite bound",
			bounds: []float64{10, 100},
			values: append(seq(1, 60), repeat(1000, 40)...),
			p50:    82, p90: 100, p99: 100, // p50: 10 + 90*(50-10)/(60-10)
			mean: (30.5*60 + 1000*40) / 100,
		},
		{
			name:   "non-positive first bound returns that bound",
			bounds: []float64{-1, 10},
			values: []float64{-5, -4, -3, -2},
			p50:    -1, p90: -1, p99: -1,
			mean: -3.5,
		},
		{
			name:   "no finite bounds",
			bounds: nil,
			values: []float64{1, 2, 3},
			p50:    0, p90: 0, p99: 0,
			mean: 2,
		},
		{
			name:   "empty",
			bounds: tens,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newTestHistogram(t, tt.bounds...)
			for _, v := range tt.values {
				h.Observe(v)
			}
			s := h.Snapshot()
			got := [4]float64{s.P50, s.P90, s.P99, s.Mean}
			want := [4]float64{tt.p50, tt.p90, tt.p99, tt.mean}
			if !cmp.Equal(got, want, cmp.Comparer(approx)) {
				t.Errorf("p50,p90,p99,mean = %v, want %v", got, want)
			}
		})
	}
}

func TestQuantileOutOfRange(t *testing.T) {
	h := newTestHistogram(t, 1)
	h.Observe(0.5)
	s := h.Snapshot()
	for _, q := range []float64{-0.1, 1.1, math.NaN()} {
		if got := s.Quantile(q); !math.IsNaN(got) {
			t.Errorf("Quantile(%v) = %v, want NaN", q, got)
		}
	}
	if got := s.Quantile(0); got != 0 {
		t.Errorf("Quantile(0) = %v, want 0", got)
	}
	if got := s.Quantile(1); got != 1 {
		t.Errorf("Quantile(1) = %v, want 1", got)
	}
}

func TestHistogramConcurrentObserve(t *testing.T) {
	h := newTestHistogram(t, LatencyMsBounds...)
	const goroutines, per = 16, 5000
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range per {
				h.Observe(float64((g + i) % 20)) // integers: the float sum stays exact
			}
		})
	}
	wg.Wait()
	s := h.Snapshot()
	if s.Count != goroutines*per {
		t.Errorf("Count = %d, want %d", s.Count, goroutines*per)
	}
	var wantSum float64
	for g := range goroutines {
		for i := range per {
			wantSum += float64((g + i) % 20)
		}
	}
	if s.Sum != wantSum {
		t.Errorf("Sum = %v, want %v", s.Sum, wantSum)
	}
	if last := s.Buckets[len(s.Buckets)-1].Count; last != s.Count {
		t.Errorf("+Inf bucket = %d, want Count %d", last, s.Count)
	}
}

func TestNilHistogram(t *testing.T) {
	var h *Histogram
	h.Observe(1) // must not panic
	if s := h.Snapshot(); s.Count != 0 || s.Buckets != nil {
		t.Errorf("nil Snapshot = %+v, want zero", s)
	}
}

func TestHistogramMerge(t *testing.T) {
	a := newTestHistogram(t, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100)
	b := newTestHistogram(t, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100)
	for _, v := range seq(1, 50) {
		a.Observe(v)
	}
	for _, v := range seq(51, 100) {
		b.Observe(v)
	}
	as, bs := a.Snapshot(), b.Snapshot()
	m, err := as.Merge(bs)
	if err != nil {
		t.Fatalf("Merge: %v", err)
	}
	if m.Count != 100 || m.Sum != 5050 {
		t.Errorf("merged Count, Sum = %d, %v; want 100, 5050", m.Count, m.Sum)
	}
	got := [4]float64{m.P50, m.P90, m.P99, m.Mean}
	if want := [4]float64{50, 90, 99, 50.5}; !cmp.Equal(got, want, cmp.Comparer(approx)) {
		t.Errorf("merged p50,p90,p99,mean = %v, want %v", got, want)
	}
	wantBuckets := []le{{10, 10}, {20, 20}, {30, 30}, {40, 40}, {50, 50}, {60, 60}, {70, 70}, {80, 80}, {90, 90}, {100, 100}, {math.Inf(1), 100}}
	if diff := cmp.Diff(wantBuckets, les(m)); diff != "" {
		t.Errorf("merged buckets (-want +got):\n%s", diff)
	}
	// Inputs are untouched and do not share storage with the result.
	if as.Count != 50 || as.Buckets[4].Count != 50 {
		t.Errorf("Merge modified its receiver: %+v", les(as))
	}
	*m.Buckets[0].Le = -1
	if *as.Buckets[0].Le != 10 {
		t.Errorf("merged snapshot shares Le storage with its input")
	}

	// The zero snapshot is the identity on both sides.
	for _, pair := range [][2]HistogramSnapshot{{{}, as}, {as, {}}} {
		id, err := pair[0].Merge(pair[1])
		if err != nil {
			t.Fatalf("Merge with zero: %v", err)
		}
		if diff := cmp.Diff(les(as), les(id)); diff != "" || id.Count != as.Count || id.Sum != as.Sum || id.P50 != as.P50 {
			t.Errorf("Merge with zero changed the snapshot (-want +got):\n%s", diff)
		}
	}
}

func TestHistogramMergeMismatch(t *testing.T) {
	x := newTestHistogram(t, 1, 2).Snapshot()
	tests := []struct {
		name string
		o    HistogramSnapshot
	}{
		{"different length", newTestHistogram(t, 1, 2, 3).Snapshot()},
		{"different bound", newTestHistogram(t, 1, 3).Snapshot()},
		{"inf in the middle", HistogramSnapshot{Buckets: []BucketCount{{Le: ptr(1.0)}, {}, {}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := x.Merge(tt.o); !errors.Is(err, ErrBoundsMismatch) {
				t.Errorf("Merge error = %v, want ErrBoundsMismatch", err)
			}
		})
	}
}

func seq(from, to int) []float64 {
	var out []float64
	for i := from; i <= to; i++ {
		out = append(out, float64(i))
	}
	return out
}

func repeat(v float64, n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = v
	}
	return out
}

func ptr[T any](v T) *T { return &v }

func approx(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
