package process

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/berth-dev/berth/internal/vm"
)

// Sandboxes: the design is in the package documentation.

const (
	// DefaultUIDBase is the first sandbox uid when Options.UIDBase is
	// zero: far above the ranges distributions give users and
	// /etc/subuid (100000 up, 65536 per user).
	DefaultUIDBase = 1_000_000_000
	// DefaultUIDCount is how many sandbox uids berth hands out when
	// Options.UIDCount is zero.
	DefaultUIDCount = 1 << 24
)

// uidsFile under Dir maps each deployment to the offset of its sandbox uid
// from UIDBase, so a deployment keeps its uid (and its Computer's
// workspace its owner) across replicas and berth restarts.
const uidsFile = "uids.json"

// sandboxUID returns the uid (and gid) the sandboxes of deployment run as,
// handing out the next free one the first time.
func (d *Driver) sandboxUID(deployment string) (uint32, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	f, err := os.OpenFile(filepath.Join(d.dir, uidsFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return 0, fmt.Errorf("sandbox uids: %w", err)
	}
	defer f.Close()
	// Several Drivers may share Dir.
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		return 0, fmt.Errorf("sandbox uids: %w", err)
	}
	uids := map[string]uint32{}
	if fi, err := f.Stat(); err == nil && fi.Size() > 0 {
		if err := json.NewDecoder(f).Decode(&uids); err != nil {
			return 0, fmt.Errorf("sandbox uids: corrupt %s: %w", uidsFile, err)
		}
	}
	if off, ok := uids[deployment]; ok && off < d.uidN {
		return d.uidBase + off, nil
	}
	off := uint32(len(uids))
	if off >= d.uidN {
		return 0, fmt.Errorf("sandbox uids: all %d uids from %d are taken", d.uidN, d.uidBase)
	}
	uids[deployment] = off
	b, err := json.Marshal(uids)
	if err != nil {
		return 0, err
	}
	if err := f.Truncate(0); err != nil {
		return 0, fmt.Errorf("sandbox uids: %w", err)
	}
	if _, err := f.WriteAt(b, 0); err != nil {
		return 0, fmt.Errorf("sandbox uids: %w", err)
	}
	// No fsync: on the request path of a new deployment's first scale
	// from zero, and a table lost with the host's power only hands out
	// new uids (a Computer's workspace is given to its new one).
	return d.uidBase + off, nil
}

// prepareDirs readies a replica's directories before its agent starts (or
// is assigned): a relative working directory is made; and in a sandbox the
// replica directory becomes searchable (but not listable) by the sandbox's
// uid, which owns the data directory, the working directory berth made and
// the workspace, recursively if it owned it not yet.
func (d *Driver) prepareDirs(dir string, spec vm.Spec, st state, workDir string) error {
	if !filepath.IsAbs(spec.WorkDir) {
		// Absolute working directories are the operator's; they must exist.
		if err := os.MkdirAll(workDir, 0o700); err != nil {
			return err
		}
	}
	if !st.Isolated {
		return nil
	}
	id := int(st.UID)
	if err := os.Chmod(dir, 0o711); err != nil {
		return err
	}
	data := filepath.Join(dir, dataDir)
	if err := os.Lchown(data, id, id); err != nil {
		return err
	}
	if strings.HasPrefix(workDir, data+string(filepath.Separator)) {
		for p := workDir; p != data; p = filepath.Dir(p) {
			if err := os.Lchown(p, id, id); err != nil {
				return err
			}
		}
	}
	if spec.Workspace != "" {
		if err := ownTree(spec.Workspace, id); err != nil {
			return fmt.Errorf("handing the workspace to the sandbox's uid: %w", err)
		}
	}
	return nil
}

// ownTree makes uid the owner (and group) of dir and everything in it,
// unless dir is owned by uid already.
func ownTree(dir string, uid int) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) == uid && int(st.Gid) == uid {
		return nil
	}
	err = filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == dir {
			return nil // last, so an interrupted walk is redone
		}
		return os.Lchown(p, uid, uid)
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return os.Lchown(dir, uid, uid)
}
