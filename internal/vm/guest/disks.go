package guest

import (
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"github.com/berth-dev/berth/internal/agentbin"
	"github.com/berth-dev/berth/internal/image"
)

// FindAgent returns the berth that microVM guests run as their init: path
// (BERTH_GUEST_AGENT, else BERTH_CONTAINER_AGENT), else the running
// executable. It answers an error wrapping vm.ErrUnavailable when that is
// not an x86-64 executable. A dynamically linked one (built with cgo or
// the race detector) will do: Disks bundles its libraries.
func FindAgent(path string) (string, error) {
	if path == "" {
		exe, err := os.Executable()
		if err != nil {
			return "", Unavailablef("finding the guest agent: %v (set BERTH_GUEST_AGENT)", err)
		}
		path = exe
	}
	if err := CheckX86(path); err != nil {
		return "", Unavailablef("guest agent: %v: set BERTH_GUEST_AGENT to a berth built for linux/amd64", err)
	}
	return path, nil
}

// CheckX86 says why path is not an x86-64 executable, or nil.
func CheckX86(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if f.Machine != elf.EM_X86_64 {
		return fmt.Errorf("%s is not an x86-64 executable", path)
	}
	return nil
}

// CheckStatic says why path is not a statically linked x86-64 executable,
// which a guest can run whatever its image holds (the initramfs's
// busybox), or nil.
func CheckStatic(path string) error {
	if err := CheckX86(path); err != nil {
		return err
	}
	static, err := agentbin.IsStatic(path)
	if err != nil {
		return err
	}
	if !static {
		return fmt.Errorf("%s is dynamically linked (built with cgo or the race detector)", path)
	}
	return nil
}

// Disks gives the microVM drivers their root disks: the image store's
// ext4 disk of an image with the agent written into it as /berth-agent,
// and a dynamically linked agent's interpreter and libraries (resolved on
// the host, package agentbin) into /berth-lib, made once per image disk
// and agent (with its libraries) and kept in dir. An image then needs no
// berth of its own, nor a libc matching it, and every guest runs the agent
// of the berth that starts it, whatever (if any) /berth-agent the image
// has. A static agent costs nothing more: no /berth-lib is written.
//
// Decision: the agent goes into a copy of the disk (debugfs, from the same
// e2fsprogs as the image store's mkfs.ext4; nothing is mounted), not into
// the initramfs: it then costs nothing at boot (a 20-30 MB agent in the
// initramfs would be unpacked, and under TCG slowly, by every guest), it
// serves the firecracker driver too, which boots without an initramfs, and
// the drivers copy the disk per replica anyway.
type Disks struct {
	images *image.Store
	agent  string
	bin    agentbin.Bin // the agent and, if it is dynamic, its bundle
	dir    string
	err    error // why there is no agent (wraps vm.ErrUnavailable)

	digest func() (string, error) // the agent's (and its bundle's) SHA-256, read once
	mu     sync.Mutex             // serializes builds
}

// NewDisks returns the disk maker over images keeping its disks in dir,
// with agent as the guests' init (FindAgent: "" is the running berth). Its
// Err says why guests cannot get an agent, if they cannot.
func NewDisks(images *image.Store, dir, agent string) *Disks {
	a := &Disks{images: images, dir: dir}
	a.agent, a.err = FindAgent(agent)
	if a.err == nil && images == nil {
		a.err = Unavailablef("no image store")
	}
	if a.err == nil {
		// Copied now, so that a host upgrade of libc while berth runs
		// does not change what its guests get.
		lib := filepath.Join(dir, agentLibDir)
		os.RemoveAll(lib) // a former agent's libraries
		var err error
		if a.bin, err = agentbin.Bundle(a.agent, lib); err != nil {
			a.err = Unavailablef("guest agent: %v", err)
		}
	}
	a.digest = sync.OnceValues(a.sum)
	return a
}

// Err says why guests cannot get an agent (wrapping vm.ErrUnavailable),
// or is nil.
func (a *Disks) Err() error { return a.err }

// Agent is the guests' agent on the host.
func (a *Disks) Agent() string { return a.agent }

// Static reports whether the agent is statically linked: it then needs no
// bundle, and runs where no initramfs can start an interpreter
// (Firecracker).
func (a *Disks) Static() bool { return a.bin.Static() }

// GuestInit is the command that starts the agent in a guest, for the kvm
// driver's GuestInit and GuestInitArgs: nothing (the driver's default,
// Init itself) for a static agent, and for a dynamic one the interpreter
// bundled into the disk, which runs the agent with the bundle's libraries.
func (a *Disks) GuestInit() (init string, args []string) {
	if a.bin.Static() {
		return "", nil
	}
	argv := a.bin.Command(Init, LibDir)
	return argv[0], argv[1:]
}

// agentLibDir is the directory under Disks.dir holding a dynamic
// agent's bundle.
const agentLibDir = "agent-lib"

