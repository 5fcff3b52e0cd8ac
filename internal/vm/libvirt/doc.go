// Package libvirt is the vm.Driver that runs each replica as a libvirt
// domain: the kvm driver's guests (same kernel and initramfs, disks, tap,
// config drive, agent over the virtio serial port berth.agent, serial
// console log, leases), with libvirtd instead of berth starting, pausing
// and ending QEMU. It speaks libvirtd's RPC protocol on its unix socket
// through github.com/digitalocean/go-libvirt (pure Go: no libvirt client
// library, no virsh).
//
// # Design
//
// The driver is kvm.Driver with a kvm.Hypervisor of this package: all of
// the replica lifecycle (state files under Dir, re-adoption, logs, agent
// sessions, leases, usage) is the kvm driver's, so both drivers behave
// alike and pass the same conformance suite. The Hypervisor
//
//   - creates a transient domain (virDomainCreateXML) named after the
//     replica, type kvm where the kvm driver's probe boot under KVM works
//     (kvm.ProbeAccel, run with QEMU directly) and qemu (TCG) elsewhere;
//   - finds the domain's QEMU process (libvirt names it "-name
//     guest=<id>,…"), which the kvm driver then watches as it watches its
//     own QEMU (liveness against pid reuse, CPU and memory use);
//   - sends Ctrl-Alt-Del for a polite Stop (virDomainSendKey), suspends and
//     resumes (virDomainSuspend/Resume), and destroys the domain to kill.
//
// Decision: transient domains, not defined ones. berth's state directory
// is the record of a replica, as for the kvm driver; a defined domain
// would be a second record, left behind whenever a guest ends by itself
// (its agent reboots it when the app exits) and competing with berth's
// reconciliation (autostart). A transient domain vanishes with its QEMU.
// Domains carry the replica's name, so `virsh list` shows berth's
// replicas, and libvirtd (restarted or not) keeps running them while berth
// restarts; a new Driver over the same Dir adopts them.
//
// Decision: the pc machine with virtio-pci devices and direct kernel boot.
// libvirt 9 (Debian bookworm) cannot drive QEMU's microvm machine, which
// the kvm driver uses. kvm.InitrdModules includes virtio_pci, so one
// initramfs boots the guests of both drivers. The domain XML (see
// domainXML):
//
//	<domain type='kvm|qemu'> <name>ID</name> <memory unit='MiB'>…</memory> <vcpu>…</vcpu>
//	  <os><type arch='x86_64' machine='pc'>hvm</type><kernel/><initrd/><cmdline/></os>
//	  <cpu mode='host-passthrough|maximum'/> <on_poweroff|on_reboot|on_crash>destroy</…>
//	  <devices>
//	    <disk type='file' device='disk'> rootfs.ext4 as vda, virtio </disk>
//	    <disk …> config.img as vdb, virtio, <readonly/> </disk>
//	    <interface type='ethernet'><mac/><target dev='TAP' managed='no'/><model type='virtio'/></interface>
//	    <serial type='file'><source path='console.log' append='on'/></serial>
//	    <channel type='unix'><source mode='bind' path='agent.sock'/><target type='virtio' name='berth.agent'/></channel>
//	    [<filesystem type='mount' accessmode='passthrough'><source dir='WORKSPACE'/><target dir='berth.workspace'/></filesystem>]
//	    [<filesystem type='mount' accessmode='passthrough'><source dir='MOUNT-i'/><target dir='berth.m<i>'/><readonly/></filesystem>]...
//	    no USB, balloon or video
//	  </devices>
//	  <seclabel type='static' model='dac' relabel='no'><label>+0:+0</label></seclabel>
//	</domain>
//
// The kernel command line is the kvm driver's, and so is the initramfs
// that mounts a Spec.Workspace, shared as the <filesystem> above
// (virtio-9p-pci), at /workspace, and each of Spec.Mounts, shared
// read-only (<readonly/>, QEMU's readonly=on) under kvm.MountTag(i), at its
// target: the driver is a vm.Mounter as the kvm driver is (read-only
// mounts only; the kvm driver's checks, the Machine's Mounts). QEMU runs as root with
// berth's files left as they are (the static DAC label): the replica's
// directory is berth's (mode 0700), and relabelling would hand it to
// libvirt-qemu. Hosts with AppArmor or SELinux confinement of libvirt's
// QEMU may need the replica directory allowed. The workspace share is
// passthrough for the kvm driver's reasons (see its doc); the kvm driver
// takes CAP_MKNOD from its QEMU, here qemu.conf decides, and with its
// default clear_emulator_capabilities a guest's mknod through the share
// is refused (TestWorkspace checks it with the tests' libvirtd).
//
// # Host requirements
//
// A running libvirtd with its QEMU driver (Debian: libvirt-daemon-system)
// answering on Options.Socket (default /run/libvirt/libvirt-sock), in the
// network namespace of berth's bridge (its QEMU opens the tap there); root
// (taps); the kvm driver's kernel, initramfs, image store and network. New
// answers an error wrapping vm.ErrUnavailable, saying what is missing,
// otherwise.
//
// # Numbers
//
// Boot to ready (Start until the agent answers; Debian 6.1 vmlinux, the
// kvm initramfs, 1 vCPU, TCG on a 2-core host with other tests running):
// 6.9 s, of which Start took 2.8 s (libvirtd's domain setup, QEMU's
// start); 10.3 s in a run under heavier load. TestConformance/BootToReady
// measures it; the driver logs each guest's boot_to_ready ("kvm: guest
// ready").
//
// # Tests
//
// TestConformance runs vmtest.RunDriverTests against real domains. The
// test binary runs in a network namespace of its own (netnstest) with
// berth's bridge (hostnet) in it, and starts a private libvirtd there, in
// a mount namespace of its own with empty /run/libvirt, /var/lib/libvirt,
// /var/log/libvirt and /var/cache/libvirt and a qemu.conf of its own (QEMU
// as root, no virtlogd), listening on a socket in the test's directory: it
// neither needs nor touches a system libvirtd, and no guest address
// leaves the namespace. It needs root and the Debian packages
// libvirt-daemon, libvirt-daemon-driver-qemu, qemu-system-x86,
// linux-image-amd64, busybox-static, e2fsprogs, iproute2 and xz-utils
// (scripts/test installs them), and skips, saying what is missing,
// otherwise.
package libvirt
