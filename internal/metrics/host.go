package metrics

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
)

// DefaultSampleInterval is how often Run samples when given no interval.
// It matches the dashboard's 2 s poll, so every poll sees a fresh figure.
const DefaultSampleInterval = 2 * time.Second

// clockTicksPerSecond is USER_HZ, the unit of the CPU times in /proc. The
// kernel fixes it at 100 for userspace on every architecture Linux
// supports today; reading sysconf(_SC_CLK_TCK) would need cgo.
const clockTicksPerSecond = 100

// ErrProcFormat is returned (wrapped) when a /proc file exists but does not
// hold what the kernel documents.
var ErrProcFormat = errors.New("metrics: unexpected /proc format")

// HostUsage is the host's CPU and memory use, shaped like the wire type
// HostUsage.
type HostUsage struct {
	// Available is false when /proc could not be read or parsed; the other
	// fields are then zero except SampledAtMs.
	Available bool
	// CPUCount is the number of online CPUs (cpuN lines in /proc/stat).
	CPUCount int
	// CPUPercent is the whole host's busy share over the last sampling
	// interval, 0–100 (not per core). The first sample covers the time
	// since boot.
	CPUPercent       float64
	MemoryTotalBytes uint64
	// MemoryUsedBytes is MemTotal − MemAvailable: memory applications
	// cannot get back without swapping, which is what "used" should mean
	// on a host whose page cache fills all free RAM.
	MemoryUsedBytes uint64
	// SampledAtMs is when the sample was taken, in Unix milliseconds.
	SampledAtMs int64
}

// HostSampler reads host usage from a procfs tree. CPU percent needs two
// readings of cumulative counters, so the sampler remembers the previous
// one; Run keeps it fresh in the background and Latest returns the newest
// result without touching /proc. Its methods are safe for concurrent use.
type HostSampler struct {
	root string

	mu         sync.Mutex
	prev       cpuTimes
	havePrev   bool
	lastPct    float64
	latest     HostUsage
	haveLatest bool
}

// NewHostSampler returns a sampler reading procfs at procRoot; "" means
// "/proc". Tests point it at a directory of fixture files.
func NewHostSampler(procRoot string) *HostSampler {
	if procRoot == "" {
		procRoot = "/proc"
	}
	return &HostSampler{root: procRoot}
}

