package container

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/replicadir"
	"github.com/berth-dev/berth/internal/vm/vmtest"
)

// TestDiskLimit checks that a replica with a disk size cannot write past
// it: dd of more than 1 GiB in a 1 GiB replica fails with ENOSPC, and the
// replica goes on to serve.
func TestDiskLimit(t *testing.T) {
	d := newDriver(t)
	if d.noDisk != "" {
		t.Skipf("disk sizes cannot be enforced here: %s", d.noDisk)
	}
	// The report is written aside and renamed, so the test never reads
	// it half written.
	s := spec("disk", `r=/.berth/run/dd.tmp; dd if=/dev/zero of=/big bs=1M count=1100 2>$r; echo "exit $?" >>$r; df -k / >>$r; rm -f /big; mv $r /.berth/run/dd.out; `+app)
	s.DiskSizeGB = 1
	start(t, d, s)
	out := d.path(s.Name, runDir, "dd.out")
	eventually(t, "dd to end", func() bool {
		_, err := os.Stat(out)
		return err == nil
	})
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("in the container:\n%s", b)
	if !strings.Contains(string(b), "No space left on device") || strings.Contains(string(b), "exit 0\n") {
		t.Errorf("dd of 1100 MiB into a 1 GiB replica: %q, want it to fail with ENOSPC", b)
	}
	inst, err := d.Inspect(t.Context(), s.Name)
	if err != nil || inst.State != vm.StateRunning {
		t.Errorf("after the full disk: %+v, %v; want the replica running", inst, err)
	}
}

// TestDiskSize checks the disk sizes Start refuses.
func TestDiskSize(t *testing.T) {
	d := newDriver(t)
	for _, gb := range []int{-1, maxDiskGB + 1} {
		s := spec("disksize", app)
		s.DiskSizeGB = gb
		if _, err := d.Start(t.Context(), s); err == nil || !strings.Contains(err.Error(), "disk size") {
			d.Stop(context.Background(), s.Name, time.Second)
			t.Errorf("Start with disk size %d GB: %v, want a disk size error", gb, err)
		}
	}
}

// TestFailsAtOnce checks that an app that ends at once is reported ended,
// with its exit code and its last output lines (the tail only) in the
// reason, for the pool's back-off to show.
func TestFailsAtOnce(t *testing.T) {
	d := newDriver(t)
	s := spec("fails", "for i in 1 2 3 4 5 6 7; do echo boot line $i; done; exit 7")
	start(t, d, s)
	var got vm.Instance
	eventually(t, "the app to end", func() bool {
		var err error
		if got, err = d.Inspect(t.Context(), s.Name); err != nil {
			t.Fatal(err)
		}
		return got.State.Terminal()
	})
	if got.ExitCode == nil || *got.ExitCode != 7 {
		t.Errorf("exit code %v, want 7", got.ExitCode)
	}
	for i := 3; i <= 7; i++ {
		if line := "boot line " + strconv.Itoa(i); !strings.Contains(got.Reason, line) {
			t.Errorf("reason %q lacks %q", got.Reason, line)
		}
	}
	if strings.Contains(got.Reason, "boot line 2") {
		t.Errorf("reason %q has more than the last %d lines", got.Reason, replicadir.TailLines)
	}
}

// BenchmarkStartDisk measures Start, and its mount step, with and without
// a disk size: what the replica's own filesystem adds to a start (a clone
// of the empty ext4 template, a loop device, an ext4 mount). The template
// is made before the timing starts.
func BenchmarkStartDisk(b *testing.B) {
	for _, gb := range []int{0, 1, 10} {
		b.Run("gb="+strconv.Itoa(gb), func(b *testing.B) {
			d := newDriver(b)
			if gb > 0 {
				if d.noDisk != "" {
					b.Skip(d.noDisk)
				}
				if _, err := d.diskTemplate(gb); err != nil {
					b.Fatal(err)
				}
			}
			var mu sync.Mutex
			var mounts, starts []time.Duration
			d.trace = func(step string, dur time.Duration) {
				if step == "mount" {
					mu.Lock()
					mounts = append(mounts, dur)
					mu.Unlock()
				}
			}
			for b.Loop() {
				s := spec("bench", app)
				s.DiskSizeGB = gb
				t0 := time.Now()
				if _, err := d.Start(context.Background(), s); err != nil {
					b.Fatal(err)
				}
				starts = append(starts, time.Since(t0))
				b.StopTimer()
				if err := d.Stop(context.Background(), s.Name, time.Second); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			vmtest.ReportP50P90(b, "start", starts)
			vmtest.ReportP50P90(b, "mount", mounts)
		})
	}
}
