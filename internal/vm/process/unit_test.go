package process

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/syncbuf"
	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/console"
	"github.com/berth-dev/berth/internal/vm/proc"
	"github.com/berth-dev/berth/internal/vm/replicadir"
	"github.com/google/go-cmp/cmp"
)

func TestLimits(t *testing.T) {
	tests := []struct {
		class string
		want  map[string]string
	}{
		{"micro", map[string]string{"cpu.max": "100000 100000", "memory.max": "268435456", "pids.max": "512"}},
		{"small", map[string]string{"cpu.max": "100000 100000", "memory.max": "1073741824", "pids.max": "512"}},
		{"xlarge", map[string]string{"cpu.max": "800000 100000", "memory.max": "8589934592", "pids.max": "512"}},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, limits(vm.Sizes[tt.class], DefaultPidsMax, false)); diff != "" {
			t.Errorf("limits(%s) (-want +got):\n%s", tt.class, diff)
		}
	}
	// In the background (StartBackground): the lowest CPU weight too.
	want := map[string]string{"cpu.max": "100000 100000", "memory.max": "1073741824", "pids.max": "512", "cpu.weight": "1"}
	if diff := cmp.Diff(want, limits(vm.Sizes["small"], DefaultPidsMax, true)); diff != "" {
		t.Errorf("limits(small, low) (-want +got):\n%s", diff)
	}
	v1 := limitsV1(vm.Sizes["small"], DefaultPidsMax, true)["cpu"]
	if last := v1[len(v1)-1]; last != [2]string{"cpu.shares", "2"} {
		t.Errorf("limitsV1(small, low) cpu = %v, want cpu.shares 2 last", v1)
	}
	for _, kv := range limitsV1(vm.Sizes["small"], DefaultPidsMax, false)["cpu"] {
		if kv[0] == "cpu.shares" {
			t.Errorf("limitsV1(small) sets %v; a normal replica keeps the default", kv)
		}
	}
}