// sum is the SHA-256 of the agent, and with a dynamic agent of its
// bundle's file names and contents too: a changed libc makes new disks.
func (a *Disks) sum() (string, error) {
	s, err := fileSum(a.agent)
	if err != nil || a.bin.Static() {
		return s, err
	}
	files, err := bundleFiles(a.bin)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	io.WriteString(h, s)
	for _, f := range files {
		fs, err := fileSum(filepath.Join(a.bin.LibDir, f))
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "\x00%s\x00%s", f, fs)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// bundleFiles lists the regular files of a dynamic agent's bundle, by
// name, sorted.
func bundleFiles(b agentbin.Bin) ([]string, error) {
	ents, err := os.ReadDir(b.LibDir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range ents {
		if e.Type().IsRegular() && !strings.HasPrefix(e.Name(), ".") {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

// Ext4 returns the image's disk with the agent in it (see Disks), as
// the kvm and firecracker drivers' Images. Callers copy it per replica.
func (a *Disks) Ext4(name string, sizeGB int) (string, error) {
	if a.err != nil {
		return "", a.err
	}
	src, err := a.images.Ext4(name, sizeGB)
	if err != nil {
		return "", err
	}
	sum, err := a.digest()
	if err != nil {
		return "", fmt.Errorf("reading the guest agent: %w", err)
	}
	// The image store's disk paths are content addressed (digest and
	// size), so the source path and the agent's digest name the result.
	h := sha256.Sum256([]byte(src + "\x00" + sum))
	name = "disk-" + hex.EncodeToString(h[:8])
	path := filepath.Join(a.dir, name+".ext4")
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	if err := os.MkdirAll(a.dir, 0o700); err != nil {
		return "", err
	}
	tmp := path + ".tmp"
	if err := image.CloneFile(tmp, src); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("copying the image disk: %w", err)
	}
	if err := writeAgent(tmp, a.bin); err != nil {
		os.Remove(tmp)
		return "", err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return "", err
	}
	// The source of each disk is recorded beside it, so that disks of
	// deleted images or of an older agent can be found and removed.
	os.WriteFile(filepath.Join(a.dir, name+".src"), []byte(src+"\n"+sum+"\n"), 0o600)
	a.prune(sum)
	return path, nil
}

// prune removes the disks made for an image disk that is gone or for
// another agent than sum, and leftovers of interrupted builds.
func (a *Disks) prune(sum string) {
	ents, _ := os.ReadDir(a.dir)
	for _, e := range ents {
		n := e.Name()
		if strings.HasSuffix(n, ".tmp") {
			os.Remove(filepath.Join(a.dir, n))
			continue
		}
		base, ok := strings.CutSuffix(n, ".src")
		if !ok {
			continue
		}
		b, _ := os.ReadFile(filepath.Join(a.dir, n))
		src, agent, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
		if _, err := os.Stat(src); err == nil && agent == sum {
			continue
		}
		os.Remove(filepath.Join(a.dir, base+".ext4"))
		os.Remove(filepath.Join(a.dir, n))
	}
}

// writeAgent writes the agent into the ext4 disk img as /berth-agent
// (root's, mode 0755), replacing what the image had there, and a dynamic
// agent's bundle into /berth-lib, with debugfs, and reads every file back
// to check that it arrived whole: debugfs reports failed requests (a full
// disk) on stderr, not in its exit status, and records the whole size
// even when it could not write every block.
func writeAgent(img string, bin agentbin.Bin) error {
	files := [][2]string{{bin.Path, Init}} // host path, guest path
	if !bin.Static() {
		names, err := bundleFiles(bin)
		if err != nil {
			return fmt.Errorf("guest agent's libraries: %w", err)
		}
		for _, n := range names {
			files = append(files, [2]string{filepath.Join(bin.LibDir, n), LibDir + "/" + n})
		}
	}
	debugfs, err := exec.LookPath("debugfs")
	if err != nil {
		return errors.New("no debugfs to put the agent into the guest disk (Debian: apt-get install e2fsprogs)")
	}
	var script []string
	if !bin.Static() {
		// mkdir fails harmlessly when the image has the directory.
		script = append(script, "mkdir "+LibDir, "set_inode_field "+LibDir+" mode 040755",
			"set_inode_field "+LibDir+" uid 0", "set_inode_field "+LibDir+" gid 0")
	}
	for _, f := range files {
		if strings.ContainsAny(f[0], "\"\n\\") {
			return fmt.Errorf("guest agent path %q: quotes, backslashes and newlines are not supported", f[0])
		}
		script = append(script,
			"rm "+f[1], // fails harmlessly when the image has none
			fmt.Sprintf("write %q %s", f[0], f[1]),
			"set_inode_field "+f[1]+" mode 0100755",
			"set_inode_field "+f[1]+" uid 0",
			"set_inode_field "+f[1]+" gid 0")
	}
	cmd := exec.Command(debugfs, "-w", "-f", "-", img)
	cmd.Stdin = strings.NewReader(strings.Join(script, "\n") + "\n")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("debugfs: %v: %s", err, strings.TrimSpace(string(out)))
	}
	for _, f := range files {
		want, err := fileSum(f[0])
		if err != nil {
			return fmt.Errorf("guest agent: %w", err)
		}
		h := sha256.New()
		var stderr strings.Builder
		cat := exec.Command(debugfs, "-R", "cat "+f[1], img)
		cat.Stdout, cat.Stderr = h, &stderr
		if err := cat.Run(); err != nil {
			return fmt.Errorf("debugfs cat: %v: %s", err, strings.TrimSpace(stderr.String()))
		}
		if got := hex.EncodeToString(h.Sum(nil)); got != want {
			return fmt.Errorf("writing %s into the guest disk failed (disk full?): %s", f[1], strings.TrimSpace(string(out)))
		}
	}
	return nil
}

// fileSum is the hex SHA-256 of a file's content.
func fileSum(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
