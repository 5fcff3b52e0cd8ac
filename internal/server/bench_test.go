package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/vm/process"
	"github.com/berth-dev/berth/internal/vm/vmtest"
)

// buildBench builds the berth binary (the real agent) and the trivial cold
// app once per benchmark run.
var buildBench = sync.OnceValues(func() (string, error) {
	// As root, the process driver's sandboxes have a /tmp of their own
	// and reach only what any user may: the app goes to /var/tmp,
	// readable by all.
	parent := ""
	if os.Geteuid() == 0 {
		parent = "/var/tmp"
	}
	dir, err := os.MkdirTemp(parent, "berth-bench")
	if err != nil {
		return "", err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return "", err
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		return "", err
	}
	for _, b := range [][2]string{{"berth", "./cmd/berth"}, {"coldapp", "./bench/coldapp"}} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, b[0]), b[1])
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("building %s: %v\n%s", b[1], err, out)
		}
	}
	return dir, nil
})

func benchServer(b *testing.B) (*harness, string) {
	b.Helper()
	bin, err := buildBench()
	if err != nil {
		b.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "bb")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { stopReplicas(b, dir); os.RemoveAll(dir) })
	h, stop := runServer(b, dir)
	b.Cleanup(stop)
	return h, filepath.Join(bin, "coldapp")
}

// runServer runs berth over dir (with the real agent) until stop.
func runServer(b *testing.B, dir string) (h *harness, stop func()) {
	b.Helper()
	bin, err := buildBench()
	if err != nil {
		b.Fatal(err)
	}
	s, err := New(context.Background(), Options{
		ProxyAddr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0", DataDir: dir,
		AgentCommand: []string{filepath.Join(bin, "berth"), "agent"},
		Log:          slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t := &testing.T{}
	h = &harness{t: t, s: s, dir: dir, admin: "http://" + s.AdminAddr(), proxy: "http://" + s.ProxyAddr(), cancel: cancel, done: make(chan error, 1)}
	go func() { h.done <- s.Run(ctx) }()
	return h, func() { cancel(); <-h.done }
}

func post(b *testing.B, url, body string) {
	b.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode >= 300 {
		b.Fatalf("POST %s: %d", url, resp.StatusCode)
	}
}

func del(url string) {
	req, _ := http.NewRequest("DELETE", url, nil)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
	}
}

// BenchmarkScaleFromZero measures the first request to a vm deployment with
// no replica, on the process driver with a trivial app (bench/coldapp)
// and its spare agents ready: the time to first byte, berth's share (less
// the app's own start-to-listen time), the hold (X-Berth-Cold-Start) and
// the phases (see phases), as p50 and p90 over the iterations.
func BenchmarkScaleFromZero(b *testing.B) {
	h, app := benchServer(b)
	var ph phases
	for i := 0; b.Loop(); i++ {
		id := fmt.Sprintf("cold%d", i)
		post(b, h.admin+"/deployments", coldDeployment(id, app))
		// A scale from zero follows a quiet spell, in which the driver has
		// topped its spare agents up; back to back, an iteration would race
		// the refill of the spare the last one took.
		b.StopTimer()
		vmtest.WaitProcessSpares(b, filepath.Join(h.dir, "replicas"), process.DefaultSpares)
		quiet()
		b.StartTimer()
		ph.get(b, h, id)
		b.StopTimer()
		del(h.admin + "/deployments/" + id)
		b.StartTimer()
	}
	ph.report(b)
}

// BenchmarkScaleFromZeroFirst is BenchmarkScaleFromZero for the first
// scale from zero after berth starts: each iteration starts a berth over a
// data directory holding a deployment at zero (registered by an earlier
// berth), waits for the spare agents it prewarms, and measures the first
// request.
func BenchmarkScaleFromZeroFirst(b *testing.B) {
	_, app := benchServer(b)
	var ph phases
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		dir, err := os.MkdirTemp("", "bb")
		if err != nil {
			b.Fatal(err)
		}
		id := fmt.Sprintf("first%d", i)
		h, stop := runServer(b, dir)
		post(b, h.admin+"/deployments", coldDeployment(id, app))
		stop()
		h, stop = runServer(b, dir)
		vmtest.WaitProcessSpares(b, filepath.Join(dir, "replicas"), process.DefaultSpares)
		quiet()
		b.StartTimer()
		ph.get(b, h, id)
		b.StopTimer()
		stop()
		stopReplicas(b, dir)
		os.RemoveAll(dir)
		b.StartTimer()
	}
	ph.report(b)
}

