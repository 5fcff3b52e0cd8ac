package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/syncbuf"
)

// rolloutFigures are one rollout's measurements (measureRollout).
type rolloutFigures struct {
	allNew, succeeded                time.Duration // from the rollout request
	steadyP50, steadyP99             time.Duration // the 2 s before it
	rollP50, rollP99, oldP99, newP99 time.Duration // requests started during it
	requests, during, non2xx         int
	failures                         []string // the first few non-2xx, when relative to the rollout request
}

// measureRollout runs one rollout of deployment id (at revision "a",
// ready) to revision "b" (spec) under a closed-loop load of clients on
// path, and measures it: the time from the rollout request until every
// request goes to the new revision (the start of the last request the
// previous revision answered) and until the operation reports succeeded,
// the latency of requests started during the rollout against the 2 s
// before it, and the non-2xx answers.
func measureRollout(tb testing.TB, admin, proxy, path, id, spec string, clients int) rolloutFigures {
	type sample struct {
		start time.Time
		d     time.Duration
		rev   string
		ok    bool
		what  string
	}
	var st apitype.DeploymentStatus
	getJSON(tb, admin+"/deployments/"+id, &st)
	var mu sync.Mutex
	var samples []sample
	stop := make(chan struct{})
	var wg sync.WaitGroup
	// One kept-alive connection per client: http.DefaultTransport keeps 2
	// idle per host, so with more clients the others would dial berth
	// anew for every request (a sixth of the run's CPU went to dials).
	client := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
	defer client.CloseIdleConnections()
	for range clients {
		wg.Go(func() {
			for n := 0; n < 1_000_000; n++ {
				select {
				case <-stop:
					return
				default:
				}
				req, _ := http.NewRequest("GET", proxy+path, nil)
				req.Host = id + ".test"
				t0 := time.Now()
				resp, err := client.Do(req)
				s := sample{start: t0}
				if err == nil {
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					s.ok, s.rev = resp.StatusCode/100 == 2, resp.Header.Get("X-Heyo-Revision")
					if !s.ok {
						s.what = resp.Status + " " + string(b)
					}
				} else {
					s.what = err.Error()
				}
				s.d = time.Since(t0)
				mu.Lock()
				samples = append(samples, s)
				mu.Unlock()
				time.Sleep(time.Millisecond)
			}
		})
	}
	time.Sleep(2 * time.Second)

	tPost := time.Now()
	body := startRollout(id, "op", st.RolloutRevision, spec)
	resp, err := http.Post(admin+"/deployments/"+id+"/rollouts", "application/json", strings.NewReader(body))
	if err != nil || resp.StatusCode != 202 {
		tb.Fatalf("rollout: %v %v", err, resp)
	}
	resp.Body.Close()
	for {
		var op apitype.RolloutOperation
		getJSON(tb, admin+"/deployments/"+id+"/rollouts/op", &op)
		if op.Status == "succeeded" {
			break
		}
		if op.Status != "running" {
			tb.Fatalf("rollout %s: %v", op.Status, op.Error)
		}
		time.Sleep(5 * time.Millisecond)
	}
	tDone := time.Now()
	time.Sleep(500 * time.Millisecond)
	close(stop)
	wg.Wait()

	var f rolloutFigures
	var lastOld time.Time
	var steady, during, dOld, dNew []time.Duration
	for _, s := range samples {
		f.requests++
		if !s.ok {
			f.non2xx++
			if len(f.failures) < 5 {
				f.failures = append(f.failures, fmt.Sprintf("%+dms: %s", s.start.Sub(tPost).Milliseconds(), s.what))
			}
			continue
		}
		if s.rev == "a" && s.start.After(lastOld) {
			lastOld = s.start
		}
		switch {
		case s.start.Before(tPost) && s.start.After(tPost.Add(-2*time.Second)):
			steady = append(steady, s.d)
		case !s.start.Before(tPost) && s.start.Before(tDone):
			during = append(during, s.d)
			if s.rev == "a" {
				dOld = append(dOld, s.d)
			} else {
				dNew = append(dNew, s.d)
			}
		}
	}
	f.allNew, f.succeeded = lastOld.Sub(tPost), tDone.Sub(tPost)
	f.steadyP50, f.steadyP99 = pct(steady, 50), pct(steady, 99)
	f.rollP50, f.rollP99 = pct(during, 50), pct(during, 99)
	f.oldP99, f.newP99 = pct(dOld, 99), pct(dNew, 99)
	f.during = len(during)
	return f
}

