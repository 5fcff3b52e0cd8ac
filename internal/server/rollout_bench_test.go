package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-dev/berth/apitype"
)

// BenchmarkRollout measures a candidate-first rollout of a two-replica
// process deployment (bench/coldapp) under a closed-loop load
// of 4 clients on loopback: the time from the rollout request until every
// request goes to the new revision (the start of the last request the
// previous revision answered) and until the operation reports succeeded,
// the p99 latency during the rollout against the steady p99 of the 2 s
// before it, and the non-2xx answers. Each figure is the median over the
// iterations.
//
//	go test -run '^$' -bench Rollout -benchtime 5x ./internal/server/
func BenchmarkRollout(b *testing.B) {
	h, app := benchServer(b)
	spec := func(id, rev string) string {
		return `{"id":"` + id + `","routes":[{"host":"` + id + `.test"}],"vm":{"driver":"process","port":8080,"start_command":"exec ` + app +
			`","env_vars":{"APP_REVISION":"` + rev + `"}},"health":{"path":"/","expected_header":{"name":"x-heyo-revision","value":"` + rev + `"}},` +
			`"scaling":{"min_replicas":2,"max_replicas":2,"drain_timeout_secs":5}}`
	}
	var switchT, doneT, steadyP99, rollP99, rollP50, steadyP50 []time.Duration
	var inRollout int
	var oldP99, newP99 []time.Duration
	var non2xx, total int
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		id := fmt.Sprintf("roll%d", i)
		post(b, h.admin+"/deployments", spec(id, "a"))
		waitReady(b, h, id, 2)
		st := benchStatus(b, h, id)

		type sample struct {
			start time.Time
			d     time.Duration
			rev   string
			ok    bool
		}
		var mu sync.Mutex
		var samples []sample
		stop := make(chan struct{})
		var wg sync.WaitGroup
		client := &http.Client{Timeout: 20 * time.Second}
		for range 4 {
			wg.Go(func() {
				for n := 0; n < 1_000_000; n++ {
					select {
					case <-stop:
						return
					default:
					}
					req, _ := http.NewRequest("GET", h.proxy+"/", nil)
					req.Host = id + ".test"
					t0 := time.Now()
					resp, err := client.Do(req)
					s := sample{start: t0}
					if err == nil {
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						s.ok, s.rev = resp.StatusCode/100 == 2, resp.Header.Get("X-Heyo-Revision")
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

		b.StartTimer()
		tPost := time.Now()
		body := startRollout(id, "op", st.RolloutRevision, spec(id, "b"))
		resp, err := http.Post(h.admin+"/deployments/"+id+"/rollouts", "application/json", strings.NewReader(body))
		if err != nil || resp.StatusCode != 202 {
			b.Fatalf("rollout: %v %v", err, resp)
		}
		resp.Body.Close()
		for {
			var op apitype.RolloutOperation
			getJSON(b, h.admin+"/deployments/"+id+"/rollouts/op", &op)
			if op.Status == "succeeded" {
				break
			}
			if op.Status != "running" {
				b.Fatalf("rollout %s: %v", op.Status, op.Error)
			}
			time.Sleep(5 * time.Millisecond)
		}
		tDone := time.Now()
		b.StopTimer()
		time.Sleep(500 * time.Millisecond)
		close(stop)
		wg.Wait()

		var lastOld time.Time
		var steady, during, dOld, dNew []time.Duration
		for _, s := range samples {
			total++
			if !s.ok {
				non2xx++
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
		switchT = append(switchT, lastOld.Sub(tPost))
		doneT = append(doneT, tDone.Sub(tPost))
		steadyP99 = append(steadyP99, pct(steady, 99))
		rollP99 = append(rollP99, pct(during, 99))
		rollP50 = append(rollP50, pct(during, 50))
		oldP99 = append(oldP99, pct(dOld, 99))
		newP99 = append(newP99, pct(dNew, 99))
		steadyP50 = append(steadyP50, pct(steady, 50))
		inRollout += len(during)
		del(h.admin + "/deployments/" + id)
	}
	ms := func(ds []time.Duration) float64 { return float64(pct(ds, 50).Microseconds()) / 1000 }
	b.ReportMetric(ms(switchT), "all-new-ms")
	b.ReportMetric(ms(doneT), "succeeded-ms")
	b.ReportMetric(ms(steadyP99), "steady-p99-ms")
	b.ReportMetric(ms(rollP99), "rollout-p99-ms")
	b.ReportMetric(ms(steadyP50), "steady-p50-ms")
	b.ReportMetric(ms(rollP50), "rollout-p50-ms")
	b.ReportMetric(ms(oldP99), "rollout-old-p99-ms")
	b.ReportMetric(ms(newP99), "rollout-new-p99-ms")
	b.ReportMetric(float64(inRollout)/float64(b.N), "rollout-requests")
	b.ReportMetric(float64(non2xx), "non2xx")
	b.ReportMetric(float64(total), "requests")
}

func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}

func getJSON(b *testing.B, url string, v any) {
	b.Helper()
	resp, err := http.Get(url)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if err := json.NewDecoder(bytes.NewReader(raw)).Decode(v); err != nil {
		b.Fatalf("GET %s: %d %s", url, resp.StatusCode, raw)
	}
}

func benchStatus(b *testing.B, h *harness, id string) apitype.DeploymentStatus {
	var st apitype.DeploymentStatus
	getJSON(b, h.admin+"/deployments/"+id, &st)
	return st
}

func waitReady(b *testing.B, h *harness, id string, n int) {
	deadline := time.Now().Add(time.Minute)
	for benchStatus(b, h, id).Ready < n {
		if time.Now().After(deadline) {
			b.Fatalf("%s never had %d ready replicas", id, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
