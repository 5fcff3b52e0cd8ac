package container

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/berth-dev/berth/internal/vm/proc"
)

// mountRootfs makes dir/rootfs the replica's root: an overlay of the
// image's tree (never written) and an upper directory, or, without
// overlayfs, a copy of the tree. The upper directory (or the copy) is on
// the replica's own disk when st.DiskGB is set (mountDisk), else in dir.
func (d *Driver) mountRootfs(dir, lower string, st state, low bool) error {
	target := filepath.Join(dir, rootfsDir)
	layer := dir
	if st.DiskGB > 0 {
		if err := d.mountDisk(dir, st.DiskGB); err != nil {
			return err
		}
		layer = filepath.Join(dir, diskDir)
		sub := []string{upperDir, workDir}
		if !st.Overlay {
			sub = []string{rootfsDir}
		}
		for _, s := range sub {
			if err := os.Mkdir(filepath.Join(layer, s), 0o700); err != nil {
				return err
			}
		}
	}
	if !st.Overlay {
		copyTo := filepath.Join(layer, rootfsDir)
		cp := exec.Command("cp", "-a", lower+"/.", copyTo)
		var out bytes.Buffer
		cp.Stdout, cp.Stderr = &out, &out
		err := cp.Run
		if low {
			err = func() error {
				if err := proc.StartNiced(cp, proc.BackgroundNice); err != nil {
					return err
				}
				return cp.Wait()
			}
		}
		if err := err(); err != nil {
			return fmt.Errorf("copying the image: %w: %s", err, strings.TrimSpace(out.String()))
		}
		if copyTo != target {
			if err := syscall.Mount(copyTo, target, "", syscall.MS_BIND, ""); err != nil {
				return fmt.Errorf("binding the image's copy on %s: %w", target, err)
			}
		}
		return nil
	}
	for _, p := range []string{lower, dir} {
		if strings.ContainsAny(p, ",:\\") {
			return fmt.Errorf("overlayfs cannot use the path %q (it holds , : or \\)", p)
		}
	}
	// The overlay's root takes the upper directory's mode and owner:
	// make them the image's, so an image user other than root (Spec.User)
	// may walk its / as in the image.
	if fi, err := os.Stat(lower); err == nil {
		upper := filepath.Join(layer, upperDir)
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			if err := os.Lchown(upper, int(st.Uid), int(st.Gid)); err != nil {
				return err
			}
		}
		if err := os.Chmod(upper, fi.Mode().Perm()); err != nil {
			return err
		}
	}
	opts := "lowerdir=" + lower + ",upperdir=" + filepath.Join(layer, upperDir) + ",workdir=" + filepath.Join(layer, workDir)
	if err := syscall.Mount("overlay", target, "overlay", syscall.MS_NODEV, opts); err != nil {
		return fmt.Errorf("mounting the overlay on %s: %w", target, err)
	}
	return nil
}

// unmount detaches whatever is mounted on path; nothing mounted is fine.
func unmount(path string) error {
	for range 8 { // stacked mounts, if any
		err := syscall.Unmount(path, syscall.MNT_DETACH)
		if errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("unmounting %s: %w", path, err)
		}
	}
	return nil
}

// cgroupMounts lists the mount points of the cgroup (v1) and cgroup2
// hierarchies.
func cgroupMounts() []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// "... mountpoint options - fstype source superoptions"
		left, right, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		lf, rf := strings.Fields(left), strings.Fields(right)
		if len(lf) < 5 || len(rf) < 1 || rf[0] != "cgroup" && rf[0] != "cgroup2" {
			continue
		}
		out = append(out, unescapeMount(lf[4]))
	}
	return out
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var c byte
			if _, err := fmt.Sscanf(s[i+1:i+4], "%03o", &c); err == nil {
				b.WriteByte(c)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// removeCgroups removes a replica's cgroup from every hierarchy, where the
// runtime left it (a create that failed midway). Missing ones are fine.
func removeCgroups(path string) {
	if path == "" || !filepath.IsAbs(path) || filepath.Clean(path) == "/" {
		return
	}
	for _, m := range cgroupMounts() {
		syscall.Rmdir(filepath.Join(m, path))
	}
}

// cgroupDirs returns the directories of a replica's cgroup that hold its
// memory and CPU accounting: on cgroup v2 one directory; on v1 the memory
// and cpuacct hierarchies'.
func cgroupDirs(pid int) (v2, mem, cpuacct string) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return "", "", ""
	}
	mounts := cgroupMounts()
	find := func(suffix string) string {
		for _, m := range mounts {
			if filepath.Base(m) == suffix || strings.Contains(filepath.Base(m), suffix+",") || strings.Contains(filepath.Base(m), ","+suffix) {
				return m
			}
		}
		return ""
	}
	for line := range strings.Lines(string(b)) {
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
				v2 = filepath.Join("/sys/fs/cgroup", parts[2])
			}
		case strings.Contains(","+parts[1]+",", ",memory,"):
			if m := find("memory"); m != "" {
				mem = filepath.Join(m, parts[2])
			}
		case strings.Contains(","+parts[1]+",", ",cpuacct,"):
			if m := find("cpuacct"); m != "" {
				cpuacct = filepath.Join(m, parts[2])
			}
		}
	}
	return v2, mem, cpuacct
}