// quiet writes the file systems' dirty data out before a measured scale
// from zero, as the quiet spell before one would: otherwise the
// deployment just registered (its store write is synced) and the last
// one deleted leave the journal busy, and the Start's own directory and
// state file updates wait for it.
func quiet() { syscall.Sync() }

func coldDeployment(id, app string) string {
	return `{"id":"` + id + `","routes":[{"host":"` + id + `.test"}],"vm":{"driver":"process","port":8080,"start_command":"exec ` + app + `"},"scaling":{"min_replicas":0}}`
}

// phases are where the time of cold starts went: ttfb (the request sent
// to its first byte), berth (ttfb less the app's own main-to-listening
// time), held (the X-Berth-Cold-Start header, in whole milliseconds), and,
// from
// the replica's Timeline and the app's own report: queue (request sent to
// the pool's create), create (the driver's Start), exec (Start returned to
// the app's main), app (its main to listening), notice (listening to the
// health probe passing) and reply (ready to the first byte).
type phases struct {
	ttfb, berth, held, queue, create, exec, app, notice, reply []time.Duration
}

// get sends the first request to deployment id and records its phases.
func (p *phases) get(b *testing.B, h *harness, id string) {
	req, _ := http.NewRequest("GET", h.proxy+"/", nil)
	req.Host = id + ".test"
	sent := time.Now()
	resp, err := http.DefaultClient.Do(req)
	got := time.Now()
	if err != nil {
		b.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var started, listening int64
	if _, err := fmt.Sscan(string(body), &started, &listening); err != nil || resp.StatusCode != 200 {
		b.Fatalf("%d %q", resp.StatusCode, body)
	}
	e, ok := h.s.registry.Get(id)
	if !ok || e.Pool == nil {
		b.Fatalf("no pool for %s", id)
	}
	bk := e.Pool.Find(resp.Header.Get("X-Vm-Id"))
	if bk == nil {
		b.Fatalf("no backend %q", resp.Header.Get("X-Vm-Id"))
	}
	tl := bk.Timeline
	main, listen := time.Unix(0, started), time.Unix(0, listening)
	p.ttfb = append(p.ttfb, got.Sub(sent))
	p.berth = append(p.berth, got.Sub(sent)-listen.Sub(main))
	p.queue = append(p.queue, tl.Created.Sub(sent))
	p.create = append(p.create, tl.Started.Sub(tl.Created))
	p.exec = append(p.exec, main.Sub(tl.Started))
	p.app = append(p.app, listen.Sub(main))
	p.notice = append(p.notice, tl.Ready.Sub(listen))
	p.reply = append(p.reply, got.Sub(tl.Ready))
	var ms int
	if _, err := fmt.Sscanf(resp.Header.Get("X-Berth-Cold-Start"), "held=%dms", &ms); err != nil {
		b.Fatalf("X-Berth-Cold-Start %q", resp.Header.Get("X-Berth-Cold-Start"))
	}
	p.held = append(p.held, time.Duration(ms)*time.Millisecond)
}

func (p *phases) report(b *testing.B) {
	vmtest.ReportP50P90(b, "ttfb", p.ttfb)
	vmtest.ReportP50P90(b, "berth", p.berth)
	vmtest.ReportP50P90(b, "held", p.held)
	vmtest.ReportP50P90(b, "queue", p.queue)
	vmtest.ReportP50P90(b, "create", p.create)
	vmtest.ReportP50P90(b, "exec", p.exec)
	vmtest.ReportP50P90(b, "app", p.app)
	vmtest.ReportP50P90(b, "notice", p.notice)
	vmtest.ReportP50P90(b, "reply", p.reply)
}

// BenchmarkExecAPI measures POST /deployments/:id/exec of `true` against a
// running replica: admin API, replica pick, agent round trip.
func BenchmarkExecAPI(b *testing.B) {
	h, app := benchServer(b)
	post(b, h.admin+"/deployments", `{"id":"ex","routes":[],"vm":{"driver":"process","port":8080,"start_command":"exec `+app+`"},"scaling":{"min_replicas":1}}`)
	body := `{"command":"true"}`
	post(b, h.admin+"/deployments/ex/exec", body) // wakes and warms
	var ds []time.Duration
	for b.Loop() {
		t0 := time.Now()
		post(b, h.admin+"/deployments/ex/exec", body)
		ds = append(ds, time.Since(t0))
	}
	vmtest.ReportP50P90(b, "exec", ds)
}

// BenchmarkStepLoad sends 10× target_concurrency concurrent requests to a
// pool at zero and measures how long until the pool has the replicas that
// load asks for (desired = 10 with target 1).
func BenchmarkStepLoad(b *testing.B) {
	h, app := benchServer(b)
	var ds []time.Duration
	for i := 0; b.Loop(); i++ {
		id := fmt.Sprintf("step%d", i)
		post(b, h.admin+"/deployments", `{"id":"`+id+`","routes":[{"host":"`+id+`.test"}],"vm":{"driver":"process","port":8080,"start_command":"exec `+app+`"},"scaling":{"min_replicas":0,"max_replicas":10,"target_concurrency":1}}`)
		t0 := time.Now()
		var wg sync.WaitGroup
		for range 10 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				req, _ := http.NewRequest("GET", h.proxy+"/?sleep=3000", nil)
				req.Host = id + ".test"
				if resp, err := http.DefaultClient.Do(req); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}()
		}
		for {
			e, ok := h.s.registry.Get(id)
			if ok && e.VMPool != nil && e.VMPool.Status().Ready >= 10 {
				break
			}
			if time.Since(t0) > time.Minute {
				b.Fatal("the pool never reached 10 replicas")
			}
			time.Sleep(time.Millisecond)
		}
		ds = append(ds, time.Since(t0))
		b.StopTimer()
		wg.Wait()
		del(h.admin + "/deployments/" + id)
		b.StartTimer()
	}
	vmtest.ReportP50P90(b, "reach10", ds)
}

