package disks

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/store"
	"github.com/berth-dev/berth/internal/vm"
	"github.com/berth-dev/berth/internal/vm/replicadir"
)

// disk is one disk the census found.
type disk struct {
	info    apitype.DiskInfo
	driver  string // "" for a Computer's directory
	dir     string // absolute
	owner   vm.Owner
	live    bool // its sandbox starts, runs or is suspended
	known   bool // its driver could say whether it runs
	held    bool // never expires: see the package doc
	walked  bool // its walk finished (false without sizes)
	mounts  bool // it holds a mount point
	image   string
	guestIP string

	startedAt time.Time
}

// census is one census: the disks by id and the inventory.
type census struct {
	disks     []*disk
	byID      map[string]*disk
	inv       apitype.DiskInventory
	records   map[string]store.DiskRecord
	recordsOK bool
}

// inode identifies a file, to count hard links once.
type inode struct{ dev, ino uint64 }

// census walks the state directories (the bytes too with sizes).
func (m *Manager) census(ctx context.Context, sizes bool) (*census, error) {
	now := m.o.Now()
	c := &census{byID: map[string]*disk{}, records: map[string]store.DiskRecord{}}
	inv := &c.inv
	inv.DataDir, inv.TmpDir = m.o.DataDir, m.o.TmpDir
	inv.TTLSecs, inv.OrphanTTLSecs, inv.SweepSecs = int(m.o.TTL/time.Second), int(m.o.OrphanTTL/time.Second), int(m.o.SweepEvery/time.Second)
	inv.ArchiveEnabled, inv.ArchiveOnExpire = m.o.Target != nil, m.o.Target != nil && m.o.ArchiveOnExpire
	if m.o.Target != nil {
		inv.ArchiveTarget = m.o.Target.Name()
	}
	var problems []string
	problem := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }

	if recs, err := m.o.Records.DiskRecords(ctx); err != nil {
		problem("the disk records could not be read: %v", err)
	} else {
		c.recordsOK = true
		for _, r := range recs {
			c.records[r.SandboxID] = r
		}
	}
	seen := map[inode]bool{}
	live := map[string]bool{} // Computers whose sandbox runs
	for _, name := range slices.Sorted(maps.Keys(m.o.StateDirs)) {
		root := m.o.StateDirs[name]
		ents, err := os.ReadDir(root)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			problem("%s: %v", root, err)
			continue
		}
		for _, e := range ents {
			if !e.IsDir() || !replicadir.ValidID(e.Name()) {
				continue // the driver's own files: spares, bundles, boot files
			}
			d, err := m.replica(ctx, name, filepath.Join(root, e.Name()))
			if errors.Is(err, fs.ErrNotExist) {
				continue // stopped meanwhile
			}
			if err != nil {
				problem("%s: %v", e.Name(), err)
				continue
			}
			if d.live && d.owner.Kind == vm.OwnerComputer {
				live[d.owner.ID] = true
			}
			c.add(d)
		}
	}
	if ents, err := os.ReadDir(m.o.ComputersDir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		problem("%s: %v", m.o.ComputersDir, err)
	} else {
		for _, e := range ents {
			if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
				continue
			}
			d, err := m.computer(ctx, filepath.Join(m.o.ComputersDir, e.Name()), live[e.Name()])
			if err != nil {
				problem("%s: %v", e.Name(), err)
				continue
			}
			c.add(d)
		}
	}
	slices.SortFunc(c.disks, func(a, b *disk) int { return cmp.Compare(a.info.SandboxID, b.info.SandboxID) })
	for _, d := range c.disks {
		if sizes {
			if err := m.measure(d, seen); err != nil {
				problem("%s: %v", d.info.SandboxID, err)
				d.held = true
				d.info.HeldBy = cmp.Or(d.info.HeldBy, "its census did not finish: "+err.Error())
			}
		}
		rec, ok := c.records[d.info.SandboxID]
		if ok {
			d.info.Retain, d.info.Note = rec.Retain, rec.Note
			if rec.ArchiveURI != "" {
				d.info.Archived = &apitype.ArchiveRecord{URI: rec.ArchiveURI, At: rec.ArchivedAt, Bytes: rec.ArchiveBytes}
			}
		}
		if !c.recordsOK {
			// Whether it is retained is not known: it must not expire.
			d.held = true
		}
		if sizes {
			m.expiry(d)
		}
		inv.Totals.Disks++
		inv.Totals.Bytes += d.info.Bytes
		inv.Totals.ApparentBytes += d.info.ApparentBytes
		switch d.info.State {
		case apitype.DiskRunning:
			inv.Totals.Running++
		case apitype.DiskStopped:
			inv.Totals.Stopped++
		case apitype.DiskOrphan:
			inv.Totals.Orphan++
		}
		if d.info.Retain {
			inv.Totals.Retained++
		}
		if d.info.ExpiresAt != nil && *d.info.ExpiresAt <= now.Unix() {
			inv.Totals.ExpiringNow++
			inv.Totals.ReclaimableBytes += d.info.Bytes
		}
		inv.Disks = append(inv.Disks, d.info)
	}
	if inv.Disks == nil {
		inv.Disks = []apitype.DiskInfo{}
	}
	inv.Archives = m.archives(ctx, &problems)
	var st syscall.Statfs_t
	if syscall.Statfs(m.o.DataDir, &st) == nil {
		free, total := int64(st.Bavail)*st.Bsize, int64(st.Blocks)*st.Bsize
		inv.FreeBytes, inv.FilesystemBytes = &free, &total
	}
	inv.Complete = len(problems) == 0
	if !inv.Complete {
		inv.IncompleteReason = strings.Join(problems, "; ")
	}
	return c, nil
}

