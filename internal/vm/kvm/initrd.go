package kvm

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// InitrdOptions says what WriteInitrd puts into a guest initramfs.
type InitrdOptions struct {
	// ModulesDir is the guest kernel's module tree, /lib/modules/<release>
	// (with its modules.dep, as depmod writes it). Required.
	ModulesDir string
	// Busybox is a statically linked busybox (Debian: busybox-static,
	// /bin/busybox), the initramfs's shell and tools. Required.
	Busybox string
	// Modules are loaded in addition to InitrdModules, after them.
	Modules []string
}

// InitrdModules are the modules every guest needs, in load order (each
// after its dependencies, which WriteInitrd adds): virtio over MMIO (the
// microvm's bus) and over PCI (the PC machine package libvirt's guests
// run on), the virtio disk, network and serial-port drivers, and
// ext4 with the crc32c it asks the crypto API for. Modules the kernel has
// built in (modules.builtin) are skipped.
var InitrdModules = []string{"virtio_mmio", "virtio_pci", "virtio_blk", "virtio_net", "virtio_console", "crc32c_generic", "ext4"}

// WorkspaceModules are the modules a guest with a workspace needs, in load
// order: the 9p file system and its virtio transport, through which the
// host's workspace directory is shared (see WorkspaceTag). WriteInitrd adds
// them with their dependencies when the kernel has them, and /init loads
// them only for a guest whose command line asks for a workspace, so that
// other guests do not pay for them. A kernel without them can still boot
// guests without a workspace; one with a workspace then fails saying so.
var WorkspaceModules = []string{"9pnet_virtio", "9p"}

// WorkspaceTag is the 9p mount tag under which a guest's workspace is
// shared (QEMU's mount_tag=, libvirt's <target dir=>); the kernel command
// line passes it to /init as berth_workspace=.
const WorkspaceTag = "berth.workspace"

// WorkspaceMountOptions are the 9p mount options of the workspace in the
// guest. msize (the largest 9p message) is 256 KiB: the kernel's virtio
// transport takes up to about 500 KB, and larger messages mean fewer round
// trips through QEMU for large reads and writes. cache=mmap keeps no page
// cache except for files a program maps (which shared writable mappings,
// such as SQLite's, need), so the guest always sees the directory as it
// is: the guest is the only writer while it runs (berth's file API goes
// through the agent in the guest), and the host reads the directory only
// while the guest is stopped. nosuid and nodev: the workspace is data a
// guest hands on to the next replica (and to other drivers' replicas), so
// no set-user-ID file or device node in it counts for anything in the
// guest; the host side keeps them out of the snapshots (see doc.go).
const WorkspaceMountOptions = shareOptions + ",nosuid,nodev"

// shareOptions are the 9p options every share of the driver is mounted with.
const shareOptions = "trans=virtio,version=9p2000.L,msize=262144,cache=mmap"

// MountOptions are the 9p mount options of a guest's mounts (Spec.Mounts):
// read-only, and otherwise the workspace's transport and cache options.
const MountOptions = "ro," + shareOptions

// initScript is the initramfs's /init. The kernel passes it the command
// line's unknown name=value parameters as environment variables
// (berth_root, berth_ip, berth_gw, berth_workspace, berth_mounts; see
// bootArgs) and everything after "--" as arguments: the real init and its
// arguments, run on the root disk. The workspace and the mounts
// (berth_mounts=<tag>:<target>,...) are mounted below /newroot, so that
// switch_root moves them along with the root.
const initScript = `#!/bin/busybox sh
# berth guest initramfs: load the drivers, mount the root disk and the
# workspace, configure eth0, then hand over to the real init (this script's
# arguments).
bb=/bin/busybox
fail() {
	echo "berth initramfs: $*"
	$bb sleep 1
	$bb reboot -f
}
$bb mount -t devtmpfs devtmpfs /dev
$bb mount -t proc proc /proc
$bb mount -t sysfs sysfs /sys
while read -r m; do
	$bb insmod "/lib/modules/$m" || echo "berth initramfs: loading $m failed"
done < /lib/modules/order
root=${berth_root:-/dev/vda}
i=0
while [ ! -b "$root" ]; do
	i=$((i+1))
	[ $i -gt 400 ] && fail "no root disk $root"
	$bb sleep 0.05
done
$bb mount -t ext4 "$root" /newroot || fail "cannot mount $root"
if [ -n "$berth_workspace$berth_mounts" ]; then
	while read -r m; do
		$bb insmod "/lib/modules/$m" || echo "berth initramfs: loading $m failed"
	done < /lib/modules/order.workspace
fi
if [ -n "$berth_workspace" ]; then
	$bb mkdir -p /newroot/workspace || fail "cannot create /workspace on $root"
	$bb mount -t 9p -o ` + WorkspaceMountOptions + ` "$berth_workspace" /newroot/workspace ||
		fail "cannot mount the workspace $berth_workspace on /workspace (9p over virtio: does the kernel have 9p and 9pnet_virtio?)"
fi
if [ -n "$berth_mounts" ]; then
	IFS=,
	for m in $berth_mounts; do
		tag=${m%%:*}
		dir=${m#*:}
		$bb mkdir -p "/newroot$dir" || fail "cannot create the mount point $dir on $root"
		$bb mount -t 9p -o ` + MountOptions + ` "$tag" "/newroot$dir" ||
			fail "cannot mount $tag on $dir (9p over virtio: does the kernel have 9p and 9pnet_virtio?)"
	done
	unset IFS
fi
if [ -n "$berth_ip" ]; then
	$bb ip link set lo up
	$bb ip link set eth0 up || fail "no eth0"
	$bb ip addr add "$berth_ip" dev eth0 || fail "cannot set the address $berth_ip"
	if [ -n "$berth_gw" ]; then
		$bb ip route add default via "$berth_gw" || fail "cannot route through $berth_gw"
	fi
fi
[ $# -gt 0 ] || fail "no init to run (nothing after -- on the kernel command line)"
$bb umount /sys /proc /dev
exec $bb switch_root /newroot "$@"
`

