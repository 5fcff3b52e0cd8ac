package server

import (
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
	"strconv"
	"strings"
	"testing"
	"time"
)

// BenchmarkDashboardPaint: headless Chromium (testdata/paint.cjs) loads the
// dashboard b.N times, signed in, over loopback, with 20 deployments
// registered; reports the first contentful paint and the time until the
// tiles show the admin API's first answer (p50 and the slowest, ms from
// navigation start). Needs what TestBrowserUI needs (BERTH_PLAYWRIGHT,
// /usr/bin/chromium).
//
//	BERTH_PLAYWRIGHT=... go test -run '^$' -bench DashboardPaint -benchtime 30x ./internal/server/
func BenchmarkDashboardPaint(b *testing.B) {
	nodeModules := os.Getenv("BERTH_PLAYWRIGHT")
	if _, err := os.Stat(filepath.Join(nodeModules, "playwright-core")); nodeModules == "" || err != nil {
		b.Skip("needs BERTH_PLAYWRIGHT (a node_modules with playwright-core) and /usr/bin/chromium")
	}
	dir := b.TempDir()
	s, err := New(context.Background(), Options{
		ProxyAddr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0", DataDir: dir, AdminPassword: "pw",
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	b.Cleanup(func() { cancel(); <-done })
	admin := "http://" + s.AdminAddr()
	for i := range 20 {
		body := fmt.Sprintf(`{"id":"app%d","routes":[{"host":"app%d.test"}],"upstreams":["127.0.0.1:9"]}`, i, i)
		req, _ := newRequest("POST", admin+"/deployments", body)
		req.SetBasicAuth("admin", "pw")
		resp, err := httpClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 201 {
			b.Fatalf("creating app%d: %d", i, resp.StatusCode)
		}
	}
	b.ResetTimer()
	rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer rcancel()
	cmd := exec.CommandContext(rctx, "node", filepath.Join("testdata", "paint.cjs"), admin, "pw", strconv.Itoa(b.N))
	cmd.Env = append(os.Environ(), "NODE_PATH="+nodeModules)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	b.StopTimer()
	if err != nil {
		b.Fatalf("paint.cjs: %v", err)
	}
	var r struct{ FCP, Data []float64 }
	if err := json.Unmarshal(out, &r); err != nil || len(r.FCP) != b.N {
		b.Fatalf("paint.cjs said %q: %v", out, err)
	}
	for name, v := range map[string][]float64{"fcp": r.FCP, "data": r.Data} {
		s := slices.Clone(v)
		slices.Sort(s)
		b.ReportMetric(s[len(s)/2], name+"-p50-ms")
		b.ReportMetric(s[len(s)-1], name+"-max-ms")
	}
}

func newRequest(method, url, body string) (*http.Request, error) {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err == nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return req, err
}

var httpClient = &http.Client{Timeout: 30 * time.Second}
