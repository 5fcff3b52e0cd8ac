package disks

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/store"
	"github.com/berth-dev/berth/internal/vm"
)

// Sweep removes the disks that have expired (see the package doc), never
// a retained one, archiving each first with ArchiveOnExpire.
func (m *Manager) Sweep(ctx context.Context) (apitype.DiskOutcome, error) {
	m.rm.Lock()
	defer m.rm.Unlock()
	c, err := m.census(ctx, true)
	if err != nil {
		return apitype.DiskOutcome{}, err
	}
	if !c.recordsOK {
		return apitype.DiskOutcome{}, ErrRecords
	}
	out := newOutcome()
	now := m.o.Now()
	for _, d := range c.disks {
		if !expired(d, now) {
			continue
		}
		if m.o.ArchiveOnExpire && m.o.Target != nil && (d.info.Archived == nil || d.info.Archived.At < d.info.ModifiedAt) {
			v, err := m.archiveNow(ctx, d)
			if err != nil {
				out.Failed = append(out.Failed, apitype.DiskFailure{SandboxID: d.info.SandboxID, Error: "not removed: its archive failed: " + err.Error()})
				continue
			}
			_ = v
			out.Archived = append(out.Archived, d.info.SandboxID)
		}
		m.removeInto(ctx, d, false, &out)
	}
	if c.inv.Complete {
		// Decisions about disks that are gone (their sandbox was stopped
		// by its owner) are forgotten: a record names one directory.
		for id := range c.records {
			if c.byID[id] == nil {
				if err := m.o.Records.DeleteDiskRecord(ctx, id); err != nil {
					m.o.Log.Warn("the record of a disk that is gone stays", "sandbox_id", id, "err", err)
				}
			}
		}
	}
	return out, nil
}

// PurgeOrphans removes every orphan that is not retained, expired or not.
func (m *Manager) PurgeOrphans(ctx context.Context) (apitype.DiskOutcome, error) {
	m.rm.Lock()
	defer m.rm.Unlock()
	c, err := m.census(ctx, true)
	if err != nil {
		return apitype.DiskOutcome{}, err
	}
	if !c.recordsOK {
		return apitype.DiskOutcome{}, ErrRecords
	}
	out := newOutcome()
	for _, d := range c.disks {
		if d.info.State == apitype.DiskOrphan && !d.info.Retain && !d.held {
			m.removeInto(ctx, d, false, &out)
		}
	}
	return out, nil
}

// Delete removes disk id. A disk whose sandbox runs (or is suspended), whose
// driver cannot say, or that is retained is refused (ErrBusy) unless
// force; the workspace of a Computer that exists is always refused.
func (m *Manager) Delete(ctx context.Context, id string, force bool) (apitype.DiskOutcome, error) {
	m.rm.Lock()
	defer m.rm.Unlock()
	c, err := m.census(ctx, true)
	if err != nil {
		return apitype.DiskOutcome{}, err
	}
	d := c.byID[id]
	if d == nil {
		return apitype.DiskOutcome{}, fmt.Errorf("%w: no disk %q", ErrNotFound, id)
	}
	if err := m.mayRemove(c, d, force); err != nil {
		return apitype.DiskOutcome{}, err
	}
	out := newOutcome()
	if err := m.remove(ctx, d, force); err != nil {
		return apitype.DiskOutcome{}, err
	}
	out.Removed, out.FreedBytes = append(out.Removed, id), d.info.Bytes
	return out, nil
}

// mayRemove says why Delete may not remove d.
func (m *Manager) mayRemove(c *census, d *disk, force bool) error {
	switch {
	case d.driver == "" && d.info.Claimed:
		return fmt.Errorf("%w: disk %q is the workspace of Computer %q: delete the Computer to remove it", ErrBusy, d.info.SandboxID, d.owner.ID)
	case m.archivingNow(d.info.SandboxID):
		return fmt.Errorf("%w: disk %q is being archived", ErrBusy, d.info.SandboxID)
	case force:
		return nil
	case !c.recordsOK:
		return fmt.Errorf("%w: whether disk %q is retained is not known (%v); pass force=true to remove it anyway", ErrBusy, d.info.SandboxID, ErrRecords)
	case d.live:
		return fmt.Errorf("%w: disk %q is %s; pass force=true to stop its sandbox and remove it", ErrBusy, d.info.SandboxID, d.info.HeldBy)
	case !d.known:
		return fmt.Errorf("%w: disk %q: %s; pass force=true to remove its files anyway", ErrBusy, d.info.SandboxID, d.info.HeldBy)
	case d.info.Retain:
		return fmt.Errorf("%w: disk %q is retained; release it first (PATCH retain false), or pass force=true to remove it", ErrBusy, d.info.SandboxID)
	}
	return nil
}