func (c *census) add(d *disk) {
	if c.byID[d.info.SandboxID] != nil {
		return // a Computer named like a replica: the replica is listed
	}
	c.byID[d.info.SandboxID] = d
	c.disks = append(c.disks, d)
}

// stateFile is what the census reads of any driver's state.json.
type stateFile struct {
	Owner     vm.Owner  `json:"owner"`
	Image     string    `json:"image"`
	GuestIP   string    `json:"guest_ip"`
	Addr      string    `json:"addr"`
	StartedAt time.Time `json:"started_at"`
}

// replica is the disk of replica directory dir of driver name; the error
// wraps fs.ErrNotExist when the directory went away.
func (m *Manager) replica(ctx context.Context, name, dir string) (*disk, error) {
	id := filepath.Base(dir)
	d := &disk{driver: name, dir: dir}
	d.info.SandboxID = id
	var st stateFile
	if b, err := os.ReadFile(filepath.Join(dir, replicadir.StateFile)); err == nil {
		_ = json.Unmarshal(b, &st) // a corrupt one is the driver's to report
	}
	d.owner, d.image, d.guestIP, d.startedAt = vm.ResolveOwner(st.Owner, id), st.Image, cmp.Or(st.GuestIP, st.Addr), st.StartedAt
	drv := m.o.Drivers[name]
	if drv == nil {
		d.info.HeldBy = fmt.Sprintf("the %s driver is not open on this host, so berth cannot tell whether this sandbox runs", name)
	} else if inst, err := drv.Inspect(ctx, id); errors.Is(err, vm.ErrNotFound) {
		if _, serr := os.Stat(dir); serr != nil {
			return nil, serr
		}
		d.info.HeldBy = fmt.Sprintf("the %s driver does not know this sandbox", name)
	} else if err != nil {
		d.info.HeldBy = fmt.Sprintf("the %s driver could not say whether it runs: %v", name, err)
	} else {
		d.known = true
		d.owner = vm.ResolveOwner(inst.Owner, id)
		if !inst.StartedAt.IsZero() {
			d.startedAt = inst.StartedAt
		}
		switch inst.State {
		case vm.StateStarting, vm.StateRunning:
			d.live = true
		case vm.StateSuspended:
			d.live = true
			d.info.HeldBy = "its sandbox is suspended (it resumes with its files)"
		}
	}
	if d.owner.Kind == vm.OwnerDeployment {
		d.info.Deployment = d.owner.ID
		d.info.Claimed = d.owner.ID != "" && m.o.Owners.Deployment(d.owner.ID)
	} else if d.owner.Kind == vm.OwnerComputer {
		ok, err := m.o.Owners.Computer(ctx, d.owner.ID)
		if err != nil {
			return nil, fmt.Errorf("whether Computer %q exists: %w", d.owner.ID, err)
		}
		d.info.Claimed = ok
	}
	d.info.Name = d.owner.ID
	d.info.Roots = []string{m.rel(dir)}
	switch {
	case !d.known:
		d.info.State = apitype.DiskUnknown
		d.held = true
	case d.live && d.info.HeldBy == "":
		d.info.State = apitype.DiskRunning
		d.info.HeldBy = "in use by a running sandbox"
		d.held = true
	case d.live:
		d.info.State = apitype.DiskStopped
		d.held = true
	case !d.info.Claimed:
		d.info.State = apitype.DiskOrphan
	default:
		d.info.State = apitype.DiskStopped
	}
	return d, nil
}

