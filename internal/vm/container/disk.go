package container

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/berth-dev/berth/internal/image"
)

// A replica with a Spec.DiskSizeGB keeps its writes on a filesystem of
// that size: <dir>/disk.ext4, a sparse file holding an empty ext4 (cloned
// from a per-size template made once by mkfs.ext4), attached to a loop
// device and mounted at <dir>/disk. The overlay's upper and work
// directories live on it (or, without overlayfs, the image's copy), so a
// write past the size fails with ENOSPC inside the container and berth's
// data directory never fills. The loop device is attached with
// autoclear: it detaches itself once its filesystem is unmounted (or, if
// berth dies before mounting it, once berth's descriptor closes), so
// Stop's unmount releases it and no path leaks one.
//
// Project quotas on the data directory's filesystem would cost no loop
// device, but need a filesystem made or remounted with them (XFS prjquota,
// ext4 -O project,quota), which berth cannot assume; the loop device
// works on any filesystem that holds sparse files.
const (
	diskFile     = "disk.ext4"
	diskDir      = "disk"
	templatesDir = ".disks" // under Dir: one empty ext4 per size
)

// maxDiskGB is the largest Spec.DiskSizeGB the driver takes: ext4's
// largest file with 4 KiB blocks (the backing file lives on the data
// directory's filesystem, often ext4) is 16 TiB.
const maxDiskGB = 16 << 10

// diskProblem says why this host cannot enforce Spec.DiskSizeGB, or "".
func diskProblem() string {
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		return "no loop devices (/dev/loop-control: " + err.Error() + "; modprobe loop)"
	}
	if _, err := exec.LookPath("mkfs.ext4"); err != nil {
		return "mkfs.ext4 is missing (Debian package e2fsprogs)"
	}
	if b, err := os.ReadFile("/proc/filesystems"); err != nil || !strings.Contains(string(b), "\text4\n") {
		return "the kernel has no ext4"
	}
	return ""
}

// diskTemplate returns the empty ext4 image of sizeGB GiB that replicas'
// disks are cloned from, making it the first time. mkfs.ext4 costs tens
// of milliseconds even on a sparse file; a clone of its few written
// megabytes costs about one.
func (d *Driver) diskTemplate(sizeGB int) (string, error) {
	dir := filepath.Join(d.dir, templatesDir)
	path := filepath.Join(dir, "empty-"+strconv.Itoa(sizeGB)+"g.ext4")
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	d.diskMu.Lock()
	defer d.diskMu.Unlock()
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	// Made aside and renamed, so neither a concurrent berth over the same
	// Dir nor a crash midway leaves a half-made template under its name.
	f, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return "", err
	}
	tmp := f.Name()
	err = f.Truncate(int64(sizeGB) << 30)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("making a %d GiB disk image: %w", sizeGB, err)
	}
	// No journal: the layer is thrown away with the replica, so crash
	// consistency buys nothing, and a journal would eat up to 1 GiB of
	// the size. No reserved blocks: the app may use all of it. Inode
	// tables zeroed now (the file's holes make that free), so the kernel
	// does not zero them in the background after every replica's mount.
	out, err := exec.Command("mkfs.ext4", "-q", "-F", "-t", "ext4", "-L", "berth-disk", "-m", "0",
		"-O", "^has_journal", "-E", "lazy_itable_init=0,root_owner=0:0", tmp).CombinedOutput()
	if err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("mkfs.ext4: %w: %s", err, strings.TrimSpace(string(out)))
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return "", err
	}
	return path, nil
}

