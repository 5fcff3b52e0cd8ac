package kvm

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/berth-dev/berth/internal/vm/replicadir"
)

// A /dev/kvm that opens is not a KVM that boots guests: on a nested host
// (seen with the kvm-pvm module) VMs are created, but QEMU dies setting an
// MSR with -cpu host, and a Debian kernel on other CPU models hangs before
// its first message or right after "Probing EDD". So the driver, when not
// told the accelerator, decides by what works: ProbeAccel boots the guest
// kernel under KVM with an initramfs whose init is busybox printing
// probeMarker, and takes KVM only if the marker reaches the serial console
// (userspace ran) within the timeout; otherwise TCG, with the reason. The
// answer is cached per kernel, QEMU and host kernel (probeKey), so a host
// pays the probe (at most the timeout) once.

// DefaultProbeTimeout bounds a probe boot. A kernel under working KVM
// reaches its init in well under two seconds, also on a busy host.
const DefaultProbeTimeout = 15 * time.Second

// probeMarker is what the probe's init prints. The command line holds its
// parts only apart (printf joins them), so the kernel echoing its command
// line cannot fake it.
const probeMarker = "berth-probe-userspace"

// probeInit is the part of the probe's kernel command line after rdinit=:
// busybox as init (its argv[0] is busybox, so the first argument names the
// applet) printing the marker; the kernel then panics (init exited) and,
// with panic=-1, reboots, which -no-reboot turns into QEMU's exit.
const probeInit = "/bin/busybox -- printf %s-%s\\n berth-probe userspace"

// kvmDevice is the device ProbeAccel and kvmUsable open; tests point it
// elsewhere.
var kvmDevice = "/dev/kvm"

// ProbeOptions says what ProbeAccel boots.
type ProbeOptions struct {
	// QEMU is the QEMU system emulator's path. Required.
	QEMU string
	// Kernel is the guest kernel, as the driver boots it under KVM.
	// Required.
	Kernel string
	// Initrd is an initramfs with a statically linked busybox at
	// /bin/busybox: WriteInitrd's or WriteProbeInitrd's. Required.
	Initrd string
	// CacheDir holds the answers, one file per probeKey. Empty means no
	// cache.
	CacheDir string
	// Timeout bounds the probe boot; zero means DefaultProbeTimeout.
	Timeout time.Duration
}

// ProbeResult is ProbeAccel's answer.
type ProbeResult struct {
	Accel string `json:"accel"` // "kvm" or "tcg"
	// Reason says why: why not KVM for "tcg", how long the probe boot
	// took for "kvm".
	Reason string    `json:"reason"`
	At     time.Time `json:"at"` // when the probe ran
	// Cached is true when the answer is a cached one.
	Cached bool `json:"-"`
}

// ProbeAccel decides the accelerator for o.Kernel on this host: "tcg" when
// the KVM device cannot be opened, else "kvm" if a probe boot under KVM
// reaches userspace (see above), "tcg" if not. It never fails: what goes
// wrong is the reason for TCG. A probe cut short by ctx is not cached.
func ProbeAccel(ctx context.Context, o ProbeOptions) ProbeResult {
	now := time.Now().UTC()
	if err := kvmUsable(); err != nil {
		return ProbeResult{Accel: "tcg", Reason: fmt.Sprintf("cannot open %s: %v", kvmDevice, err), At: now}
	}
	key, err := probeKey(ctx, o)
	if err != nil {
		return ProbeResult{Accel: "tcg", Reason: "cannot probe KVM: " + err.Error(), At: now}
	}
	var cache string
	if o.CacheDir != "" {
		cache = filepath.Join(o.CacheDir, key+".json")
		var r ProbeResult
		if b, err := os.ReadFile(cache); err == nil && json.Unmarshal(b, &r) == nil && (r.Accel == "kvm" || r.Accel == "tcg") {
			r.Cached = true
			return r
		}
	}
	t0 := time.Now()
	r := ProbeResult{Accel: "kvm", At: now}
	if err := probeBoot(ctx, o); err != nil {
		r.Accel, r.Reason = "tcg", fmt.Sprintf("%s opens, but a probe boot of %s under KVM failed: %v", kvmDevice, o.Kernel, err)
	} else {
		r.Reason = fmt.Sprintf("a probe boot of %s under KVM reached userspace in %v", o.Kernel, time.Since(t0).Round(time.Millisecond))
	}
	if cache != "" && ctx.Err() == nil {
		if b, err := json.Marshal(r); err == nil {
			if os.MkdirAll(o.CacheDir, 0o755) == nil {
				replicadir.WriteAtomic(o.CacheDir, filepath.Base(cache), b, 0o600)
			}
		}
	}
	return r
}