// computer is the disk of Computer directory dir; running says its
// sandbox runs.
func (m *Manager) computer(ctx context.Context, dir string, running bool) (*disk, error) {
	id := filepath.Base(dir)
	d := &disk{dir: dir, known: true, live: running, owner: vm.Owner{Kind: vm.OwnerComputer, ID: id}}
	d.info.SandboxID, d.info.Name = id, id
	d.info.Roots = []string{m.rel(dir)}
	ok, err := m.o.Owners.Computer(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("whether Computer %q exists: %w", id, err)
	}
	d.info.Claimed = ok
	switch {
	case running:
		d.info.State = apitype.DiskRunning
		d.info.HeldBy = "in use by a running sandbox"
		d.held = true
	case ok:
		d.info.State = apitype.DiskStopped
	default:
		d.info.State = apitype.DiskOrphan
	}
	if ok && !running {
		d.info.HeldBy = fmt.Sprintf("the workspace of Computer %q (deleting the Computer removes it)", id)
		d.held = true
	}
	return d, nil
}

// rel is path relative to the data directory, as the inventory names
// parts and roots.
func (m *Manager) rel(path string) string {
	if r, err := filepath.Rel(m.o.DataDir, path); err == nil && !strings.HasPrefix(r, "..") {
		return r
	}
	return path
}

// partKind is what the top-level entry name of a disk holds; other
// entries are summed into one part of kind other.
func partKind(computer bool, name string) (apitype.DiskPartKind, bool) {
	switch {
	case computer && name == "workspace", !computer && name == "data":
		return apitype.PartData, true
	case computer:
	case name == "rootfs", name == "rootfs.ext4", name == "upper", name == "work", name == "disk.ext4", name == "disk":
		return apitype.PartRootfs, true
	case strings.HasSuffix(name, ".snap"):
		return apitype.PartSnapshot, true
	}
	return apitype.PartOther, false
}

// usage is what a walk counted.
type usage struct {
	bytes, apparent, modified int64
	mounts                    []string // mount points found (not crossed)
}

