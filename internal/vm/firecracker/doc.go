// Package firecracker is the vm.Driver that runs each replica as a
// Firecracker microVM. It speaks Firecracker's REST API (see Client) over
// the VMM's unix socket with net/http; there is no SDK dependency.
//
// # A replica
//
// Start copies the image's ext4 disk (Images.Ext4, then cp --reflink=auto:
// copy-on-write where the file system allows), asks Network for a tap
// device and addresses, writes the agent's config drive, starts
// `firecracker --api-sock <dir>/fc.sock` in a session of its own (so the VM
// outlives berth), configures it and boots it:
//
//	GET  /                          wait for the API
//	PUT  /logger                    the VMM's own log, vmm.log
//	PUT  /machine-config            vm.Sizes[size_class]: vCPUs, memory
//	PUT  /boot-source               Options.Kernel and the command line below
//	PUT  /drives/rootfs             the replica's disk, /dev/vda, read-write
//	PUT  /drives/config             the config drive, /dev/vdb, read-only
//	PUT  /network-interfaces/eth0   the tap
//	PUT  /vsock                     guest CID 3, <dir>/vsock.sock
//	PUT  /actions InstanceStart
//
// The kernel command line is
//
//	console=ttyS0 reboot=k panic=1 pci=off i8042.noaux i8042.nomux i8042.nopnp i8042.dumbkbd
//	ip=<guest>::<host>:<netmask>::eth0:off [Options.KernelArgs]
//	init=/berth-agent -- agent --vm-init --config /dev/vdb
//
// so the kernel configures eth0 itself and runs the berth binary, which
// the image must carry at /berth-agent (Options.GuestInit), as init in its
// agent mode. Decision: only that much travels on the command line. The
// rest of the agent's flags, COMMAND, the setup hooks and the environment
// are an agent.GuestConfig (JSON) on a small read-only second drive: the
// command line is short (2 KiB on older kernels), and every process in the
// guest can read it in /proc/cmdline, while the environment holds resolved
// secrets. No file system is mounted or written on the host to pass it.
//
// In the guest the agent (--vm-init) mounts /proc, /sys, /dev, /dev/pts,
// /dev/shm, /run and /tmp, sets the host name, writes the lease file,
// listens on vsock port Options.AgentPort, runs the hooks and COMMAND with
// /bin/sh in WorkDir (default /root), and logs their output as JSON lines
// to /dev/ttyS0. The app's environment is PATH, HOME=/root, HOSTNAME,
// spec.Env and PORT (spec.Port, default 8080); Instance.Addr is
// <guest address>:PORT. When COMMAND ends the agent logs "exit N: reason",
// flushes and reboots the guest, which makes Firecracker exit.
//
// # Files
//
// Each replica has a directory <Dir>/<id>/ (mode 0700) holding:
//
//	state.json     what re-adoption needs: VMM pid and start time, tap,
//	               addresses, jail id, suspended flag, snapshot generation.
//	               Never the environment.
//	console.log    the serial console (the VMM's stdout and stderr): kernel
//	               messages and the agent's JSON log lines, for Logs,
//	               FollowLogs and Instance.Reason. It is not rotated.
//	lease          the last deadline Renew set
//	fc.sock, vsock.sock, rootfs.ext4, config.img, vmm.log
//	vm-N.snap, mem-N.snap   the snapshot while suspended (N counts up)
//
// Under the jailer (Options.UseJailer) the files the VMM opens live in its
// chroot, <ChrootBase>/firecracker/<jail id>/root/, the kernel is linked in,
// and the VMM is given chroot paths ("/rootfs.ext4").
//
// A new Driver over the same Dir finds running VMMs through their state
// files (the start time defeats pid reuse) and adopts them. A replica whose
// VMM is gone is exited, with the agent's exit record from the console, or
// failed, with the console's last lines.
//
// # Stop, Suspend, Resume, leases
//
// Stop sends SendCtrlAltDel, which the kernel turns into SIGINT for the
// agent (it disabled Ctrl-Alt-Del reboots), which stops the app and ends
// the guest; after the grace the VMM is killed. Then the tap, the jail and
// the directory are removed.
//
// Suspend (idle_action: retain) pauses the VM (PATCH /vm Paused), writes a
// full snapshot (PUT /snapshot/create) and kills the VMM: a suspended
// replica costs disk, not memory. The tap and address are kept. Resume
// starts a fresh VMM and loads the snapshot with resume_vm (PUT
// /snapshot/load, memory backend File): the memory file is mapped, not
// read, so the guest runs again in well under 300 ms on a KVM host, with
// the same processes, at the same address.
//
// The lease is enforced inside the guest by the agent (--lease-file
// /run/berth/lease). Renew writes it through the agent (the files API over
// vsock); while suspended it is kept on the host and passed on at Resume.
//
// DialAgent connects to <dir>/vsock.sock and sends "CONNECT <port>\n";
// Firecracker answers "OK <host port>\n" and splices the connection to the
// agent's vsock listener.
//
// # Host requirements
//
// New answers an error wrapping vm.ErrUnavailable, saying which, without
// /dev/kvm, the firecracker binary (and jailer, if asked for), the guest
// kernel, an image store or a host network. The guest kernel needs
// virtio-mmio block, net and vsock, ext4, devtmpfs, IP_PNP (the ip=
// parameter), the 8250 serial console and the i8042 keyboard controller
// (for Ctrl-Alt-Del); Firecracker's CI guest kernels have all of it. The
// guest image needs /berth-agent (a statically linked berth binary) and
// /bin/sh. The guest has no DNS configuration of its own; outbound traffic
// is the host network's business (bridge and NAT).
//
// # Tests
//
// Here (no KVM) the tests drive the driver against a fake VMM: the test
// binary plays the firecracker (and jailer) binary, serves the API on the
// socket it is given, refuses what Firecracker refuses, records every
// request and answer, and simulates a guest (it runs COMMAND on the host,
// writes the console, and serves the real agent protocol behind the vsock
// handshake). The tests assert the exact request sequences and bodies, and
// check every body and every answer against Firecracker's OpenAPI
// description (shared/reference/firecracker-api.yaml, or
// $BERTH_FIRECRACKER_API) with a small Swagger validator in spec_test.go.
// What the fake cannot show is whether a real kernel boots with this
// command line, whether real snapshots restore, and how the real jailer
// treats a chroot it already ran in: that is TestConformance's job.
//
// # Running the conformance suite on a KVM host
//
// TestConformance runs vmtest.RunDriverTests against real microVMs. It
// skips, saying why, unless all of this holds:
//
//   - x86_64 Linux with /dev/kvm, as root (tap devices).
//   - A Firecracker 1.x release binary (firecracker-vX.Y.Z-x86_64 from a
//     release archive, renamed firecracker) in PATH or named by
//     $BERTH_FC_BIN. The driver uses only long-standing endpoints and
//     fields (snapshot load with mem_backend, logger level and
//     show_level); the bodies match the reference spec, v1.17.0-dev. No
//     version has been run yet: the first KVM run should pin the one that
//     passes here.
//   - A guest kernel named by $BERTH_FC_KERNEL: an uncompressed vmlinux,
//     e.g. Firecracker CI's vmlinux-6.1 (built from its
//     microvm-kernel-ci-x86_64-6.1.config).
//   - busybox-static (its busybox must be statically linked), e2fsprogs
//     (mkfs.ext4 -d) and iproute2.
//   - The test binary built statically, without the race detector: it is
//     copied into the guest image as /berth-agent, and is the guest's init
//     and app.
//
// Then, from the repository root:
//
//	CGO_ENABLED=0 go test -c -o /tmp/firecracker.test ./internal/vm/firecracker
//	sudo BERTH_FC_KERNEL=/path/to/vmlinux-6.1 BERTH_FC_BIN=/usr/local/bin/firecracker \
//	    /tmp/firecracker.test -test.run TestConformance -test.v
//
// The test builds a 512 MiB ext4 image with mkfs.ext4 -d (no mounting),
// gives each replica a tap fctN with 172.30.N.1/30 on the host side and
// .2 in the guest, and removes them at Stop.
package firecracker
