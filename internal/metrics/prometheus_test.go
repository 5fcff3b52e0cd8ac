package metrics

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scrape fetches the exposition over real HTTP as text and parses it.
func scrape(t *testing.T, h http.Handler) map[string]*dto.MetricFamily {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/plain") // ask for the text format, as curl would
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape status = %d", resp.StatusCode)
	}
	if ct := resp.Header.Get("Content-Type"); expfmt.ResponseFormat(resp.Header).FormatType() != expfmt.TypeTextPlain {
		t.Fatalf("Content-Type = %q, want the text exposition", ct)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing exposition: %v", err)
	}
	return fams
}

// find returns the metric of family name whose labels include all of want.
func find(t *testing.T, fams map[string]*dto.MetricFamily, name string, want map[string]string) *dto.Metric {
	t.Helper()
	fam, ok := fams[name]
	if !ok {
		t.Fatalf("no %s in exposition", name)
	}
next:
	for _, m := range fam.GetMetric() {
		for k, v := range want {
			found := false
			for _, lp := range m.GetLabel() {
				found = found || (lp.GetName() == k && lp.GetValue() == v)
			}
			if !found {
				continue next
			}
		}
		return m
	}
	t.Fatalf("no %s%v in exposition", name, want)
	return nil
}

func TestExposition(t *testing.T) {
	reg := NewRegistry()
	api := reg.Get("api")
	for range 3 {
		api.ObserveRequest(200, 3*time.Millisecond)
	}
	api.ObserveRequest(301, 1*time.Millisecond)
	api.ObserveRequest(404, 30*time.Millisecond)
	api.ObserveRequest(503, 20*time.Second) // beyond the last finite bound
	api.ObserveError()
	api.ObserveError()
	api.ObserveColdStart(1500 * time.Millisecond)
	api.Autoscale.VMsCreated.Add(2)
	api.Autoscale.ColdStartTimeouts.Add(1)
	api.Autoscale.RecordCreateFailure("quota", time.Now())
	reg.Get("web").ObserveRequest(200, time.Millisecond)

	host := NewHostSampler("testdata/proc")
	fams := scrape(t, Handler(reg, host))

	for _, tt := range []struct {
		class string
		want  float64
	}{{"2xx", 3}, {"3xx", 1}, {"4xx", 1}, {"5xx", 1}, {"error", 2}} {
		m := find(t, fams, "berth_requests_total", map[string]string{"deployment": "api", "class": tt.class})
		if got := m.GetCounter().GetValue(); got != tt.want {
			t.Errorf("berth_requests_total{api,%s} = %v, want %v", tt.class, got, tt.want)
		}
	}
	if got := find(t, fams, "berth_requests_total", map[string]string{"deployment": "web", "class": "2xx"}).GetCounter().GetValue(); got != 1 {
		t.Errorf("berth_requests_total{web,2xx} = %v, want 1", got)
	}
	if typ := fams["berth_requests_total"].GetType(); typ != dto.MetricType_COUNTER {
		t.Errorf("berth_requests_total type = %v, want counter", typ)
	}

	lat := find(t, fams, "berth_request_duration_ms", map[string]string{"deployment": "api"}).GetHistogram()
	if lat.GetSampleCount() != 6 || lat.GetSampleSum() != 3*3+1+30+20000 {
		t.Errorf("latency count, sum = %d, %v; want 6, 20040", lat.GetSampleCount(), lat.GetSampleSum())
	}
	wantCum := map[float64]uint64{1: 1, 2: 1, 5: 4, 10: 4, 25: 4, 50: 5, 10000: 5}
	seen := 0
	for _, b := range lat.GetBucket() {
		if w, ok := wantCum[b.GetUpperBound()]; ok {
			seen++
			if b.GetCumulativeCount() != w {
				t.Errorf("latency bucket le=%v = %d, want %d (cumulative)", b.GetUpperBound(), b.GetCumulativeCount(), w)
			}
		}
	}
	if seen != len(wantCum) {
		t.Errorf("found %d of the %d checked latency buckets", seen, len(wantCum))
	}

	cold := find(t, fams, "berth_cold_start_seconds", map[string]string{"deployment": "api"}).GetHistogram()
	if cold.GetSampleCount() != 1 || cold.GetSampleSum() != 1.5 {
		t.Errorf("cold start count, sum = %d, %v; want 1, 1.5", cold.GetSampleCount(), cold.GetSampleSum())
	}

	for _, tt := range []struct {
		event string
		want  float64
	}{{"vms_created", 2}, {"cold_start_timeouts", 1}, {"create_failures", 1}, {"scale_up_events", 0}} {
		m := find(t, fams, "berth_autoscale_events_total", map[string]string{"deployment": "api", "event": tt.event})
		if got := m.GetCounter().GetValue(); got != tt.want {
			t.Errorf("berth_autoscale_events_total{api,%s} = %v, want %v", tt.event, got, tt.want)
		}
	}

	for name, want := range map[string]float64{
		"berth_host_cpu_percent":        15,
		"berth_host_cpu_count":          4,
		"berth_host_memory_total_bytes": 16384000 * 1024,
		"berth_host_memory_used_bytes":  (16384000 - 12288000) * 1024,
	} {
		if got := find(t, fams, name, nil).GetGauge().GetValue(); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
}

func TestExpositionWithoutHostOrDeployments(t *testing.T) {
	// Unavailable host: no host series rather than misleading zeros.
	fams := scrape(t, Handler(NewRegistry(), NewHostSampler(t.TempDir())))
	for name := range fams {
		t.Errorf("unexpected family %s in an empty exposition", name)
	}
	fams = scrape(t, Handler(nil, nil))
	if len(fams) != 0 {
		t.Errorf("nil registry and sampler exposed %d families, want 0", len(fams))
	}
}

func TestExpositionDropsDeletedDeployment(t *testing.T) {
	reg := NewRegistry()
	reg.Get("gone").ObserveRequest(200, time.Millisecond)
	reg.Get("kept").ObserveRequest(200, time.Millisecond)
	reg.Delete("gone")
	fams := scrape(t, Handler(reg, nil))
	for _, m := range fams["berth_requests_total"].GetMetric() {
		for _, lp := range m.GetLabel() {
			if lp.GetName() == "deployment" && lp.GetValue() != "kept" {
				t.Errorf("series for deployment %q still exposed", lp.GetValue())
			}
		}
	}
}
