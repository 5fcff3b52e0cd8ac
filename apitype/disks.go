package apitype

// DiskState says whether a VM disk's sandbox is running, stopped or gone.
type DiskState string

// The DiskState values the contract names.
const (
	DiskRunning DiskState = "running"
	DiskStopped DiskState = "stopped"
	DiskOrphan  DiskState = "orphan"
	DiskUnknown DiskState = "unknown"
)

// DiskPartKind says what one file of a VM disk holds.
type DiskPartKind string

// The DiskPartKind values the contract names.
const (
	PartData     DiskPartKind = "data"
	PartRootfs   DiskPartKind = "rootfs"
	PartMount    DiskPartKind = "mount"
	PartSnapshot DiskPartKind = "snapshot"
	PartOther    DiskPartKind = "other"
)

// ArchiveStatus is the state of a disk archive upload.
type ArchiveStatus string

// The ArchiveStatus values the contract names.
const (
	ArchiveRunning   ArchiveStatus = "running"
	ArchiveSucceeded ArchiveStatus = "succeeded"
	ArchiveFailed    ArchiveStatus = "failed"
)

// DiskInventory is `GET /disks`: every VM disk on the host and what the sweeper will do with it.
type DiskInventory struct {
	Complete         bool          `json:"complete"`
	IncompleteReason string        `json:"incomplete_reason,omitempty"`
	DataDir          string        `json:"data_dir"`
	TmpDir           string        `json:"tmp_dir"`
	TTLSecs          int           `json:"ttl_secs"`
	SweepSecs        int           `json:"sweep_secs"`
	ArchiveEnabled   bool          `json:"archive_enabled"`
	ArchiveOnExpire  bool          `json:"archive_on_expire"`
	ArchiveTarget    string        `json:"archive_target,omitempty"`
	FreeBytes        *int64        `json:"free_bytes,omitempty"`
	FilesystemBytes  *int64        `json:"filesystem_bytes,omitempty"`
	OrphanTTLSecs    int           `json:"orphan_ttl_secs"`
	Totals           DiskTotals    `json:"totals"`
	Disks            []DiskInfo    `json:"disks"`
	Archives         []ArchiveView `json:"archives"`
}

// DiskPart is one file belonging to a VM disk.
type DiskPart struct {
	Kind          DiskPartKind `json:"kind"`
	Path          string       `json:"path"`
	Bytes         int64        `json:"bytes"`
	ApparentBytes int64        `json:"apparent_bytes"`
	ModifiedAt    int64        `json:"modified_at"`
}

// ArchiveRecord says where and when a disk was last archived.
type ArchiveRecord struct {
	URI   string `json:"uri"`
	At    int64  `json:"at"`
	Bytes int64  `json:"bytes"`
}

// DiskInfo is one VM disk on the host.
type DiskInfo struct {
	SandboxID     string         `json:"sandbox_id"`
	Name          string         `json:"name,omitempty"`
	Deployment    string         `json:"deployment,omitempty"`
	State         DiskState      `json:"state"`
	Claimed       bool           `json:"claimed"`
	Retain        bool           `json:"retain"`
	Note          string         `json:"note,omitempty"`
	Bytes         int64          `json:"bytes"`
	ApparentBytes int64          `json:"apparent_bytes"`
	ModifiedAt    int64          `json:"modified_at"`
	ExpiresAt     *int64         `json:"expires_at,omitempty"`
	HeldBy        string         `json:"held_by,omitempty"`
	Archived      *ArchiveRecord `json:"archived,omitempty"`
	Parts         []DiskPart     `json:"parts"`
	Roots         []string       `json:"roots"`
}

// ArchiveView is one disk archive upload, running or finished.
type ArchiveView struct {
	ID            string        `json:"id"`
	SandboxID     string        `json:"sandbox_id"`
	URI           string        `json:"uri"`
	StartedAt     int64         `json:"started_at"`
	FinishedAt    *int64        `json:"finished_at,omitempty"`
	Status        ArchiveStatus `json:"status"`
	Bytes         int64         `json:"bytes"`
	ExpectedBytes int64         `json:"expected_bytes"`
	Error         string        `json:"error,omitempty"`
	Purged        *bool         `json:"purged,omitempty"`
}

// DiskTotals sums the disk inventory.
type DiskTotals struct {
	Disks            int   `json:"disks"`
	Bytes            int64 `json:"bytes"`
	ApparentBytes    int64 `json:"apparent_bytes"`
	Running          int   `json:"running"`
	Stopped          int   `json:"stopped"`
	Orphan           int   `json:"orphan"`
	Retained         int   `json:"retained"`
	ExpiringNow      int   `json:"expiring_now"`
	ReclaimableBytes int64 `json:"reclaimable_bytes"`
}

// DiskPatch is the body of `PATCH /disks/:id`: keep the disk from the
// sweeper (retain) and say why (note; null or "" clears it). Absent
// fields are left as they are.
type DiskPatch struct {
	Retain *bool            `json:"retain,omitempty"`
	Note   Nullable[string] `json:"note,omitzero"`
}

// DiskArchiveRequest is the body of `POST /disks/:id/archive` (optional):
// purge removes the disk once its archive has succeeded.
type DiskArchiveRequest struct {
	Purge *bool `json:"purge,omitempty"`
}

// DiskOutcome is berth's answer to `DELETE /disks/:id`, `POST
// /disks/sweep` and `POST /disks/purge-orphans`: the disks removed, those
// that could not be, and the allocated bytes freed.
type DiskOutcome struct {
	Removed    []string      `json:"removed"`
	Failed     []DiskFailure `json:"failed"`
	FreedBytes int64         `json:"freed_bytes"`
	// Archived are the disks archived before they were removed
	// (archive_on_expire).
	Archived []string `json:"archived,omitempty"`
}

// DiskFailure is one disk a removal could not remove, and why.
type DiskFailure struct {
	SandboxID string `json:"sandbox_id"`
	Error     string `json:"error"`
}