// summarize is the medians of fs (sums for the counts), as metrics.
func summarize(fs []rolloutFigures) []struct {
	name string
	v    float64
} {
	med := func(get func(rolloutFigures) time.Duration) float64 {
		var ds []time.Duration
		for _, f := range fs {
			ds = append(ds, get(f))
		}
		return float64(pct(ds, 50).Microseconds()) / 1000
	}
	var non2xx, reqs, during int
	for _, f := range fs {
		non2xx, reqs, during = non2xx+f.non2xx, reqs+f.requests, during+f.during
	}
	return []struct {
		name string
		v    float64
	}{
		{"all-new-ms", med(func(f rolloutFigures) time.Duration { return f.allNew })},
		{"succeeded-ms", med(func(f rolloutFigures) time.Duration { return f.succeeded })},
		{"steady-p50-ms", med(func(f rolloutFigures) time.Duration { return f.steadyP50 })},
		{"steady-p99-ms", med(func(f rolloutFigures) time.Duration { return f.steadyP99 })},
		{"rollout-p50-ms", med(func(f rolloutFigures) time.Duration { return f.rollP50 })},
		{"rollout-p99-ms", med(func(f rolloutFigures) time.Duration { return f.rollP99 })},
		{"rollout-old-p99-ms", med(func(f rolloutFigures) time.Duration { return f.oldP99 })},
		{"rollout-new-p99-ms", med(func(f rolloutFigures) time.Duration { return f.newP99 })},
		{"rollout-requests", float64(during) / float64(len(fs))},
		{"non2xx", float64(non2xx)},
		{"requests", float64(reqs)},
	}
}

// BenchmarkRollout measures a candidate-first rollout of a two-replica
// process deployment (bench/coldapp) under a closed-loop load of 4 clients
// on loopback (measureRollout); each figure is the median over the
// iterations. TestRolloutContainerFigures measures the container driver.
//
//	go test -run '^$' -bench Rollout -benchtime 10x ./internal/server/
func BenchmarkRollout(b *testing.B) {
	h, app := benchServer(b)
	spec := func(id, rev string) string {
		return `{"id":"` + id + `","routes":[{"host":"` + id + `.test"}],"vm":{"driver":"process","port":8080,"start_command":"exec ` + app +
			`","env_vars":{"APP_REVISION":"` + rev + `"}},"health":{"path":"/","expected_header":{"name":"x-heyo-revision","value":"` + rev + `"}},` +
			`"scaling":{"min_replicas":2,"max_replicas":2,"drain_timeout_secs":5}}`
	}
	var fs []rolloutFigures
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		id := fmt.Sprintf("roll%d", i)
		post(b, h.admin+"/deployments", spec(id, "a"))
		waitReady(b, h, id, 2)
		f := measureRollout(b, h.admin, h.proxy, "/", id, spec(id, "b"), 4)
		fs = append(fs, f)
		del(h.admin + "/deployments/" + id)
	}
	for _, m := range summarize(fs) {
		b.ReportMetric(m.v, m.name)
	}
}

// TestRolloutContainerFigures is BenchmarkRollout on the container driver
// (busybox httpd and a CGI; see containerRevSpec), a test because the
// container harness is one; it runs with BERTH_BENCH_ROLLOUT=N (rollouts)
// and logs the medians:
//
//	BERTH_BENCH_ROLLOUT=5 go test -count=1 -v -run TestRolloutContainerFigures ./internal/server/
func TestRolloutContainerFigures(t *testing.T) {
	var n int
	if _, err := fmt.Sscan(os.Getenv("BERTH_BENCH_ROLLOUT"), &n); err != nil || n < 1 {
		t.Skip("a benchmark: set BERTH_BENCH_ROLLOUT=N to run N rollouts")
	}
	var logs syncbuf.Buffer
	h := startContainers(t, &logs, nil)
	var fs []rolloutFigures
	for i := range n {
		id := fmt.Sprintf("croll%d", i)
		if r := h.json("POST", "/deployments", containerRevSpec(id, "a", "a")); r.code != 201 {
			t.Fatalf("%d %s", r.code, r.body)
		}
		waitFor(t, "two ready replicas", func() bool { return h.status(id).Ready == 2 })
		f := measureRollout(t, h.admin, h.proxy, "/cgi-bin/rev", id, containerRevSpec(id, "b", "b"), 4)
		if f.non2xx != 0 {
			v := h.view(id)
			t.Errorf("rollout %d: %d non-2xx of %d: %q (cold-start waits %d)", i, f.non2xx, f.requests, f.failures, v.Metrics.Autoscale.ColdStartWaits)
		}
		fs = append(fs, f)
		h.deleteQuietly(id)
	}
	var b strings.Builder
	for _, m := range summarize(fs) {
		fmt.Fprintf(&b, " %s=%.4g", m.name, m.v)
	}
	t.Logf("container rollouts (%d, medians):%s", n, b.String())
}

func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}

func getJSON(tb testing.TB, url string, v any) {
	tb.Helper()
	resp, err := http.Get(url)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if err := json.NewDecoder(bytes.NewReader(raw)).Decode(v); err != nil {
		tb.Fatalf("GET %s: %d %s", url, resp.StatusCode, raw)
	}
}

func waitReady(b *testing.B, h *harness, id string, n int) {
	deadline := time.Now().Add(time.Minute)
	for {
		var st apitype.DeploymentStatus
		getJSON(b, h.admin+"/deployments/"+id, &st)
		if st.Ready >= n {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s never had %d ready replicas", id, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