// WriteInitrd writes a gzip-compressed initramfs (newc cpio) for the
// driver's guests to w: busybox, the modules the guest needs with their
// dependencies (and WorkspaceModules, where the kernel has them), and an
// /init that loads them, mounts the root disk (berth_root=, default
// /dev/vda) and the workspace (berth_workspace=<9p tag>, at /workspace),
// gives eth0 its address (berth_ip=, berth_gw=), and switch_roots to the
// agent. It is what makes a modular
// distribution kernel, such as Debian's linux-image-amd64, boot a microvm:
//
//	f, _ := os.Create("/var/lib/berth/kvm-initrd.img")
//	kvm.WriteInitrd(f, kvm.InitrdOptions{ModulesDir: "/lib/modules/6.1.0-57-amd64", Busybox: "/bin/busybox"})
//
// Compressed modules (.ko.gz, .ko.xz, .ko.zst) are decompressed (xz and
// zstd with those tools), since busybox's insmod may not do it.
func WriteInitrd(w io.Writer, o InitrdOptions) error {
	if o.ModulesDir == "" || o.Busybox == "" {
		return errors.New("kvm: initrd: ModulesDir and Busybox are required")
	}
	if f, err := elf.Open(o.Busybox); err != nil {
		return fmt.Errorf("kvm: initrd: busybox: %w", err)
	} else {
		dynamic := f.Section(".interp") != nil
		f.Close()
		if dynamic {
			return fmt.Errorf("kvm: initrd: %s is dynamically linked; it must be static (Debian: busybox-static)", o.Busybox)
		}
	}
	tree, err := readModTree(o.ModulesDir)
	if err != nil {
		return fmt.Errorf("kvm: initrd: %w", err)
	}
	seen := map[string]bool{}
	order, err := tree.resolve(append(slices.Clone(InitrdModules), o.Modules...), seen, false)
	if err != nil {
		return fmt.Errorf("kvm: initrd: %w", err)
	}
	// Loaded after the others, so only what they lack (virtio is loaded).
	wsOrder, err := tree.resolve(WorkspaceModules, seen, true)
	if err != nil {
		return fmt.Errorf("kvm: initrd: %w", err)
	}
	bb, err := os.ReadFile(o.Busybox)
	if err != nil {
		return fmt.Errorf("kvm: initrd: %w", err)
	}
	zw := gzip.NewWriter(w)
	cw := &cpioWriter{w: zw}
	for _, d := range []string{"bin", "dev", "proc", "sys", "newroot", "lib", "lib/modules"} {
		cw.dir(d)
	}
	cw.node("dev/console", 0o020600, 5, 1)
	cw.file("init", 0o755, []byte(initScript))
	cw.file("bin/busybox", 0o755, bb)
	cw.symlink("bin/sh", "busybox")
	for _, list := range []struct {
		file  string
		order []string
	}{{"order", order}, {"order.workspace", wsOrder}} {
		var names []string
		for _, rel := range list.order {
			b, err := readModule(filepath.Join(o.ModulesDir, rel))
			if err != nil {
				return fmt.Errorf("kvm: initrd: %w", err)
			}
			name := moduleName(rel) + ".ko"
			cw.file("lib/modules/"+name, 0o644, b)
			names = append(names, name+"\n")
		}
		cw.file("lib/modules/"+list.file, 0o644, []byte(strings.Join(names, "")))
	}
	cw.trailer()
	if cw.err != nil {
		return fmt.Errorf("kvm: initrd: %w", cw.err)
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("kvm: initrd: %w", err)
	}
	return nil
}

// moduleName is a module's name from its path in modules.dep: the base
// name without .ko and a compression suffix, with dashes as underscores
// (the kernel treats them alike).
func moduleName(rel string) string {
	base := filepath.Base(rel)
	if i := strings.Index(base, ".ko"); i >= 0 {
		base = base[:i]
	}
	return strings.ReplaceAll(base, "-", "_")
}

