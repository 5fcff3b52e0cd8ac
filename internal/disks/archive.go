package disks

import (
	"archive/tar"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"

	"github.com/klauspost/compress/gzip"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/artifact"
	"github.com/berth-dev/berth/internal/store"
)

// run is an archive under way.
type run struct {
	view apitype.ArchiveView // fixed fields; Bytes is read from done
	done atomic.Int64        // bytes of the disk's files read so far
}

func (r *run) snapshot() apitype.ArchiveView {
	v := r.view
	v.Bytes = r.done.Load()
	return v
}

func (m *Manager) archivingNow(id string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.archiving[id] != nil
}

// Archive starts archiving disk id into the Target: a gzipped tarball of
// its files (named as they are under the data directory), and, with
// purge, removes the disk once the archive is stored. It returns the
// archive's view, running. A disk whose sandbox runs, one being archived
// and one with nothing in it are ErrBusy; without a Target ErrNoTarget.
func (m *Manager) Archive(ctx context.Context, id string, purge bool) (apitype.ArchiveView, error) {
	if m.o.Target == nil {
		return apitype.ArchiveView{}, ErrNoTarget
	}
	m.rm.Lock()
	defer m.rm.Unlock()
	c, err := m.census(ctx, true)
	if err != nil {
		return apitype.ArchiveView{}, err
	}
	d := c.byID[id]
	switch {
	case d == nil:
		return apitype.ArchiveView{}, fmt.Errorf("%w: no disk %q", ErrNotFound, id)
	case d.live:
		return apitype.ArchiveView{}, fmt.Errorf("%w: disk %q is %s: stop it first (its files change while it runs)", ErrBusy, id, d.info.HeldBy)
	case d.info.ApparentBytes == 0 && len(d.info.Parts) <= 1:
		return apitype.ArchiveView{}, fmt.Errorf("%w: disk %q has nothing to archive", ErrBusy, id)
	}
	r, err := m.begin(ctx, d)
	if err != nil {
		return apitype.ArchiveView{}, err
	}
	m.wg.Go(func() {
		m.finish(m.ctx, d, r, purge)
	})
	return r.snapshot(), nil
}

// archiveNow archives d and waits for it (the sweep's archive_on_expire).
// m.rm is held.
func (m *Manager) archiveNow(ctx context.Context, d *disk) (apitype.ArchiveView, error) {
	r, err := m.begin(ctx, d)
	if err != nil {
		return apitype.ArchiveView{}, err
	}
	v := m.finish(ctx, d, r, false)
	if v.Status != apitype.ArchiveSucceeded {
		return v, errors.New(v.Error)
	}
	return v, nil
}

// begin records a new archive of d, running.
func (m *Manager) begin(ctx context.Context, d *disk) (*run, error) {
	var b [8]byte
	rand.Read(b[:])
	r := &run{view: apitype.ArchiveView{
		ID: "dar_" + hex.EncodeToString(b[:]), SandboxID: d.info.SandboxID, StartedAt: m.o.Now().Unix(),
		Status: apitype.ArchiveRunning, ExpectedBytes: d.info.ApparentBytes,
	}}
	m.mu.Lock()
	if m.archiving[d.info.SandboxID] != nil {
		m.mu.Unlock()
		return nil, fmt.Errorf("%w: disk %q is being archived already", ErrBusy, d.info.SandboxID)
	}
	m.archiving[d.info.SandboxID] = r
	m.mu.Unlock()
	if err := m.record(ctx, r.snapshot()); err != nil {
		m.mu.Lock()
		delete(m.archiving, d.info.SandboxID)
		m.mu.Unlock()
		return nil, fmt.Errorf("the archive was not recorded: %w", err)
	}
	return r, nil
}

// record stores an archive's view.
func (m *Manager) record(ctx context.Context, v apitype.ArchiveView) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return m.o.Records.PutDiskArchive(context.WithoutCancel(ctx), store.DiskArchive{ID: v.ID, SandboxID: v.SandboxID, StartedAt: v.StartedAt, View: b}, keepArchives)
}

// finish writes d's tarball, stores it in the Target, records the result
// (and the disk's archived record) and, with purge, removes the disk.
func (m *Manager) finish(ctx context.Context, d *disk, r *run, purge bool) apitype.ArchiveView {
	uri, size, err := m.write(ctx, d, r)
	v := r.snapshot()
	now := m.o.Now().Unix()
	v.FinishedAt = &now
	if err != nil {
		v.Status, v.Error = apitype.ArchiveFailed, err.Error()
		m.o.Log.Warn("disk archive failed", "sandbox_id", d.info.SandboxID, "archive", v.ID, "err", err)
	} else {
		v.Status, v.URI = apitype.ArchiveSucceeded, uri
		rec := store.DiskRecord{SandboxID: d.info.SandboxID, Retain: d.info.Retain, Note: d.info.Note}
		if recs, rerr := m.o.Records.DiskRecords(context.WithoutCancel(ctx)); rerr == nil {
			for _, x := range recs {
				if x.SandboxID == d.info.SandboxID {
					rec = x
				}
			}
		}
		rec.ArchiveURI, rec.ArchivedAt, rec.ArchiveBytes, rec.UpdatedAt = uri, now, size, now
		if err := m.o.Records.PutDiskRecord(context.WithoutCancel(ctx), rec); err != nil {
			m.o.Log.Warn("a disk's archive record was not saved", "sandbox_id", d.info.SandboxID, "err", err)
		}
	}
	if err == nil && purge {
		m.rm.Lock()
		if c, cerr := m.census(ctx, false); cerr == nil && c.byID[d.info.SandboxID] != nil && !c.byID[d.info.SandboxID].live {
			rerr := m.remove(ctx, c.byID[d.info.SandboxID], false)
			p := rerr == nil
			v.Purged = &p
			if rerr != nil {
				v.Error = "archived, but not removed: " + rerr.Error()
			}
		}
		m.rm.Unlock()
	}
	if err := m.record(ctx, v); err != nil {
		m.o.Log.Warn("a disk archive's result was not recorded", "archive", v.ID, "err", err)
	}
	// Only now: until its result is stored, the inventory shows the run.
	m.mu.Lock()
	delete(m.archiving, d.info.SandboxID)
	m.mu.Unlock()
	m.o.Log.Info("disk archive ended", "sandbox_id", d.info.SandboxID, "archive", v.ID, "status", v.Status, "uri", v.URI)
	return v
}

