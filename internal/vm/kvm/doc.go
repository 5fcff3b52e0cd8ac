// Package kvm is the vm.Driver that runs each replica as a QEMU guest: a
// microvm machine with KVM acceleration where KVM works, and under TCG
// (emulation) where it does not, so that it runs, slowly, on any x86_64
// Linux host, and is tested on hosts without KVM.
//
// # The accelerator
//
// Unless Options.Accel says, the first Start decides (ProbeAccel): TCG
// where /dev/kvm does not open; else a probe boot of the guest kernel
// under KVM, with busybox as the initramfs's init printing a marker on the
// serial console, and KVM only if the marker arrives (userspace ran)
// within DefaultProbeTimeout. Decision: by what works, not by /dev/kvm
// opening: a nested /dev/kvm (kvm-pvm) opens and creates VMs, but QEMU
// aborts setting an MSR with -cpu host, and Debian's kernel hangs on other
// CPU models. The answer, with its reason (logged, AccelReason, `berth host
// check`), is cached per kernel (path, size, modification time), QEMU
// (path, version) and host kernel in Options.ProbeCache, so a host pays
// the probe (at most the timeout) once; concurrent first Starts share one
// probe, and are starting meanwhile. Under TCG, Options.TCGKernel (the
// unpacked vmlinux) is booted instead of Kernel. A failed QEMU start
// carries what QEMU said (daemonized, it writes to its -D log) and the
// console's last lines.
//
// # A replica
//
// Start copies the image's ext4 disk (Images.Ext4, then cp --reflink=auto),
// asks Network for a tap device and addresses, writes the agent's config
// drive (an agent.GuestConfig, as for the firecracker driver) and starts
// QEMU daemonized (see qemuArgs):
//
//	qemu-system-x86_64 -name <id> -machine microvm,isa-serial=on,rtc=on
//	    -accel kvm|tcg -cpu host|max -m <MiB> -smp <vCPUs>
//	    -nodefaults -no-user-config -display none -no-reboot
//	    -daemonize -pidfile <dir>/qemu.pid -D <dir>/qemu.log
//	    -qmp unix:<dir>/qmp.sock,server=on,wait=off
//	    -chardev file,id=console,append=on,path=<dir>/console.log -serial chardev:console
//	    -device i8042
//	    -kernel <Kernel> -initrd <Initrd> -append <command line>
//	    -drive if=none,id=root,format=raw,file=<dir>/rootfs.ext4 -device virtio-blk-device,drive=root
//	    -drive if=none,id=config,format=raw,readonly=on,file=<dir>/config.img -device virtio-blk-device,drive=config
//	    -netdev tap,id=net0,script=no,downscript=no,ifname=<tap> -device virtio-net-device,netdev=net0,mac=<mac>
//	    -device virtio-serial-device,max_ports=2
//	    -chardev socket,id=agent,server=on,wait=off,path=<dir>/agent.sock
//	    -device virtserialport,chardev=agent,name=berth.agent
//	    [-fsdev local,id=ws,security_model=passthrough,path=<Spec.Workspace>
//	     -device virtio-9p-device,fsdev=ws,mount_tag=berth.workspace]
//	    [-fsdev local,id=m<i>,security_model=passthrough,readonly=on,path=<Spec.Mounts[i].Source>
//	     -device virtio-9p-device,fsdev=m<i>,mount_tag=berth.m<i>]...
//
// Decision: the microvm machine type. It has no PCI bus and no BIOS to run
// (qboot), which matters most under TCG: measured here, Debian's kernel
// reached its init after about 2.5 s of guest time on microvm against 6-9
// s on pc or q35 with SeaBIOS, and the whole boot took about half the wall
// time. The i8042 keyboard controller is added for two things: reboot=k
// (the agent reboots the guest when it is done, which makes QEMU, with
// -no-reboot, exit) and Ctrl-Alt-Del (Stop's polite shutdown: QMP send-key,
// which the agent as init receives as SIGINT); the kernel finds it through
// the ACPI tables QEMU writes (PNP0303), and skips the mouse port
// (i8042.noaux). Under TCG the kernel is
// also told the TSC rate (tsc_early_khz, the host's, see hostTSCKHz):
// a microvm has no HPET or ACPI PM timer, and calibrating the TSC against
// the emulated PIT fails on a busy host, which hung one boot in four here.
//
// The kernel command line is
//
//	console=ttyS0 reboot=k panic=1 quiet i8042.noaux
//	[tsc_early_khz=<host>] berth_root=/dev/vda berth_ip=<guest>/<bits> berth_gw=<host>
//	[berth_workspace=berth.workspace] [berth_mounts=berth.m0:<target>,...] [Options.KernelArgs]
//	-- /berth-agent [Options.GuestInitArgs] agent --vm-init --config /dev/vdb
//
// # The workspace
//
// A Spec.Workspace (a Computer's files, a host directory that outlives the
// replica and moves between backings) is shared into the guest with virtio
// 9p, QEMU's local file system driver, under the tag berth.workspace
// (WorkspaceTag), and the initramfs mounts it at /workspace before it
// switches to the root disk (WorkspaceModules, WorkspaceMountOptions:
// 9p2000.L, msize 256 KiB, cache=mmap, nosuid, nodev). The agent is rooted there
// (--root /workspace), and /workspace is HOME and the base of a relative
// WorkDir, as in the container driver, so a Computer sees the same tree on
// every backing.
//
// Decision: 9p, not a disk image or virtiofs. The workspace must stay the
// host directory (the process and container backings use it as it is),
// which rules out an image; virtiofs needs virtiofsd and shared memory
// backing for the guest's RAM. Decision: security_model=passthrough: QEMU
// runs as root and files get the owners and modes the guest gives them,
// as through a container's bind mount. Not mapped-xattr: berth captures a
// deployment's workspace (vm.workspace) from the host directory, which
// must then be the tree the guest sees, and under mapped-xattr every host
// file is QEMU's, 0600 (directories 0700), with the guest's owner and mode
// in user.virtfs.* attributes and symlinks stored as regular files; files
// berth restores into the next replica's directory, having no attributes,
// would be root's 0600 in the guest. Not none either: it is passthrough
// that ignores failed chowns. What passthrough would let a guest's root do
// to the host is taken away elsewhere: QEMU starts without CAP_MKNOD
// (runWithoutMknod), so the guest can make no device node there; the
// guest mounts the share nosuid,nodev; and a snapshot keeps no file's
// set-user-ID or set-group-ID bit (package workspace), so a set-ID file a
// guest made stays in its replica's directory (under berth's data
// directory) until the capture. With an image user (Spec.User) the
// replica's directory is chowned to it before boot, so the app can write
// its workspace, the restored files included. The host's lease deadline
// reaches such a guest through the agent's /v1/lease, since its file
// endpoints are rooted in /workspace. Decision: cache=mmap, not loose:
// no page cache but for mapped files (shared writable mappings, such as
// SQLite's, need it), so each write reaches the host file at once and
// survives a guest killed at Stop; berth's file API writes through the
// agent in the guest, and the host reads the directory only while the
// guest is stopped.
//
// Cost (TCG on a 2-core host, TestWorkspace logs it): 32 MiB written with
// fsync and read back cold at 120-200 MiB/s, no slower than the
// virtio-blk root disk under emulation (30-60 MiB/s written, 100-150
// read); metadata is where 9p pays, a round trip through QEMU per call:
// 200 small files created, read and removed took 2.8 s against 0.17 s on
// the root disk (cache=loose brought it to 0.9 s, and large writes down
// to about 20 MiB/s).
//
// # Mounts
//
// The driver is a vm.Mounter for read-only mounts only (WritableMounts is
// false). Each of Spec.Mounts (vm.mounts: an artifact unpacked into a
// content-addressed host tree that every replica of the deployment
// shares) is a second kind of 9p share, the i-th under the tag berth.m<i>
// (MountTag) with QEMU's readonly=on, so QEMU refuses the guest's writes
// whatever the guest does (a remount rw included). The command line lists
// them as berth_mounts=<tag>:<target>,..., and the initramfs makes each
// target on the root disk (mkdir -p) and mounts it there with
// MountOptions (ro and the workspace's 9p options) before switch_root.
//
// Decision: a writable mount is refused, saying why: through a 9p share a
// guest's writes land in the host tree itself, which every replica of the
// deployment (and the next one) shares. Decision: targets may only hold
// A-Z a-z 0-9 / . _ - + @, since they travel on the kernel command line,
// whose parser splits at spaces and reads quotes, and berth_mounts= is
// split at commas and colons (spec validation allows fewer still). Mounts
// need the initramfs (Options.Initrd), which mounts them.
//
// # The guest kernel and its initramfs
//
// The kernel is configured per host (Options.Kernel). The tested one is
// Debian's (linux-image-amd64, 6.1 on bookworm): /boot/vmlinuz-<release>,
// or, faster under TCG because nothing is decompressed, the vmlinux inside
// it (the xz stream after the setup code, decompressed; QEMU boots it
// through its PVH entry). Debian's kernel is modular: virtio-mmio, virtio
// block, net and console, and ext4 are modules, and it has no IP_PNP. So
// the driver boots it with a small initramfs (Options.Initrd) that
// WriteInitrd builds from the kernel's module tree and a static busybox:
// its /init loads those modules, mounts /dev/vda (and the workspace and
// the mounts, see above), gives eth0 its address and default route (berth_ip, berth_gw),
// and switch_roots to the agent.
// A kernel with all of that built in can boot without one (NoInitrd; it
// then gets root=/dev/vda and ip=).
//
// In the guest the agent (--vm-init) mounts /proc, /sys, /dev and the
// rest, writes the lease file, listens on the virtio serial port
// berth.agent (--listen virtio:berth.agent), runs the hooks and COMMAND
// with /bin/sh in WorkDir (default /root), and logs their output as JSON
// lines to /dev/ttyS0. The app's environment is PATH, HOME=/root,
// HOSTNAME, spec.Env and PORT (spec.Port, default 8080); Instance.Addr is
// <guest address>:PORT. When COMMAND ends the agent logs "exit N: reason",
// flushes and reboots the guest, which ends QEMU.
//
// # The agent's transport
//
// Hosts without /dev/vhost-vsock cannot give a QEMU guest vsock, so the
// agent is reached over a virtio serial port, a single byte stream between
// the guest and one client of QEMU's agent.sock, multiplexed with yamux
// (see agent.PortSession for the handshake that lets a new berth take the
// port over). The driver keeps one session per replica and opens a stream
// per DialAgent; a guest still booting is waited for.
//
// # Files
//
// Each replica has a directory <Dir>/<id>/ (mode 0700) holding state.json
// (what re-adoption needs: QEMU's pid and start time, tap, addresses,
// suspended flag; never the environment), qemu.pid, qmp.sock, agent.sock,
// rootfs.ext4, config.img, console.log (the serial console: kernel
// messages and the agent's JSON lines, for Logs, FollowLogs and
// Instance.Reason), qemu.log and lease (the last deadline Renew set).
//
// A new Driver over the same Dir finds running guests through their state
// files (the start time defeats pid reuse) and adopts them; QEMU is a
// daemon of its own session, not berth's child. A replica whose QEMU is
// gone is exited, with the agent's exit record from the console, or
// failed, with the console's last lines.
//
// # Stop, Suspend, Resume, leases
//
// Stop sends Ctrl-Alt-Del over QMP, waits up to the grace for QEMU to
// exit, kills it, and removes the tap and the directory.
//
// Suspend pauses the guest (QMP stop) and Resume continues it (QMP cont):
// the memory stays in the QEMU process, so a suspended replica costs its
// memory but no CPU, and resumes at once with the same processes. The
// guest's clock stands still while paused; Resume sets it through the
// agent (date -u -s, best effort: the image needs a date command).
//
// The lease is enforced inside the guest by the agent (--lease-file
// /run/berth/lease). Its deadline is absolute, and the guest boots after
// Start (for many seconds under TCG), so the guest boots with a backstop,
// Spec.TTL plus Options.BootAllowance (1 minute with KVM, 5 under TCG by
// default), and once its agent answers the driver passes the real deadline
// on: Spec.TTL after Start, or what Renew set meanwhile (Renew only records
// it while the guest boots, since a deadline pushed after a slow boot may
// have passed by then). The backstop counts only for a berth gone before
// that. Renew writes the deadline through the agent; while suspended it is
// kept on the host and passed on at Resume.
//
// # Numbers
//
// Boot to ready (Start until the agent answers; Debian 6.1 vmlinux, the
// initramfs above, 1 vCPU, TCG on a 2-core host): 6.7 s when the host was
// quiet, 11 to 31 s while other builds and tests loaded it (load average
// 6 to 15); Start itself returns after 0.7 to 2 s, and the app serves
// about 0.4 s after the agent. A polite Stop takes about 0.4 s.
// TestConformance/BootToReady measures and logs it:
//
//	go test -run 'TestConformance/BootToReady' -v ./internal/vm/kvm
//
// The driver logs each guest's boot_to_ready ("kvm: guest ready").
// With KVM the same boot is expected to take well under a second to the
// kernel's init and about 1 s to ready (not measured here: no KVM host).
//
// # Host requirements
//
// New answers an error wrapping vm.ErrUnavailable, saying which, without
// QEMU (Debian: qemu-system-x86), the guest kernel and initramfs, an image
// store or a host network, or without /dev/kvm when Accel is "kvm" (which
// skips the probe: the operator's word). Tap
// devices need CAP_NET_ADMIN. The guest image needs /berth-agent (a
// statically linked berth binary) and /bin/sh.
//
// # Tests
//
// TestConformance runs vmtest.RunDriverTests against real guests, under
// TCG here. It needs root, /dev/net/tun, and the Debian packages
// qemu-system-x86, linux-image-amd64, busybox-static, e2fsprogs, iproute2
// and xz-utils (scripts/test installs them); it skips, saying what is
// missing, otherwise. It builds the guest binary (testdata/guest: the agent
// and the suite's apps) with CGO_ENABLED=0, an ext4 image with mkfs.ext4
// -d, the initramfs with WriteInitrd, and gives each replica a tap kvmtN
// with a /30 of its own. $BERTH_KVM_KERNEL and $BERTH_KVM_MODULES choose
// another kernel, $BERTH_KVM_ACCEL the accelerator. The suite's subtests
// run one at a time (two with KVM). The probe's answers are kept in
// $TMPDIR/berth-kvm-probe, shared with package libvirt's and server's
// tests, so that a machine probes /boot's kernel once.
package kvm