// Run samples immediately and then every interval (DefaultSampleInterval
// if interval <= 0) until ctx is done, and then returns nil. A failed
// sample does not stop it: /proc may come back (e.g. a remount), and until
// then Latest reports Available=false.
func (h *HostSampler) Run(ctx context.Context, interval time.Duration) error {
	if interval <= 0 {
		interval = DefaultSampleInterval
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		h.Sample() // the error is reflected in Latest().Available
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Latest returns the most recent sample. If nothing has sampled yet (Run
// not started), it samples now so callers never see a fake "unavailable".
func (h *HostSampler) Latest() HostUsage {
	h.mu.Lock()
	u, ok := h.latest, h.haveLatest
	h.mu.Unlock()
	if ok {
		return u
	}
	u, _ = h.Sample()
	return u
}

// Sample reads /proc now, records the result as Latest, and returns it.
// On error the usage has Available=false and the error says which file
// failed and why.
func (h *HostSampler) Sample() (HostUsage, error) {
	now := time.Now()
	cpu, ncpu, err := readCPUTimes(filepath.Join(h.root, "stat"))
	var mem memInfo
	if err == nil {
		mem, err = readMemInfo(filepath.Join(h.root, "meminfo"))
	}

	h.mu.Lock()
	defer h.mu.Unlock()
	if err != nil {
		h.latest, h.haveLatest = HostUsage{SampledAtMs: now.UnixMilli()}, true
		return h.latest, err
	}
	if ncpu == 0 {
		ncpu = runtime.NumCPU() // a trimmed-down /proc/stat without per-CPU lines
	}
	base := cpuTimes{}
	if h.havePrev && cpu.total >= h.prev.total && cpu.busy >= h.prev.busy {
		base = h.prev // otherwise counters reset (new root?): fall back to since-boot
	}
	if dt := cpu.total - base.total; dt > 0 {
		h.lastPct = 100 * float64(cpu.busy-base.busy) / float64(dt)
	} // dt == 0: no time passed since the last sample; keep its figure
	h.prev, h.havePrev = cpu, true
	h.latest = HostUsage{
		Available:        true,
		CPUCount:         ncpu,
		CPUPercent:       h.lastPct,
		MemoryTotalBytes: mem.total,
		MemoryUsedBytes:  mem.total - min(mem.available, mem.total),
		SampledAtMs:      now.UnixMilli(),
	}
	h.haveLatest = true
	return h.latest, nil
}

// cpuTimes are the aggregate CPU counters of /proc/stat in clock ticks.
type cpuTimes struct {
	busy, total uint64
}

// readCPUTimes parses the aggregate "cpu" line of /proc/stat and counts the
// per-CPU lines. Columns: user nice system idle iowait irq softirq steal
// guest guest_nice. guest and guest_nice are already inside user and nice,
// so they are not added again; idle and iowait are the not-busy time.
func readCPUTimes(path string) (cpuTimes, int, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return cpuTimes{}, 0, err
	}
	var (
		t     cpuTimes
		found bool
		ncpu  int
	)
	for line := range bytes.Lines(data) {
		fields := strings.Fields(string(line))
		if len(fields) == 0 || !strings.HasPrefix(fields[0], "cpu") {
			continue
		}
		if fields[0] != "cpu" {
			if _, err := strconv.Atoi(fields[0][3:]); err == nil {
				ncpu++
			}
			continue
		}
		if found {
			return cpuTimes{}, 0, fmt.Errorf("%w: %s has two aggregate cpu lines", ErrProcFormat, path)
		}
		found = true
		if len(fields) < 5 {
			return cpuTimes{}, 0, fmt.Errorf("%w: %s: cpu line has %d columns, want at least 4", ErrProcFormat, path, len(fields)-1)
		}
		cols := fields[1:min(len(fields), 9)] // user..steal
		for i, f := range cols {
			v, err := strconv.ParseUint(f, 10, 64)
			if err != nil {
				return cpuTimes{}, 0, fmt.Errorf("%w: %s: cpu column %d: %v", ErrProcFormat, path, i+1, err)
			}
			t.total += v
			if i != 3 && i != 4 { // idle, iowait
				t.busy += v
			}
		}
	}
	if !found {
		return cpuTimes{}, 0, fmt.Errorf("%w: %s has no aggregate cpu line", ErrProcFormat, path)
	}
	return t, ncpu, nil
}

type memInfo struct {
	total, available uint64 // bytes
}

// readMemInfo parses MemTotal and MemAvailable from /proc/meminfo. Kernels
// before 3.14 lack MemAvailable; MemFree+Buffers+Cached approximates it.
func readMemInfo(path string) (memInfo, error) {
	kv, err := readKB(path, "MemTotal", "MemAvailable", "MemFree", "Buffers", "Cached")
	if err != nil {
		return memInfo{}, err
	}
	total, ok := kv["MemTotal"]
	if !ok {
		return memInfo{}, fmt.Errorf("%w: %s has no MemTotal", ErrProcFormat, path)
	}
	avail, ok := kv["MemAvailable"]
	if !ok {
		avail = kv["MemFree"] + kv["Buffers"] + kv["Cached"]
	}
	return memInfo{total: total, available: avail}, nil
}

// readKB reads "Key:   123 kB" lines (meminfo, /proc/<pid>/status) and
// returns the wanted keys in bytes. Missing keys are simply absent.
func readKB(path string, keys ...string) (map[string]uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := make(map[string]uint64, len(keys))
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		key, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		wanted := false
		for _, k := range keys {
			wanted = wanted || k == key
		}
		if !wanted {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			return nil, fmt.Errorf("%w: %s: %s has no value", ErrProcFormat, path, key)
		}
		v, err := strconv.ParseUint(fields[0], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %s: %v", ErrProcFormat, path, key, err)
		}
		mult := uint64(1)
		if len(fields) > 1 {
			if strings.ToLower(fields[1]) != "kb" {
				return nil, fmt.Errorf("%w: %s: %s is in %q, want kB", ErrProcFormat, path, key, fields[1])
			}
			mult = 1024
		}
		out[key] = v * mult
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	return out, nil
}

// ProcessSample is one reading of a process's resource use. CPU percent
// needs two of them; see ProcessCPUPercent.
type ProcessSample struct {
	PID int
	// CPUSeconds is user+system CPU time used since the process started.
	CPUSeconds float64
	// StartTicks is the process start time in clock ticks after boot; it
	// tells a reused PID apart from the process sampled before.
	StartTicks uint64
	// RSSBytes is the resident set size (VmRSS); 0 for kernel threads.
	RSSBytes uint64
	// SampledAt is when the reading was taken (with a monotonic clock
	// reading, so differences are immune to wall-clock steps).
	SampledAt time.Time
}

// ProcessUsage reads the CPU time and resident memory of process pid, e.g.
// a VM replica's hypervisor process. It returns an error wrapping
// os.ErrNotExist once the process has gone.
func (h *HostSampler) ProcessUsage(pid int) (ProcessSample, error) {
	if pid <= 0 {
		return ProcessSample{}, fmt.Errorf("metrics: invalid pid %d", pid)
	}
	now := time.Now()
	dir := filepath.Join(h.root, strconv.Itoa(pid))
	statPath := filepath.Join(dir, "stat")
	data, err := os.ReadFile(statPath)
	if err != nil {
		return ProcessSample{}, err
	}
	// The command name (field 2) is in parentheses and may itself contain
	// spaces and ')', so split after the LAST ')'.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return ProcessSample{}, fmt.Errorf("%w: %s has no command name", ErrProcFormat, statPath)
	}
	fields := strings.Fields(string(data[i+1:]))
	// fields[0] is field 3 (state), so field n is fields[n-3]:
	// utime=14, stime=15, starttime=22.
	if len(fields) < 20 {
		return ProcessSample{}, fmt.Errorf("%w: %s has %d fields after the name, want at least 20", ErrProcFormat, statPath, len(fields))
	}
	var v [3]uint64
	for j, n := range [3]int{14, 15, 22} {
		v[j], err = strconv.ParseUint(fields[n-3], 10, 64)
		if err != nil {
			return ProcessSample{}, fmt.Errorf("%w: %s field %d: %v", ErrProcFormat, statPath, n, err)
		}
	}
	kv, err := readKB(filepath.Join(dir, "status"), "VmRSS")
	if err != nil {
		return ProcessSample{}, err
	}
	return ProcessSample{
		PID:        pid,
		CPUSeconds: float64(v[0]+v[1]) / clockTicksPerSecond,
		StartTicks: v[2],
		RSSBytes:   kv["VmRSS"],
		SampledAt:  now,
	}, nil
}

// ProcessCPUPercent is the CPU use of a process between two samples, as a
// percentage of one CPU (like top: a process busy on two cores shows 200).
// It returns 0 when the samples are not of the same process (different
// PID or start time), not in order, or taken at the same instant.
func ProcessCPUPercent(prev, cur ProcessSample) float64 {
	if prev.PID != cur.PID || prev.StartTicks != cur.StartTicks || cur.CPUSeconds < prev.CPUSeconds {
		return 0
	}
	dt := cur.SampledAt.Sub(prev.SampledAt).Seconds()
	if dt <= 0 {
		return 0
	}
	return 100 * (cur.CPUSeconds - prev.CPUSeconds) / dt
}
