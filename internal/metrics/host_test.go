package metrics

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
)

// fixtureProc copies testdata/proc to a temporary directory so a test can
// rewrite files between samples.
func fixtureProc(t *testing.T) string {
	t.Helper()
	dst := t.TempDir()
	if err := os.CopyFS(dst, os.DirFS("testdata/proc")); err != nil {
		t.Fatal(err)
	}
	return dst
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestHostSamplerFixtures(t *testing.T) {
	root := fixtureProc(t)
	h := NewHostSampler(root)

	// First sample: no previous reading, so the figure is since boot:
	// busy 1500 of 10000 ticks.
	u, err := h.Sample()
	if err != nil {
		t.Fatalf("Sample: %v", err)
	}
	want := HostUsage{
		Available:        true,
		CPUCount:         4,
		CPUPercent:       15,
		MemoryTotalBytes: 16384000 * 1024,
		MemoryUsedBytes:  (16384000 - 12288000) * 1024,
	}
	if diff := cmp.Diff(want, u, cmp.FilterPath(isSampledAt, cmp.Ignore())); diff != "" {
		t.Errorf("first sample (-want +got):\n%s", diff)
	}
	if u.SampledAtMs <= 0 {
		t.Errorf("SampledAtMs = %d, want a timestamp", u.SampledAtMs)
	}

	// Second sample: user +600, system +200, idle +600, iowait +100,
	// irq +50, softirq +50 (guest +100 is inside user already) → busy
	// 900 of 1600 ticks.
	copyFile(t, "testdata/stat.later", filepath.Join(root, "stat"))
	u, err = h.Sample()
	if err != nil {
		t.Fatalf("Sample: %v", err)
	}
	if u.CPUPercent != 56.25 {
		t.Errorf("CPUPercent = %v, want 56.25", u.CPUPercent)
	}
	if got := h.Latest(); got != u {
		t.Errorf("Latest = %+v, want the last sample %+v", got, u)
	}

	// No ticks elapsed: keep the last figure rather than report 0.
	if u, _ = h.Sample(); u.CPUPercent != 56.25 {
		t.Errorf("CPUPercent with no elapsed ticks = %v, want 56.25 kept", u.CPUPercent)
	}

	// Counters going backwards (a different /proc) fall back to since boot.
	copyFile(t, "testdata/proc/stat", filepath.Join(root, "stat"))
	if u, _ = h.Sample(); u.CPUPercent != 15 {
		t.Errorf("CPUPercent after counters reset = %v, want 15", u.CPUPercent)
	}
}

func isSampledAt(p cmp.Path) bool { return p.Last().String() == ".SampledAtMs" }

func TestHostSamplerOldKernelMeminfo(t *testing.T) {
	root := fixtureProc(t)
	copyFile(t, "testdata/meminfo.old-kernel", filepath.Join(root, "meminfo"))
	u, err := NewHostSampler(root).Sample()
	if err != nil {
		t.Fatalf("Sample: %v", err)
	}
	// Available ≈ MemFree + Buffers + Cached = 4000000 kB.
	if u.MemoryTotalBytes != 8000000*1024 || u.MemoryUsedBytes != 4000000*1024 {
		t.Errorf("memory total, used = %d, %d; want %d, %d", u.MemoryTotalBytes, u.MemoryUsedBytes, 8000000*1024, 4000000*1024)
	}
}

func TestHostSamplerBadInput(t *testing.T) {
	tests := []struct {
		name    string
		stat    string // "" = leave the fixture; "-" = remove
		meminfo string
		wantErr error
	}{
		{"no stat", "-", "", fs.ErrNotExist},
		{"no meminfo", "", "-", fs.ErrNotExist},
		{"no cpu line", "intr 1 2 3\n", "", ErrProcFormat},
		{"short cpu line", "cpu 1 2 3\n", "", ErrProcFormat},
		{"non-numeric cpu", "cpu 1 2 x 4 5\n", "", ErrProcFormat},
		{"two cpu lines", "cpu 1 2 3 4\ncpu 1 2 3 4\n", "", ErrProcFormat},
		{"no MemTotal", "", "MemFree: 10 kB\n", ErrProcFormat},
		{"bad MemTotal", "", "MemTotal: lots kB\n", ErrProcFormat},
		{"MemTotal no value", "", "MemTotal:\n", ErrProcFormat},
		{"MemTotal in MB", "", "MemTotal: 10 MB\n", ErrProcFormat},
		{"empty files", "\n", "\n", ErrProcFormat},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := fixtureProc(t)
			for name, content := range map[string]string{"stat": tt.stat, "meminfo": tt.meminfo} {
				p := filepath.Join(root, name)
				switch content {
				case "":
				case "-":
					os.Remove(p)
				default:
					if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			h := NewHostSampler(root)
			u, err := h.Sample()
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("Sample error = %v, want %v", err, tt.wantErr)
			}
			if u.Available || u.CPUCount != 0 || u.MemoryTotalBytes != 0 {
				t.Errorf("Sample = %+v, want unavailable and zero", u)
			}
			if h.Latest().Available {
				t.Error("Latest is available after a failed sample")
			}
		})
	}
}

