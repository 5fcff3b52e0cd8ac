package container

import (
	"path/filepath"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/berth-dev/berth/internal/vm"
)

// capabilities are the app's: the set container engines grant by default,
// enough for ordinary servers running as root in their image.
var capabilities = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD",
	"CAP_NET_RAW", "CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP",
	"CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE",
}

// ociVersion is the runtime-spec version config.json declares: the
// oldest that has every field berth writes, so the runtimes of older
// distributions (crun 1.8 refuses 1.2) take it.
const ociVersion = "1.0.2"

// pidsLimit bounds the processes of one replica, so a fork bomb stays in
// its cgroup.
const pidsLimit = 4096

// config returns the OCI configuration of a replica.
func (d *Driver) config(spec vm.Spec, st state, wd string, size vm.Size) *specs.Spec {
	dir := d.path(spec.Name)
	mem := int64(size.MemoryMB) << 20
	quota, period := int64(size.VCPUs)*100000, uint64(100000)
	pids := int64(pidsLimit)
	mounts := []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc"},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
		{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
		{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
		{Destination: agentInside, Type: "bind", Source: d.agent.Path, Options: []string{"bind", "ro", "nosuid", "nodev"}},
		{Destination: runInside, Type: "bind", Source: filepath.Join(dir, runDir), Options: []string{"bind", "rw", "nosuid", "nodev", "noexec"}},
	}
	if !d.agent.Static() {
		// The dynamic agent's interpreter and libraries (see agentCommand).
		mounts = append(mounts, specs.Mount{Destination: libInside, Type: "bind", Source: d.agent.LibDir, Options: []string{"bind", "ro", "nosuid", "nodev"}})
	}
	if spec.Workspace != "" {
		mounts = append(mounts, specs.Mount{Destination: workspaceInside, Type: "bind", Source: spec.Workspace, Options: []string{"rbind", "rw", "nosuid", "nodev"}})
	}
	for _, m := range spec.Mounts {
		// "ro" in a bind mount's options has the runtime remount it
		// read-only (a bind mount ignores MS_RDONLY on its first mount).
		opts := []string{"rbind", "rw", "nosuid", "nodev"}
		if m.ReadOnly {
			opts[1] = "ro"
		}
		mounts = append(mounts, specs.Mount{Destination: m.Target, Type: "bind", Source: m.Source, Options: opts})
	}
	return &specs.Spec{
		Version:  ociVersion,
		Root:     &specs.Root{Path: filepath.Join(dir, rootfsDir)},
		Hostname: vm.Hostname(spec.Name),
		Process: &specs.Process{
			Args: d.agentCommand(spec, wd),
			Env:  environ(spec, st),
			Cwd:  "/",
			Capabilities: &specs.LinuxCapabilities{
				Bounding: capabilities, Effective: capabilities, Permitted: capabilities,
			},
			NoNewPrivileges: true,
		},
		Mounts: mounts,
		Linux: &specs.Linux{
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace}, {Type: specs.MountNamespace}, {Type: specs.UTSNamespace},
				{Type: specs.IPCNamespace}, {Type: specs.NetworkNamespace, Path: filepath.Join(dir, netnsFile)},
			},
			CgroupsPath: st.Cgroup,
			Resources: &specs.LinuxResources{
				Devices: []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}},
				Memory:  &specs.LinuxMemory{Limit: &mem},
				CPU:     &specs.LinuxCPU{Quota: &quota, Period: &period},
				Pids:    &specs.LinuxPids{Limit: pids},
			},
			MaskedPaths: []string{
				"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
				"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi",
				"/sys/firmware", "/sys/devices/virtual/powercap",
			},
			ReadonlyPaths: []string{
				"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger",
			},
		},
	}
}