// moduleOrder resolves wanted modules and their dependencies through
// modules.dep into a load order (paths relative to dir), skipping built-in
// modules.
func moduleOrder(dir string, wanted []string) ([]string, error) {
	t, err := readModTree(dir)
	if err != nil {
		return nil, err
	}
	return t.resolve(wanted, map[string]bool{}, false)
}

// modTree is a kernel's module tree as modules.dep and modules.builtin
// describe it.
type modTree struct {
	dir     string
	deps    map[string][]string // module path → dependency paths
	byName  map[string]string   // module name → path
	builtin map[string]bool     // names of built-in modules
}

func readModTree(dir string) (*modTree, error) {
	t := &modTree{dir: dir, deps: map[string][]string{}, byName: map[string]string{}, builtin: map[string]bool{}}
	f, err := os.Open(filepath.Join(dir, "modules.dep"))
	if err != nil {
		return nil, fmt.Errorf("module tree: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		mod, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		t.deps[mod] = strings.Fields(rest)
		t.byName[moduleName(mod)] = mod
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("modules.dep: %w", err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "modules.builtin")); err == nil {
		for _, l := range strings.Fields(string(b)) {
			t.builtin[moduleName(l)] = true
		}
	}
	return t, nil
}

// resolve returns the load order of wanted modules and their dependencies,
// leaving out those in seen (and adding the rest to it). A module that is
// neither in modules.dep nor built in is an error, or with optional set
// left out.
func (t *modTree) resolve(wanted []string, seen map[string]bool, optional bool) ([]string, error) {
	var order []string
	var visit func(mod string, depth int) error
	visit = func(mod string, depth int) error {
		if seen[mod] {
			return nil
		}
		if depth > 64 {
			return fmt.Errorf("modules.dep: dependency loop at %s", mod)
		}
		seen[mod] = true
		ds := t.deps[mod]
		// modules.dep lists a module's dependencies so that the last one
		// loads first.
		for i := len(ds) - 1; i >= 0; i-- {
			if err := visit(ds[i], depth+1); err != nil {
				return err
			}
		}
		order = append(order, mod)
		return nil
	}
	for _, name := range wanted {
		name = strings.ReplaceAll(name, "-", "_")
		mod, ok := t.byName[name]
		if !ok {
			if t.builtin[name] {
				continue
			}
			if optional {
				continue
			}
			return nil, fmt.Errorf("module %s: not in %s/modules.dep and not built in", name, t.dir)
		}
		if err := visit(mod, 0); err != nil {
			return nil, err
		}
	}
	return order, nil
}

// readModule reads a module file, decompressed.
func readModule(path string) ([]byte, error) {
	switch {
	case strings.HasSuffix(path, ".gz"):
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		zr, err := gzip.NewReader(f)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return io.ReadAll(zr)
	case strings.HasSuffix(path, ".xz"), strings.HasSuffix(path, ".zst"):
		tool := "xz"
		if strings.HasSuffix(path, ".zst") {
			tool = "zstd"
		}
		var stderr bytes.Buffer
		cmd := exec.Command(tool, "-dc", path)
		cmd.Stderr = &stderr
		b, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("decompressing %s with %s: %v: %s", path, tool, err, strings.TrimSpace(stderr.String()))
		}
		return b, nil
	default:
		return os.ReadFile(path)
	}
}

// cpioWriter writes the "newc" cpio format the kernel unpacks an initramfs
// from: per entry a 110-byte ASCII header, the NUL-terminated name and the
// data, each padded to 4 bytes. The first error sticks.
type cpioWriter struct {
	w   io.Writer
	ino int
	err error
}

func (c *cpioWriter) entry(name string, mode uint32, data []byte, rmaj, rmin int) {
	if c.err != nil {
		return
	}
	c.ino++
	nlink := 1
	if mode&0o170000 == 0o040000 {
		nlink = 2
	}
	hdr := fmt.Sprintf("070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x",
		c.ino, mode, 0, 0, nlink, 0, len(data), 0, 0, rmaj, rmin, len(name)+1, 0)
	var b bytes.Buffer
	b.WriteString(hdr)
	b.WriteString(name)
	b.WriteByte(0)
	for b.Len()%4 != 0 {
		b.WriteByte(0)
	}
	b.Write(data)
	for b.Len()%4 != 0 {
		b.WriteByte(0)
	}
	_, c.err = c.w.Write(b.Bytes())
}

func (c *cpioWriter) dir(name string) { c.entry(name, 0o040755, nil, 0, 0) }
func (c *cpioWriter) file(name string, perm uint32, data []byte) {
	c.entry(name, 0o100000|perm, data, 0, 0)
}
func (c *cpioWriter) symlink(name, target string) { c.entry(name, 0o120777, []byte(target), 0, 0) }
func (c *cpioWriter) node(name string, mode uint32, major, minor int) {
	c.entry(name, mode, nil, major, minor)
}
func (c *cpioWriter) trailer() { c.entry("TRAILER!!!", 0, nil, 0, 0) }