// BenchmarkExec measures, in one run and interleaved so that load hits
// them alike, the exec of `true` three ways: a bare fork/exec on the host
// (exec.Command("true").Run(), the floor), POST /deployments/:id/exec on
// a process-driver replica, and the Computer API's POST
// /computers/:id/exec on a process-backed Computer with an exec grant,
// both over one keep-alive HTTP client. It reports p50/p90 of each and
// berth's share: the p50 less the bare p50 (issue 12's target: total
// ≤ 3 ms, share ≤ 1 ms). deployment-cpu-us and computer-cpu-us are the
// CPU time this process (berth and the client) spends per exec.
func BenchmarkExec(b *testing.B) {
	h, app := benchServer(b)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	b.Cleanup(client.CloseIdleConnections)
	send := func(url, token, body string) []byte {
		req, _ := http.NewRequest("POST", url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		out, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode >= 300 {
			b.Fatalf("POST %s: %d %s %v", url, resp.StatusCode, out, err)
		}
		return out
	}
	send(h.admin+"/deployments", "", `{"id":"ex","routes":[],"vm":{"driver":"process","port":8080,"start_command":"exec `+app+`"},"scaling":{"min_replicas":1}}`)
	send(h.admin+"/computers", "", `{"id":"cx","backings":[{"kind":"process"}]}`)
	var g struct{ Token string }
	if err := json.Unmarshal(send(h.admin+"/computers/cx/grants", "", `{"actions":["exec"],"expiresInSecs":3600}`), &g); err != nil || g.Token == "" {
		b.Fatalf("grant: %+v %v", g, err)
	}
	depExec := func() {
		if out := send(h.admin+"/deployments/ex/exec", "", `{"command":"true"}`); !bytes.Contains(out, []byte(`"exit_code":0`)) {
			b.Fatalf("deployment exec: %s", out)
		}
	}
	compExec := func() {
		if out := send(h.admin+"/computers/cx/exec", g.Token, `{"argv":["true"]}`); !bytes.Contains(out, []byte(`"exitCode":0`)) {
			b.Fatalf("computer exec: %s", out)
		}
	}
	bare := func() {
		if err := exec.Command("true").Run(); err != nil {
			b.Fatal(err)
		}
	}
	// Wakes both and warms the connections.
	for range 3 {
		depExec()
		compExec()
	}
	// cpu is this process's CPU time (berth's server and the benchmark's
	// client, not the agents): a figure that load on the machine barely
	// moves, unlike the wall clock.
	cpu := func() time.Duration {
		var ru syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	var cpuDep, cpuComp time.Duration
	timed := func(f func(), acc *time.Duration) time.Duration {
		c0, t0 := cpu(), time.Now()
		f()
		d := time.Since(t0)
		if acc != nil {
			*acc += cpu() - c0
		}
		return d
	}
	var tb, td, tc []time.Duration
	for b.Loop() {
		tb = append(tb, timed(bare, nil))
		td = append(td, timed(depExec, &cpuDep))
		tc = append(tc, timed(compExec, &cpuComp))
	}
	b.ReportMetric(float64(cpuDep.Microseconds())/float64(len(td)), "deployment-cpu-us")
	b.ReportMetric(float64(cpuComp.Microseconds())/float64(len(tc)), "computer-cpu-us")
	p50 := func(ds []time.Duration) time.Duration {
		s := slices.Clone(ds)
		slices.Sort(s)
		return s[(len(s)-1)/2]
	}
	bareP50 := p50(tb)
	vmtest.ReportP50P90(b, "bare", tb)
	vmtest.ReportP50P90(b, "deployment", td)
	vmtest.ReportP50P90(b, "computer", tc)
	b.ReportMetric(float64((p50(td)-bareP50).Microseconds())/1000, "deployment-berth-ms")
	b.ReportMetric(float64((p50(tc)-bareP50).Microseconds())/1000, "computer-berth-ms")
}

// BenchmarkExecParallel runs the Computer API's exec of `true` from 8
// concurrent keep-alive clients on one process-backed Computer, with the
// store's group commit and with every write committing alone: execs/s,
// p50/p90 latency and commits per exec (each exec's process.exited fact
// is a durable write).
func BenchmarkExecParallel(b *testing.B) {
	h, _ := benchServer(b)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	b.Cleanup(client.CloseIdleConnections)
	send := func(url, token, body string) ([]byte, error) {
		req, _ := http.NewRequest("POST", url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			return nil, err
		}
		out, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil && resp.StatusCode >= 300 {
			err = fmt.Errorf("POST %s: %d %s", url, resp.StatusCode, out)
		}
		return out, err
	}
	if _, err := send(h.admin+"/computers", "", `{"id":"cp","backings":[{"kind":"process"}]}`); err != nil {
		b.Fatal(err)
	}
	out, err := send(h.admin+"/computers/cp/grants", "", `{"actions":["exec"],"expiresInSecs":3600}`)
	var g struct{ Token string }
	if err != nil || json.Unmarshal(out, &g) != nil || g.Token == "" {
		b.Fatalf("grant: %s %v", out, err)
	}
	exec := func() error {
		out, err := send(h.admin+"/computers/cp/exec", g.Token, `{"argv":["true"]}`)
		if err == nil && !bytes.Contains(out, []byte(`"exitCode":0`)) {
			err = fmt.Errorf("computer exec: %s", out)
		}
		return err
	}
	for range 3 {
		if err := exec(); err != nil { // wakes the Computer
			b.Fatal(err)
		}
	}
	gc, ok := h.s.store.(groupCommitter)
	if !ok {
		b.Skipf("the store (%T) has no group commit", h.s.store)
	}
	for _, mode := range []struct {
		name  string
		group bool
	}{{"grouped", true}, {"alone", false}} {
		b.Run(mode.name, func(b *testing.B) {
			gc.SetGroupCommit(mode.group)
			defer gc.SetGroupCommit(true)
			var (
				mu  sync.Mutex
				lat []time.Duration
			)
			commits := gc.Commits()
			start := time.Now()
			b.SetParallelism(4) // 8 clients on 2 CPUs
			b.RunParallel(func(pb *testing.PB) {
				var mine []time.Duration
				for pb.Next() {
					t0 := time.Now()
					if err := exec(); err != nil {
						b.Error(err)
						return
					}
					mine = append(mine, time.Since(t0))
				}
				mu.Lock()
				lat = append(lat, mine...)
				mu.Unlock()
			})
			elapsed := time.Since(start)
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "execs/s")
			b.ReportMetric(float64(gc.Commits()-commits)/float64(b.N), "commits/exec")
			if len(lat) > 0 {
				vmtest.ReportP50P90(b, "exec", lat)
			}
		})
	}
}
