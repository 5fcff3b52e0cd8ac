package kvm

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/vm"
)

// fakeKVM points kvmDevice at a file that opens read-write, as a nested
// /dev/kvm does, for the test's duration.
func fakeKVM(t *testing.T) {
	t.Helper()
	old := kvmDevice
	kvmDevice = touch(t, "kvm")
	t.Cleanup(func() { kvmDevice = old })
}

// fakeQEMU writes an executable "QEMU" that answers -version, appends a
// line to <dir>/boots for every other run, and then runs body (sh).
func fakeQEMU(t *testing.T, body string) (qemu, boots string) {
	t.Helper()
	dir := t.TempDir()
	boots = filepath.Join(dir, "boots")
	qemu = filepath.Join(dir, "qemu-system-x86_64")
	script := "#!/bin/sh\n" +
		"if [ \"$1\" = -version ]; then echo 'QEMU emulator version 0.0.1 (fake)'; exit 0; fi\n" +
		"echo run >> " + boots + "\n" + body + "\n"
	if err := os.WriteFile(qemu, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return qemu, boots
}

func countLines(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Count(b, []byte("\n"))
}

// The kernel's own echo of its command line, which holds the probe's
// arguments: it must not pass for the marker.
const fakeCmdline = `echo "[    0.000000] Command line: console=ttyS0 panic=-1 quiet rdinit=` + probeInit + `"`

func TestProbeAccel(t *testing.T) {
	fakeKVM(t)
	kernel, initrd := touch(t, "vmlinuz"), touch(t, "initrd.img")
	tests := []struct {
		name      string
		body      string
		accel     string
		wantWhy   []string
		unwanted  []string
		cachedRun bool
	}{
		{
			name:    "userspace runs",
			body:    fakeCmdline + "\necho 'Run /bin/busybox as init process'\necho " + probeMarker + "\nexec sleep 600",
			accel:   "kvm",
			wantWhy: []string{"reached userspace"},
		},
		{
			// The nested kvm-pvm host: the kernel stops after its
			// real-mode setup.
			name:    "the guest hangs",
			body:    fakeCmdline + "\necho 'Probing EDD (edd=off to disable)... ok'\nexec sleep 600",
			accel:   "tcg",
			wantWhy: []string{"opens, but a probe boot", "no sign of userspace", "Probing EDD (edd=off to disable)... ok"},
		},
		{
			name:    "QEMU fails",
			body:    "echo 'qemu-system-x86_64: error: failed to set MSR 0x10a to 0x69' >&2\nexit 1",
			accel:   "tcg",
			wantWhy: []string{"QEMU ended (exit status 1)", "failed to set MSR 0x10a", "the console stayed empty"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			qemu, boots := fakeQEMU(t, tt.body)
			o := ProbeOptions{QEMU: qemu, Kernel: kernel, Initrd: initrd, CacheDir: t.TempDir(), Timeout: 2 * time.Second}
			r := ProbeAccel(t.Context(), o)
			if r.Accel != tt.accel || r.Cached {
				t.Errorf("ProbeAccel = %+v, want accel %s, not cached", r, tt.accel)
			}
			for _, w := range tt.wantWhy {
				if !strings.Contains(r.Reason, w) {
					t.Errorf("reason %q does not say %q", r.Reason, w)
				}
			}
			if n := countLines(t, boots); n != 1 {
				t.Errorf("%d probe boots, want 1", n)
			}
			// Cached: the same answer without another boot.
			r2 := ProbeAccel(t.Context(), o)
			if r2.Accel != r.Accel || r2.Reason != r.Reason || !r2.Cached {
				t.Errorf("second ProbeAccel = %+v, want the first's answer, cached", r2)
			}
			if n := countLines(t, boots); n != 1 {
				t.Errorf("%d probe boots after the cached answer, want 1", n)
			}
			// Another kernel (a new modification time): probed again.
			later := time.Now().Add(time.Hour)
			if err := os.Chtimes(kernel, later, later); err != nil {
				t.Fatal(err)
			}
			if r3 := ProbeAccel(t.Context(), o); r3.Cached || r3.Accel != tt.accel {
				t.Errorf("ProbeAccel after the kernel changed = %+v, want a fresh %s", r3, tt.accel)
			}
			if n := countLines(t, boots); n != 2 {
				t.Errorf("%d probe boots after the kernel changed, want 2", n)
			}
		})
	}

	t.Run("no KVM device", func(t *testing.T) {
		qemu, boots := fakeQEMU(t, "echo "+probeMarker)
		kvmDevice = filepath.Join(t.TempDir(), "kvm")
		r := ProbeAccel(t.Context(), ProbeOptions{QEMU: qemu, Kernel: kernel, Initrd: initrd})
		if r.Accel != "tcg" || !strings.Contains(r.Reason, "cannot open") {
			t.Errorf("ProbeAccel without a KVM device = %+v, want tcg saying it cannot open it", r)
		}
		if n := countLines(t, boots); n != 0 {
			t.Errorf("%d probe boots without a KVM device, want none", n)
		}
	})
}

// TestWriteProbeInitrd checks the probe's initramfs: busybox and the
// console, nothing else needed.
func TestWriteProbeInitrd(t *testing.T) {
	bb := staticELF(t)
	var b bytes.Buffer
	if err := WriteProbeInitrd(&b, bb); err != nil {
		t.Fatal(err)
	}
	ents := readCpio(t, b.Bytes())
	want, _ := os.ReadFile(bb)
	if e, ok := ents["bin/busybox"]; !ok || !bytes.Equal(e.data, want) || e.mode&0o111 == 0 {
		t.Errorf("bin/busybox: %+v, want the executable busybox", e)
	}
	if e, ok := ents["dev/console"]; !ok || e.mode&0o170000 != 0o020000 {
		t.Errorf("dev/console: %+v, want a character device", e)
	}
}

// tapNet hands out one tap name without creating anything.
type tapNet struct{}

func (tapNet) CreateTap(ctx context.Context, id string) (string, string, string, string, error) {
	return "tap0", "10.0.0.2/30", "10.0.0.1", "", nil
}
func (tapNet) DeleteTap(ctx context.Context, id string) error { return nil }

// TestStartProbesOnce starts replicas concurrently on a driver that was
// not told its accelerator, with a /dev/kvm that opens and a "QEMU" whose
// KVM guests never start: one probe decides TCG for all of them, the
// reason is kept, and the failed start says what QEMU logged.
func TestStartProbesOnce(t *testing.T) {
	fakeKVM(t)
	release := filepath.Join(t.TempDir(), "release")
	qemu, boots := fakeQEMU(t, `
for a in "$@"; do
	if [ "$prev" = -D ]; then log=$a; fi
	prev=$a
done
if [ -n "$log" ]; then
	# Daemonized: QEMU's errors go to its -D log.
	echo "qemu-system-x86_64: -netdev tap,id=net0: could not configure /dev/net/tun (tap0): Operation not permitted" > "$log"
	exit 1
fi
while [ ! -e `+release+` ]; do sleep 0.01; done
echo 'qemu-system-x86_64: error: failed to set MSR 0x10a to 0x69' >&2
exit 1`)
	o := validOptions(t)
	o.Accel, o.QEMUBin, o.Net, o.ProbeCache = "", qemu, tapNet{}, t.TempDir()
	d, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	if a := d.Accel(); a != "" {
		t.Errorf("Accel before the first Start = %q, want undecided", a)
	}
	const n = 3
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			_, errs[i] = d.Start(context.Background(), vm.Spec{Name: vm.Name("app", uint64(i+1)), Image: "img"})
		})
	}
	// The probe is under way once it has booted; the Starts wait for it.
	for countLines(t, boots) == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if got := countLines(t, boots); got != 1+n {
		t.Errorf("%d QEMU runs, want one probe and %d starts", got, n)
	}
	if d.Accel() != "tcg" || !strings.Contains(d.AccelReason(), "failed to set MSR") {
		t.Errorf("Accel %q (%s), want tcg saying why", d.Accel(), d.AccelReason())
	}
	for i, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "could not configure /dev/net/tun") {
			t.Errorf("Start %d: %v, want QEMU's logged reason", i, err)
		}
	}
}