// TestCgroupCreate writes a replica's cgroup into a plain directory standing
// in for a cgroup v2 parent: the files the kernel would enforce are the test.
func TestCgroupCreate(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	for _, tt := range []struct {
		name        string
		cpu, memory bool
		low         bool
		want        []string
	}{
		{"both", true, true, false, []string{"cpu.max=200000 100000", "memory.max=2147483648"}},
		{"memory only", false, true, false, []string{"memory.max=2147483648"}},
		{"none", false, false, false, nil},
		{"background", true, true, true, []string{"cpu.max=200000 100000", "cpu.weight=1", "memory.max=2147483648"}},
		{"background without cpu", false, true, true, []string{"memory.max=2147483648"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cg := cgroupConfig{parent: t.TempDir(), cpu: tt.cpu, memory: tt.memory}
			dir, f, err := cg.create("berth-x-0123456789ab", vm.Sizes["medium"], tt.low, log)
			if err != nil {
				t.Fatal(err)
			}
			f.Close()
			var got []string
			for _, name := range []string{"cpu.max", "cpu.weight", "memory.max"} {
				if b, err := os.ReadFile(filepath.Join(dir, name)); err == nil {
					got = append(got, name+"="+string(b))
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("cgroup files (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSetupCgroupsDegrades(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	for _, parent := range []string{"none", t.TempDir(), "/proc/no/such/dir"} {
		if cg := setupCgroups(parent, DefaultPidsMax, log); cg.parent != "" {
			t.Errorf("setupCgroups(%q) = %+v, want no cgroups (not a cgroup v2 directory)", parent, cg)
		}
	}
}

// logLine renders one agent log line.
func logLine(stream, text string) string {
	b, _ := json.Marshal(console.Entry{T: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC), S: stream, M: text})
	return string(b) + "\n"
}

func TestReadLogs(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, logFile)
	old := logLine("stdout", "old 1") + logLine("agent", "rotated") + logLine("stderr", "old 2")
	// Enough lines to need more than one backwards chunk.
	var cur strings.Builder
	for i := range 1200 {
		cur.WriteString(logLine("stdout", fmt.Sprintf("line %d %s", i, strings.Repeat("x", 40))))
	}
	cur.WriteString(logLine("agent", "exited with code 0"))
	cur.WriteString(`{"t":"2025-01-02T03:04:05Z","s":"stdout","m":"partial`) // still being written
	if err := os.WriteFile(path+".1", []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(cur.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	texts := func(lines []vm.LogLine) []string {
		var out []string
		for _, l := range lines {
			out = append(out, l.Stream+":"+l.Text)
		}
		return out
	}
	line := func(i int) string { return fmt.Sprintf("stdout:line %d %s", i, strings.Repeat("x", 40)) }
	tests := []struct {
		n     int
		first []string // the first lines of the answer
		count int
	}{
		{1, []string{line(1199)}, 1},
		{1000, []string{line(200)}, 1000},
		{1201, []string{"stderr:old 2", line(0)}, 1201},
		{0, []string{"stdout:old 1", "stderr:old 2", line(0)}, 1202},
		{-1, []string{"stdout:old 1"}, 1202},
	}
	for _, tt := range tests {
		got, err := console.ReadRotated(path, tt.n)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != tt.count {
			t.Errorf("console.ReadRotated(n=%d): %d lines, want %d", tt.n, len(got), tt.count)
			continue
		}
		if diff := cmp.Diff(tt.first, texts(got[:len(tt.first)])); diff != "" {
			t.Errorf("console.ReadRotated(n=%d) first lines (-want +got):\n%s", tt.n, diff)
		}
		if last := texts(got[len(got)-1:])[0]; last != line(1199) {
			t.Errorf("console.ReadRotated(n=%d) ends with %q, want %q", tt.n, last, line(1199))
		}
	}
	if got, err := console.ReadRotated(filepath.Join(dir, "missing.log"), 10); err != nil || len(got) != 0 {
		t.Errorf("readLogs of a missing log = %v, %v; want nothing", got, err)
	}
}

// fakeReplica makes a replica directory whose "agent" is this test process,
// so the driver sees it running while the test writes its log.
func fakeReplica(t *testing.T, d *Driver, id string) string {
	t.Helper()
	ps, err := proc.ReadStat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	dir := d.path(id)
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	owner, _ := vm.ParseName(id)
	st := state{ID: id, Deployment: owner, Port: 1, PID: os.Getpid(), StartTicks: ps.StartTicks, StartedAt: time.Now()}
	if err := replicadir.WriteState(dir, st); err != nil {
		t.Fatal(err)
	}
	return dir
}

func appendFile(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

func TestFollowLogsRotation(t *testing.T) {
	d := newDriver(t, t.TempDir(), mustIsolate)
	id := vm.Name("follow", 9)
	dir := fakeReplica(t, d, id)
	if inst, err := d.Inspect(t.Context(), id); err != nil || inst.State != vm.StateRunning {
		t.Fatalf("fake replica: %+v, %v; want running", inst, err)
	}
	path := filepath.Join(dir, logFile)
	appendFile(t, path, logLine("stdout", "before following"))

	var out syncbuf.Buffer
	done := make(chan error, 1)
	go func() { done <- d.FollowLogs(t.Context(), id, &out) }()
	waitOutput := func(want string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !strings.Contains(out.String(), want) {
			if time.Now().After(deadline) {
				t.Fatalf("FollowLogs wrote %q, want it to contain %q", out.String(), want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	// FollowLogs starts at the end of the log as it finds it: write until
	// it is known to be reading.
	for i := 0; !strings.Contains(out.String(), "sync"); i++ {
		if i == 3000 {
			t.Fatal("FollowLogs writes nothing")
		}
		appendFile(t, path, logLine("stdout", fmt.Sprintf("sync %d", i)))
		time.Sleep(10 * time.Millisecond)
	}
	appendFile(t, path, logLine("stdout", "last of the old file")+logLine("agent", "not app output"))
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	appendFile(t, path, logLine("stderr", "first of the new file"))
	waitOutput(logLine("stderr", "first of the new file"))
	got := out.String()
	if strings.Contains(got, "before following") || strings.Contains(got, "not app output") {
		t.Errorf("FollowLogs wrote old or agent lines: %q", got)
	}
	if i, j := strings.Index(got, "last of the old file"), strings.Index(got, "first of the new file"); i < 0 || i > j {
		t.Errorf("FollowLogs lost or reordered lines across rotation: %q", got)
	}

	// Stopping the replica ends the follower.
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, vm.ErrNotFound) {
			t.Errorf("FollowLogs of a removed replica returned %v, want ErrNotFound", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("FollowLogs goes on after the replica was removed")
	}
}

// TestSandboxPath: a sandbox's PATH keeps only the entries its
// unprivileged user can search, so a root-only directory first on berth's
// PATH (a pyenv shim under /root) does not make every command fail with
// "permission denied"; berth's own agents keep the whole PATH.
func TestSandboxPath(t *testing.T) {
	private := t.TempDir() // 0700
	if err := os.Chmod(private, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", private+":relative:/usr/bin:/nonexistent")
	if got := hostPath(true); got != "/usr/bin" {
		t.Errorf("sandbox PATH = %q, want /usr/bin", got)
	}
	if got, want := hostPath(false), private+":relative:/usr/bin:/nonexistent"; got != want {
		t.Errorf("agent PATH = %q, want %q", got, want)
	}
	t.Setenv("PATH", private)
	if got := hostPath(true); !strings.Contains(got, "/usr/bin") {
		t.Errorf("sandbox PATH with nothing searchable = %q, want the standard one", got)
	}
}