// probeKey identifies what a probe's answer depends on: the kernel (path,
// size, modification time), QEMU (its path and version) and the host's
// kernel (its release and version, which carry the KVM module).
func probeKey(ctx context.Context, o ProbeOptions) (string, error) {
	if o.QEMU == "" || o.Kernel == "" || o.Initrd == "" {
		return "", errors.New("ProbeOptions.QEMU, Kernel and Initrd are required")
	}
	fi, err := os.Stat(o.Kernel)
	if err != nil {
		return "", err
	}
	kernel, _ := filepath.Abs(o.Kernel)
	vctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	ver, err := exec.CommandContext(vctx, o.QEMU, "-version").Output()
	if err != nil {
		return "", fmt.Errorf("%s -version: %v", o.QEMU, err)
	}
	var uts syscall.Utsname
	syscall.Uname(&uts)
	h := sha256.New()
	fmt.Fprintf(h, "berth-kvm-probe-1\x00%s\x00%d\x00%d\x00%s\x00%s\x00%s\x00%s",
		kernel, fi.Size(), fi.ModTime().UnixNano(), o.QEMU, bytes.TrimSpace(ver), utsString(uts.Release[:]), utsString(uts.Version[:]))
	return hex.EncodeToString(h.Sum(nil))[:32], nil
}

func utsString(b []int8) string {
	s := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		s = append(s, byte(c))
	}
	return string(s)
}

// probeTailLines is how much of the console and of QEMU's stderr a failed
// probe reports.
const probeTailLines = 5

// probeBoot boots o.Kernel under KVM on a microvm (the CPU the driver
// gives KVM guests) and returns nil once probeMarker reaches the serial
// console, or an error saying what happened instead: QEMU's exit and
// stderr, or the timeout and the console's last lines.
func probeBoot(ctx context.Context, o ProbeOptions) error {
	timeout := o.Timeout
	if timeout <= 0 {
		timeout = DefaultProbeTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.Command(o.QEMU,
		"-machine", "microvm,isa-serial=on,rtc=on",
		"-accel", "kvm", "-cpu", "host", "-m", "256", "-smp", "1",
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		"-chardev", "stdio,id=console,signal=off", "-serial", "chardev:console",
		"-kernel", o.Kernel, "-initrd", o.Initrd,
		"-append", "console=ttyS0 panic=-1 quiet rdinit="+probeInit)
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return err
	}
	found := make(chan bool, 1)
	var console tailBuf
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := strings.TrimRight(sc.Text(), "\r")
			if strings.TrimSpace(line) == probeMarker {
				found <- true
				io.Copy(io.Discard, out)
				return
			}
			console.add(line)
		}
		found <- false
	}()
	var ok bool
	select {
	case ok = <-found:
	case <-ctx.Done():
	}
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	werr := cmd.Wait()
	if ok {
		return nil
	}
	var why string
	if ctx.Err() != nil {
		why = fmt.Sprintf("no sign of userspace within %v", time.Since(t0).Round(time.Second))
		if errors.Is(ctx.Err(), context.Canceled) {
			why = "the probe was cancelled"
		}
	} else {
		why = fmt.Sprintf("QEMU ended (%v) without the guest reaching userspace", werr)
	}
	if s := lastLines(stderr.String(), probeTailLines); s != "" {
		why += "; QEMU said: " + s
	}
	if s := console.String(); s != "" {
		why += "; the console ends: " + s
	} else {
		why += "; the console stayed empty"
	}
	return errors.New(why)
}

