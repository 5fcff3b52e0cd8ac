package kvm

import (
	"context"
	"time"
)

// accelCfg is what follows from the accelerator: what the guests boot and
// how long they may take.
type accelCfg struct {
	accel     string // "kvm" or "tcg"
	reason    string // why this one
	kernel    string // what QEMU boots
	tscKHz    int64  // TCG: the guest's TSC rate, 0 if unknown
	allowance time.Duration
}

// newAccelCfg is the configuration for accel.
func (d *Driver) newAccelCfg(accel, reason string) *accelCfg {
	c := &accelCfg{accel: accel, reason: reason, kernel: d.kernel, allowance: d.allowance0}
	if c.allowance <= 0 {
		c.allowance = time.Minute
	}
	if accel == "tcg" {
		c.tscKHz = hostTSCKHz()
		if d.tcgKernel != "" {
			c.kernel = d.tcgKernel
		}
		if d.allowance0 <= 0 {
			c.allowance = 5 * time.Minute
		}
	}
	return c
}

// current is the decided configuration, or until the first Start's probe
// decides, TCG's as the cautious guess (the longer boot allowance, for
// guests a previous berth started).
func (d *Driver) current() *accelCfg {
	d.accelMu.Lock()
	c := d.acc
	d.accelMu.Unlock()
	if c != nil {
		return c
	}
	c = d.newAccelCfg("tcg", "")
	c.accel = ""
	return c
}

// Accel reports the accelerator the driver's guests run with: "kvm" or
// "tcg"; "" while the first Start's probe has not decided it (Options.Accel
// empty).
func (d *Driver) Accel() string { return d.current().accel }

// AccelReason says why the driver runs its guests with Accel: set by
// Options.Accel, or the probe's finding. "" while undecided.
func (d *Driver) AccelReason() string { return d.current().reason }

// decideAccel returns the accelerator's configuration, deciding it on the
// first call with ProbeAccel. Concurrent callers share one probe, which
// runs on its own: a caller given up on (ctx) does not end it.
func (d *Driver) decideAccel(ctx context.Context) (*accelCfg, error) {
	d.accelMu.Lock()
	if d.acc != nil {
		c := d.acc
		d.accelMu.Unlock()
		return c, nil
	}
	if d.probing == nil {
		d.probing = make(chan struct{})
		go d.probe(context.WithoutCancel(ctx), d.probing)
	}
	done := d.probing
	d.accelMu.Unlock()
	select {
	case <-done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	d.accelMu.Lock()
	defer d.accelMu.Unlock()
	return d.acc, nil
}

// probe decides the accelerator and closes done. ctx is the first
// Start's, without its cancellation: the starts that wait share the probe.
func (d *Driver) probe(ctx context.Context, done chan struct{}) {
	var c *accelCfg
	switch {
	case d.initrd == "":
		// The probe's init is the initramfs's busybox; a kernel that
		// boots without one is taken at its word, as before the probe.
		if err := kvmUsable(); err != nil {
			c = d.newAccelCfg("tcg", "cannot open "+kvmDevice+": "+err.Error())
		} else {
			c = d.newAccelCfg("kvm", kvmDevice+" opens (not probed: no initramfs to probe with)")
		}
	case d.probeQEMU == "":
		c = d.newAccelCfg("tcg", "no qemu-system-x86_64 in PATH to probe KVM with")
	default:
		r := ProbeAccel(ctx, ProbeOptions{QEMU: d.probeQEMU, Kernel: d.kernel, Initrd: d.initrd, CacheDir: d.probeCache})
		c = d.newAccelCfg(r.Accel, r.Reason)
		if r.Cached {
			c.reason += " (cached " + r.At.Format(time.RFC3339) + ")"
		}
	}
	if c.accel == "kvm" {
		d.log.Info("kvm: accelerator", "accel", c.accel, "why", c.reason)
	} else {
		d.log.Warn("kvm: accelerator: guests run under TCG emulation (slow)", "why", c.reason)
	}
	d.accelMu.Lock()
	d.acc, d.probing = c, nil
	d.accelMu.Unlock()
	close(done)
}