// measure walks d's directory into its parts and sizes.
func (m *Manager) measure(d *disk, seen map[inode]bool) error {
	root, err := os.Lstat(d.dir)
	if err != nil {
		return err
	}
	rst := root.Sys().(*syscall.Stat_t)
	ents, err := os.ReadDir(d.dir)
	if err != nil {
		return err
	}
	other := apitype.DiskPart{Kind: apitype.PartOther, Path: m.rel(d.dir)}
	var u0 usage
	count(&u0, rst, root, seen)
	other.Bytes, other.ApparentBytes, other.ModifiedAt = u0.bytes, u0.apparent, u0.modified
	var parts []apitype.DiskPart
	var firstErr error
	for _, e := range ents {
		p := filepath.Join(d.dir, e.Name())
		u, err := walk(p, uint64(rst.Dev), seen)
		if err != nil && firstErr == nil {
			firstErr = err
		}
		for _, mp := range u.mounts {
			d.mounts = true
			parts = append(parts, apitype.DiskPart{Kind: apitype.PartMount, Path: m.rel(mp)})
		}
		if len(u.mounts) == 1 && u.mounts[0] == p {
			continue // the entry is a mount point: its part says so
		}
		kind, own := partKind(d.driver == "", e.Name())
		if own {
			parts = append(parts, apitype.DiskPart{Kind: kind, Path: m.rel(p), Bytes: u.bytes, ApparentBytes: u.apparent, ModifiedAt: u.modified})
		} else {
			other.Bytes += u.bytes
			other.ApparentBytes += u.apparent
			other.ModifiedAt = max(other.ModifiedAt, u.modified)
		}
	}
	parts = append(parts, other)
	slices.SortStableFunc(parts, func(a, b apitype.DiskPart) int { return cmp.Compare(a.Path, b.Path) })
	d.info.Parts = parts
	for _, p := range parts {
		d.info.Bytes += p.Bytes
		d.info.ApparentBytes += p.ApparentBytes
		d.info.ModifiedAt = max(d.info.ModifiedAt, p.ModifiedAt)
	}
	d.walked = firstErr == nil
	return firstErr
}

// count adds one file's sizes to u, unless seen already holds its inode.
func count(u *usage, st *syscall.Stat_t, fi fs.FileInfo, seen map[inode]bool) {
	u.modified = max(u.modified, fi.ModTime().Unix())
	if st.Nlink > 1 && !fi.IsDir() {
		k := inode{uint64(st.Dev), st.Ino}
		if seen[k] {
			return
		}
		seen[k] = true
	}
	u.bytes += st.Blocks * 512
	if !fi.IsDir() {
		u.apparent += st.Size
	}
}

// walk counts the tree at path, not crossing into another file system
// than dev (a mount point is reported, not walked). Files that vanish
// meanwhile are skipped; the first other error is returned with what was
// counted.
func walk(path string, dev uint64, seen map[inode]bool) (usage, error) {
	var u usage
	var first error
	err := filepath.WalkDir(path, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) && first == nil {
				first = err
			}
			return nil
		}
		fi, err := e.Info()
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) && first == nil {
				first = err
			}
			return nil
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return nil
		}
		if e.IsDir() && uint64(st.Dev) != dev {
			u.mounts = append(u.mounts, p)
			return filepath.SkipDir
		}
		count(&u, st, fi, seen)
		return nil
	})
	if err != nil && first == nil {
		first = err
	}
	return u, first
}

// expiry sets d's expires_at from its state and the TTLs.
func (m *Manager) expiry(d *disk) {
	var ttl time.Duration
	switch {
	case d.info.Retain || d.held:
		return
	case d.info.State == apitype.DiskOrphan:
		ttl = m.o.OrphanTTL
	case d.info.State == apitype.DiskStopped:
		ttl = m.o.TTL
	}
	if ttl <= 0 {
		return
	}
	at := d.info.ModifiedAt + int64(ttl/time.Second)
	d.info.ExpiresAt = &at
}

// expired reports whether d is one the sweep removes at now.
func expired(d *disk, now time.Time) bool {
	return d.info.ExpiresAt != nil && *d.info.ExpiresAt <= now.Unix() && !d.info.Retain && !d.held && d.walked &&
		(d.info.State == apitype.DiskOrphan || d.info.State == apitype.DiskStopped)
}