// tailBuf keeps the last probeTailLines non-empty lines added to it; it is
// safe for one writer and a reader after the writer is done or abandoned.
type tailBuf struct {
	mu    sync.Mutex
	lines []string
}

func (t *tailBuf) add(line string) {
	if strings.TrimSpace(line) == "" {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lines = append(t.lines, line)
	if len(t.lines) > probeTailLines {
		t.lines = t.lines[len(t.lines)-probeTailLines:]
	}
}

func (t *tailBuf) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.Join(t.lines, " | ")
}

// lastLines is the last n non-empty lines of s, joined by " | ".
func lastLines(s string, n int) string {
	var ls []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			ls = append(ls, l)
		}
	}
	if len(ls) > n {
		ls = ls[len(ls)-n:]
	}
	return strings.Join(ls, " | ")
}

// WriteProbeInitrd writes the smallest initramfs ProbeAccel can boot to w:
// a statically linked busybox at /bin/busybox and /dev/console (an
// uncompressed newc cpio). For callers without WriteInitrd's initramfs at
// hand, such as `berth host check`.
func WriteProbeInitrd(w io.Writer, busybox string) error {
	bb, err := os.ReadFile(busybox)
	if err != nil {
		return fmt.Errorf("kvm: probe initrd: %w", err)
	}
	cw := &cpioWriter{w: w}
	cw.dir("bin")
	cw.dir("dev")
	cw.node("dev/console", 0o020600, 5, 1)
	cw.file("bin/busybox", 0o755, bb)
	cw.trailer()
	return cw.err
}

// ProbeCacheDir is where berth keeps ProbeAccel's answers in its data
// directory: shared by the kvm and libvirt drivers of berth serve and by
// berth host check, which probe the same kernel.
func ProbeCacheDir(dataDir string) string { return filepath.Join(dataDir, "kvm-probe") }

// ProbeKernel is ProbeAccel for a kernel without an initramfs at hand: it
// boots kernel with WriteProbeInitrd's initramfs made from busybox (a
// static one), with the QEMU qemu names (a path or a name looked up in
// PATH; "" means qemu-system-x86_64), caching in cacheDir. The cache key
// is the kernel's and QEMU's, so the driver's own probe of the same kernel
// finds this answer, and the other way round.
func ProbeKernel(ctx context.Context, qemu, kernel, busybox, cacheDir string) ProbeResult {
	if err := kvmUsable(); err != nil {
		return ProbeResult{Accel: "tcg", Reason: fmt.Sprintf("cannot open %s: %v", kvmDevice, err), At: time.Now().UTC()}
	}
	fail := func(err error) ProbeResult {
		return ProbeResult{Accel: "tcg", Reason: "cannot probe KVM: " + err.Error(), At: time.Now().UTC()}
	}
	if qemu == "" {
		qemu = "qemu-system-x86_64"
	}
	p, err := exec.LookPath(qemu)
	if err != nil {
		return fail(err)
	}
	if qemu, err = filepath.Abs(p); err != nil {
		return fail(err)
	}
	if kernel, err = filepath.Abs(kernel); err != nil {
		return fail(err)
	}
	f, err := os.CreateTemp("", "berth-probe-initrd-*")
	if err != nil {
		return fail(err)
	}
	defer os.Remove(f.Name())
	err = WriteProbeInitrd(f, busybox)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fail(err)
	}
	return ProbeAccel(ctx, ProbeOptions{QEMU: qemu, Kernel: kernel, Initrd: f.Name(), CacheDir: cacheDir})
}