func TestHostSamplerNoPerCPULines(t *testing.T) {
	root := fixtureProc(t)
	if err := os.WriteFile(filepath.Join(root, "stat"), []byte("cpu 1 2 3 4\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	u, err := NewHostSampler(root).Sample()
	if err != nil {
		t.Fatal(err)
	}
	if u.CPUCount != runtime.NumCPU() {
		t.Errorf("CPUCount = %d, want runtime.NumCPU() = %d", u.CPUCount, runtime.NumCPU())
	}
	if u.CPUPercent != 60 { // busy 1+2+3 of 10
		t.Errorf("CPUPercent = %v, want 60 (4-column line)", u.CPUPercent)
	}
}

func TestHostSamplerRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		root := fixtureProc(t)
		h := NewHostSampler(root)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error)
		go func() { done <- h.Run(ctx, 0) }()

		synctest.Wait() // Run sampled once and is waiting for its ticker
		start := time.Now()
		if u := h.Latest(); !u.Available || u.CPUPercent != 15 || u.SampledAtMs != start.UnixMilli() {
			t.Errorf("after start Latest = %+v, want available, 15%%, sampled at %d", u, start.UnixMilli())
		}

		copyFile(t, "testdata/stat.later", filepath.Join(root, "stat"))
		time.Sleep(DefaultSampleInterval)
		synctest.Wait()
		if u := h.Latest(); u.CPUPercent != 56.25 || u.SampledAtMs != start.Add(DefaultSampleInterval).UnixMilli() {
			t.Errorf("after one interval Latest = %+v, want 56.25%% sampled at +2s", u)
		}

		// /proc going away shows as unavailable without stopping Run.
		os.Remove(filepath.Join(root, "stat"))
		time.Sleep(DefaultSampleInterval)
		synctest.Wait()
		if h.Latest().Available {
			t.Error("Latest available with /proc/stat gone")
		}
		copyFile(t, "testdata/stat.later", filepath.Join(root, "stat"))
		time.Sleep(DefaultSampleInterval)
		synctest.Wait()
		if !h.Latest().Available {
			t.Error("Latest still unavailable after /proc/stat came back")
		}

		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run returned %v, want nil on cancel", err)
		}
	})
}

func TestHostSamplerLatestSamplesOnDemand(t *testing.T) {
	h := NewHostSampler(fixtureProc(t))
	if u := h.Latest(); !u.Available || u.CPUCount != 4 {
		t.Errorf("Latest before any Run = %+v, want a fresh available sample", u)
	}
}

func TestHostSamplerRealProc(t *testing.T) {
	if _, err := os.Stat("/proc/stat"); err != nil {
		t.Skip("no /proc on this system")
	}
	h := NewHostSampler("")
	u, err := h.Sample()
	if err != nil {
		t.Fatalf("Sample of the real /proc: %v", err)
	}
	if !u.Available || u.CPUCount < 1 || u.MemoryTotalBytes == 0 || u.MemoryUsedBytes > u.MemoryTotalBytes || u.CPUPercent < 0 || u.CPUPercent > 100 {
		t.Errorf("real host usage looks wrong: %+v", u)
	}
	p, err := h.ProcessUsage(os.Getpid())
	if err != nil {
		t.Fatalf("ProcessUsage(self): %v", err)
	}
	if p.RSSBytes == 0 || p.StartTicks == 0 {
		t.Errorf("own process usage looks wrong: %+v", p)
	}
}