// mountDisk gives the replica in dir its own ext4 filesystem of sizeGB
// GiB, mounted at dir/disk.
func (d *Driver) mountDisk(dir string, sizeGB int) error {
	tpl, err := d.diskTemplate(sizeGB)
	if err != nil {
		return fmt.Errorf("the replica's disk: %w", err)
	}
	img := filepath.Join(dir, diskFile)
	if err := image.CloneFile(img, tpl); err != nil {
		return fmt.Errorf("the replica's disk: %w", err)
	}
	os.Chmod(img, 0o600)
	target := filepath.Join(dir, diskDir)
	if err := os.Mkdir(target, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	dev, err := attachLoop(img)
	if err != nil {
		return fmt.Errorf("the replica's disk: %w", err)
	}
	// Closed once mounted: the mount holds the device from then on, and
	// autoclear detaches it when the mount goes (or now, if it failed).
	defer dev.Close()
	if err := syscall.Mount(dev.Name(), target, "ext4", syscall.MS_NOATIME, ""); err != nil {
		return fmt.Errorf("mounting the replica's disk %s on %s: %w", dev.Name(), target, err)
	}
	return nil
}

// loopMajor is the block major of loop devices.
const loopMajor = 7

// attachLoop attaches a free loop device to the file img, with autoclear,
// and returns the device open.
func attachLoop(img string) (*os.File, error) {
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer ctl.Close()
	backing, err := os.OpenFile(img, os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer backing.Close()
	var last error
	for range 64 { // others may take the free device first
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return nil, fmt.Errorf("finding a free loop device: %w", err)
		}
		dev, err := openLoop(n)
		if err != nil {
			return nil, err
		}
		err = configureLoop(dev, backing, img)
		if err == nil {
			return dev, nil
		}
		dev.Close()
		if !errors.Is(err, unix.EBUSY) {
			return nil, fmt.Errorf("attaching %s to %s: %w", img, dev.Name(), err)
		}
		last = err
	}
	return nil, fmt.Errorf("attaching %s to a loop device: every free one was taken first: %w", img, last)
}

// openLoop opens /dev/loop<n>, making the node where /dev is static (a
// container's) and lacks it.
func openLoop(n int) (*os.File, error) {
	path := "/dev/loop" + strconv.Itoa(n)
	f, err := os.OpenFile(path, os.O_RDWR|unix.O_CLOEXEC, 0)
	if !errors.Is(err, fs.ErrNotExist) {
		return f, err
	}
	dev := unix.Mkdev(loopMajor, uint32(n))
	if b, err := os.ReadFile("/sys/devices/virtual/block/loop" + strconv.Itoa(n) + "/dev"); err == nil {
		var maj, min uint32
		if _, err := fmt.Sscanf(strings.TrimSpace(string(b)), "%d:%d", &maj, &min); err == nil {
			dev = unix.Mkdev(maj, min)
		}
	}
	if err := unix.Mknod(path, unix.S_IFBLK|0o660, int(dev)); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("making %s: %w", path, err)
	}
	return os.OpenFile(path, os.O_RDWR|unix.O_CLOEXEC, 0)
}

// configureLoop backs dev with the file, autoclear set: LOOP_CONFIGURE,
// or on kernels before 5.8 LOOP_SET_FD and LOOP_SET_STATUS64.
func configureLoop(dev, backing *os.File, name string) error {
	var cfg unix.LoopConfig
	cfg.Fd = uint32(backing.Fd())
	cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR
	copy(cfg.Info.File_name[:len(cfg.Info.File_name)-1], name)
	err := unix.IoctlLoopConfigure(int(dev.Fd()), &cfg)
	if !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOTTY) {
		return err
	}
	if err := unix.IoctlSetInt(int(dev.Fd()), unix.LOOP_SET_FD, int(backing.Fd())); err != nil {
		return err
	}
	if err := unix.IoctlLoopSetStatus64(int(dev.Fd()), &cfg.Info); err != nil {
		unix.IoctlSetInt(int(dev.Fd()), unix.LOOP_CLR_FD, 0)
		return err
	}
	return nil
}

// releaseDisk unmounts a replica's disk and makes sure no loop device
// stays attached to its file: autoclear does that once the filesystem's
// last mount goes; LOOP_CLR_FD covers a device attached some other way
// (it only sets autoclear while the device is still in use).
func releaseDisk(dir string) error {
	err := unmount(filepath.Join(dir, diskDir))
	img := filepath.Join(dir, diskFile)
	if _, serr := os.Stat(img); serr != nil {
		return err // no disk: the fast path, no /sys scan
	}
	for _, dev := range loopsOf(img) {
		if f, oerr := os.OpenFile(dev, os.O_RDONLY|unix.O_CLOEXEC, 0); oerr == nil {
			unix.IoctlSetInt(int(f.Fd()), unix.LOOP_CLR_FD, 0)
			f.Close()
		}
	}
	return err
}

// loopsOf lists the loop devices (/dev/loopN) backed by the file img.
func loopsOf(img string) []string {
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	var out []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		backing := strings.TrimSuffix(strings.TrimSpace(string(b)), " (deleted)")
		if backing == img {
			out = append(out, "/dev/"+filepath.Base(filepath.Dir(filepath.Dir(f))))
		}
	}
	return out
}