func newOutcome() apitype.DiskOutcome {
	return apitype.DiskOutcome{Removed: []string{}, Failed: []apitype.DiskFailure{}}
}

// removeInto removes d and records the result in out.
func (m *Manager) removeInto(ctx context.Context, d *disk, force bool, out *apitype.DiskOutcome) {
	if m.archivingNow(d.info.SandboxID) {
		out.Failed = append(out.Failed, apitype.DiskFailure{SandboxID: d.info.SandboxID, Error: "it is being archived"})
		return
	}
	if err := m.remove(ctx, d, force); err != nil {
		out.Failed = append(out.Failed, apitype.DiskFailure{SandboxID: d.info.SandboxID, Error: err.Error()})
		return
	}
	out.Removed = append(out.Removed, d.info.SandboxID)
	out.FreedBytes += d.info.Bytes
}

// remove removes d: through its driver when one knows it (which undoes
// what it set up beside the files), else its tree. m.rm is held.
func (m *Manager) remove(ctx context.Context, d *disk, force bool) error {
	if drv := m.o.Drivers[d.driver]; drv != nil && d.known {
		err := drv.Stop(ctx, d.info.SandboxID, m.o.StopGrace)
		if err != nil && !errors.Is(err, vm.ErrNotFound) {
			return fmt.Errorf("its %s driver could not remove it: %w", d.driver, err)
		}
	} else if d.live && !force {
		return fmt.Errorf("%w: its sandbox runs", ErrBusy)
	}
	if err := removeTree(d.dir); err != nil {
		return err
	}
	if err := m.o.Records.DeleteDiskRecord(ctx, d.info.SandboxID); err != nil {
		m.o.Log.Warn("a removed disk's record stays", "sandbox_id", d.info.SandboxID, "err", err)
	}
	m.o.Log.Info("disk removed", "sandbox_id", d.info.SandboxID, "dir", d.dir, "bytes", d.info.Bytes)
	return nil
}

// removeTree removes dir and everything in it, refusing (before removing
// anything) a tree that holds a mount point: what is mounted there is not
// the disk's to remove. A dir already gone is no error.
func removeTree(dir string) error {
	fi, err := os.Lstat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	dev := fi.Sys().(*syscall.Stat_t).Dev
	var mount string
	filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil || !e.IsDir() || mount != "" {
			return nil
		}
		if i, err := e.Info(); err == nil && i.Sys().(*syscall.Stat_t).Dev != dev {
			mount = p
			return filepath.SkipAll
		}
		return nil
	})
	if mount != "" {
		return fmt.Errorf("%s is a mount point: not removed (unmount it, or let its driver remove the sandbox)", mount)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("could not remove it: %w", err)
	}
	return nil
}

// Patch sets disk id's retain and note (nil: unchanged; note "" clears
// it).
func (m *Manager) Patch(ctx context.Context, id string, retain *bool, note *string) (apitype.DiskInfo, error) {
	m.rm.Lock()
	defer m.rm.Unlock()
	c, err := m.census(ctx, false)
	if err != nil {
		return apitype.DiskInfo{}, err
	}
	d := c.byID[id]
	if d == nil {
		return apitype.DiskInfo{}, fmt.Errorf("%w: no disk %q", ErrNotFound, id)
	}
	if !c.recordsOK {
		return apitype.DiskInfo{}, ErrRecords
	}
	rec, ok := c.records[id]
	if !ok {
		rec = store.DiskRecord{SandboxID: id}
	}
	if retain != nil {
		rec.Retain = *retain
	}
	if note != nil {
		rec.Note = *note
	}
	rec.UpdatedAt = m.o.Now().Unix()
	if err := m.o.Records.PutDiskRecord(ctx, rec); err != nil {
		return apitype.DiskInfo{}, fmt.Errorf("the disk record was not saved: %w", err)
	}
	d.info.Retain, d.info.Note = rec.Retain, rec.Note
	return d.info, nil
}