func TestProcessUsageFixture(t *testing.T) {
	h := NewHostSampler("testdata/proc")
	p, err := h.ProcessUsage(4242)
	if err != nil {
		t.Fatalf("ProcessUsage: %v", err)
	}
	// utime 250 + stime 130 ticks at 100 Hz; the name "fire cracker x)"
	// has a space and a ')' to trip naive parsers.
	want := ProcessSample{PID: 4242, CPUSeconds: 3.8, StartTicks: 98765, RSSBytes: 51200 * 1024}
	if diff := cmp.Diff(want, p, cmp.FilterPath(func(p cmp.Path) bool { return p.Last().String() == ".SampledAt" }, cmp.Ignore())); diff != "" {
		t.Errorf("ProcessUsage (-want +got):\n%s", diff)
	}
	if p.SampledAt.IsZero() {
		t.Error("SampledAt not set")
	}
}

func TestProcessUsageBadInput(t *testing.T) {
	root := t.TempDir()
	write := func(pid, name, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(root, pid), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, pid, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("10", "stat", "10 noparens S 1 2 3\n")
	write("11", "stat", "11 (short) S 1 2 3\n")
	write("12", "stat", "12 (bad) S 1 1 1 0 -1 0 0 0 0 0 x 1 0 0 20 0 1 0 5 1 1\n")
	write("13", "stat", "13 (nostatus) S 1 1 1 0 -1 0 0 0 0 0 1 1 0 0 20 0 1 0 5 1 1\n")
	write("14", "stat", "14 (kthread) S 2 0 0 0 -1 0 0 0 0 0 7 3 0 0 20 0 1 0 5 0 0\n")
	write("14", "status", "Name:\tkthread\nState:\tS\n")

	h := NewHostSampler(root)
	tests := []struct {
		pid     int
		wantErr error
	}{
		{10, ErrProcFormat},
		{11, ErrProcFormat},
		{12, ErrProcFormat},
		{13, fs.ErrNotExist},
		{99, fs.ErrNotExist},
	}
	for _, tt := range tests {
		if _, err := h.ProcessUsage(tt.pid); !errors.Is(err, tt.wantErr) {
			t.Errorf("ProcessUsage(%d) error = %v, want %v", tt.pid, err, tt.wantErr)
		}
	}
	for _, pid := range []int{0, -1} {
		if _, err := h.ProcessUsage(pid); err == nil {
			t.Errorf("ProcessUsage(%d) succeeded, want an error", pid)
		}
	}
	// A kernel thread has no VmRSS: zero memory, not an error.
	p, err := h.ProcessUsage(14)
	if err != nil || p.RSSBytes != 0 || p.CPUSeconds != 0.1 {
		t.Errorf("ProcessUsage(kthread) = %+v, %v; want 0 RSS, 0.1 s CPU", p, err)
	}
}

func TestProcessCPUPercent(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	base := ProcessSample{PID: 7, CPUSeconds: 10, StartTicks: 100, SampledAt: t0}
	later := func(cpu float64, d time.Duration) ProcessSample {
		s := base
		s.CPUSeconds, s.SampledAt = cpu, t0.Add(d)
		return s
	}
	reused := later(11, time.Second)
	reused.StartTicks = 200
	other := later(11, time.Second)
	other.PID = 8
	tests := []struct {
		name      string
		prev, cur ProcessSample
		want      float64
	}{
		{"half a core", base, later(11, 2*time.Second), 50},
		{"two cores", base, later(14, 2*time.Second), 200},
		{"idle", base, later(10, time.Second), 0},
		{"same instant", base, later(11, 0), 0},
		{"out of order", later(11, time.Second), base, 0},
		{"pid reused", base, reused, 0},
		{"different pid", base, other, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ProcessCPUPercent(tt.prev, tt.cur); got != tt.want {
				t.Errorf("ProcessCPUPercent = %v, want %v", got, tt.want)
			}
		})
	}
}