// write writes d's tarball into the tmp directory, hashing it, and puts
// it into the Target. It returns the URI and the tarball's size.
func (m *Manager) write(ctx context.Context, d *disk, r *run) (string, int64, error) {
	if err := os.MkdirAll(m.o.TmpDir, 0o700); err != nil {
		return "", 0, err
	}
	f, err := os.CreateTemp(m.o.TmpDir, r.view.ID+"-*.tar.gz")
	if err != nil {
		return "", 0, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	h := sha256.New()
	gz := gzip.NewWriter(io.MultiWriter(f, h))
	tw := tar.NewWriter(gz)
	if err := m.tarTree(ctx, tw, d.dir, r); err != nil {
		return "", 0, err
	}
	if err := tw.Close(); err != nil {
		return "", 0, err
	}
	if err := gz.Close(); err != nil {
		return "", 0, err
	}
	size, err := f.Seek(0, io.SeekCurrent)
	if err != nil {
		return "", 0, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return "", 0, err
	}
	sum := hex.EncodeToString(h.Sum(nil))
	uri, err := m.o.Target.Put(ctx, d.info.SandboxID, r.view.ID, sum, f, size)
	if err != nil {
		return "", 0, fmt.Errorf("the archive was not stored: %w", err)
	}
	return uri, size, nil
}

// tarTree writes the tree at dir into tw, named relative to the data
// directory, without crossing into another file system; sockets and
// devices are left out, hard links written as links.
func (m *Manager) tarTree(ctx context.Context, tw *tar.Writer, dir string, r *run) error {
	root, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	dev := root.Sys().(*syscall.Stat_t).Dev
	links := map[inode]string{}
	return filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		fi, err := e.Info()
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		if e.IsDir() && st.Dev != dev {
			return filepath.SkipDir
		}
		mode := fi.Mode()
		if !mode.IsRegular() && !mode.IsDir() && mode&fs.ModeSymlink == 0 {
			return nil // sockets, fifos, devices
		}
		var target string
		if mode&fs.ModeSymlink != 0 {
			if target, err = os.Readlink(p); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(fi, target)
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(m.rel(p))
		if mode.IsDir() {
			hdr.Name += "/"
		}
		if mode.IsRegular() && st.Nlink > 1 {
			k := inode{uint64(st.Dev), st.Ino}
			if first, ok := links[k]; ok {
				hdr.Typeflag, hdr.Linkname, hdr.Size = tar.TypeLink, first, 0
				return tw.WriteHeader(hdr)
			}
			links[k] = hdr.Name
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !mode.IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		n, err := io.Copy(tw, io.LimitReader(f, hdr.Size))
		r.done.Add(n)
		if err == nil && n != hdr.Size {
			err = fmt.Errorf("%s changed while it was archived", p)
		}
		return err
	})
}

// archives are the archive records, newest first, with the running
// ones' progress.
func (m *Manager) archives(ctx context.Context, problems *[]string) []apitype.ArchiveView {
	out := []apitype.ArchiveView{}
	rows, err := m.o.Records.DiskArchives(ctx)
	if err != nil {
		*problems = append(*problems, "the archive records could not be read: "+err.Error())
		return out
	}
	m.mu.Lock()
	running := map[string]*run{}
	for _, r := range m.archiving {
		running[r.view.ID] = r
	}
	m.mu.Unlock()
	for _, row := range rows {
		if r := running[row.ID]; r != nil {
			out = append(out, r.snapshot())
			continue
		}
		var v apitype.ArchiveView
		if err := json.Unmarshal(row.View, &v); err != nil {
			continue
		}
		if v.Status == apitype.ArchiveRunning {
			// Recorded running by a berth that stopped before it ended.
			v.Status, v.Error = apitype.ArchiveFailed, "berth stopped before the archive ended"
		}
		out = append(out, v)
	}
	return out
}

// Local is the Target of berth's embedded artifact store: each archive a
// blob, tagged disk-archive.<sandbox id>.<archive id> (a tag of no
// namespace, so no namespace can read it), its URI
// local:<tag>@sha256:<digest>.
type Local struct{ Store *artifact.Store }

// Name is "local".
func (Local) Name() string { return "local" }

// Tag is the tag of archive archiveID of disk id.
func Tag(id, archiveID string) string { return "disk-archive." + id + "." + archiveID }

// Put stores the tarball as a blob and tags it.
func (l Local) Put(ctx context.Context, id, archiveID, hex string, r io.Reader, size int64) (string, error) {
	if _, _, err := l.Store.PutBlob(hex, r, ""); err != nil {
		return "", err
	}
	tag := Tag(id, archiveID)
	if _, err := l.Store.PutTag(tag, artifact.TagRecord{Digest: hex, MediaType: "application/vnd.berth.disk-archive.tar+gzip"}); err != nil {
		return "", err
	}
	return "local:" + tag + "@sha256:" + hex, nil
}
