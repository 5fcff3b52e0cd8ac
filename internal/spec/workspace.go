package spec

import (
	"path"
	"slices"
	"strings"

	"github.com/berth-dev/berth/apitype"
)

// WorkspaceDrivers are the drivers that hand a replica a host directory
// it can write, which a durable workspace (vm.workspace) or an archive
// (vm.workspace_archive) needs: the process driver runs the app in it,
// the container driver bind-mounts it at /workspace, the kvm and libvirt
// drivers share it into the guest over virtio 9p, which the guest mounts
// at /workspace. Another vm.workspace.path needs a driver with writable
// mounts (Options.Mounter: the container driver; kvm and libvirt attach
// it at /workspace only). Firecracker has no share.
var WorkspaceDrivers = []apitype.Driver{apitype.DriverProcess, apitype.DriverContainer, apitype.DriverKVM, apitype.DriverLibvirt}

// DefaultWorkspacePath is vm.workspace.path's default.
const DefaultWorkspacePath = "/workspace"

// CheckWorkspaceStore is why a vm.workspace.store string is malformed, or
// "": what CheckStore accepts, or s3://bucket[/prefix].
func CheckWorkspaceStore(store string) string {
	rest, ok := strings.CutPrefix(store, "s3://")
	if !ok {
		return CheckStore(store)
	}
	bucket, prefix, _ := strings.Cut(rest, "/")
	if len(bucket) < 3 || len(bucket) > 63 || strings.IndexFunc(bucket, func(r rune) bool {
		return !('a' <= r && r <= 'z' || '0' <= r && r <= '9' || r == '-' || r == '.')
	}) >= 0 {
		return "s3://" + bucket + ": a bucket name is 3 to 63 characters of a-z 0-9 . -"
	}
	if strings.ContainsAny(prefix, "?#\\") || slices.Contains(strings.Split(prefix, "/"), "..") {
		return "s3://" + rest + ": the prefix must not contain ?, #, \\ or .."
	}
	return ""
}

// checkRef is why a workspace ref (an artifact tag) is malformed, or "".
func checkRef(ref string) string {
	if len(ref) > 200 {
		return "longer than 200 characters"
	}
	for _, c := range ref {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-' || c == '/') {
			return "may only contain A-Z a-z 0-9 . _ - /"
		}
	}
	for _, p := range strings.Split(ref, "/") {
		if p == "" || p == "." || p == ".." {
			return "has an empty, . or .. component"
		}
	}
	return ""
}

// workspace checks vm.workspace and vm.workspace_archive.
func (v validator) workspace(vm *apitype.VmSpec) *FieldError {
	ws, wa := vm.Workspace, vm.WorkspaceArchive
	if ws != nil && wa != nil {
		return fieldErr("vm.workspace_archive", "cannot be combined with vm.workspace (remove one)")
	}
	if ws == nil && wa == nil {
		return nil
	}
	field := "vm.workspace"
	if wa != nil {
		field = "vm.workspace_archive"
	}
	if ws != nil {
		if ws.Store == "" {
			return fieldErr("vm.workspace.store", "required")
		}
		if why := CheckWorkspaceStore(ws.Store); why != "" {
			return fieldErr("vm.workspace.store", "%s", why)
		}
		if strings.HasPrefix(ws.Store, "/") {
			if err := v.store("vm.workspace.store", ws.Store); err != nil {
				return err
			}
		}
		if ws.Ref != "" {
			if why := checkRef(ws.Ref); why != "" {
				return fieldErr("vm.workspace.ref", "%q %s", ws.Ref, why)
			}
		}
		if err := secretRef("vm.workspace.auth", ws.Auth); err != nil {
			return err
		}
		if p := ws.Path; p != "" {
			if !path.IsAbs(p) || path.Clean(p) != p || p == "/" {
				return fieldErr("vm.workspace.path", "%q must be a clean absolute path other than /", p)
			}
			for _, r := range reservedMounts {
				if r != DefaultWorkspacePath && (p == r || strings.HasPrefix(p, r+"/")) {
					return fieldErr("vm.workspace.path", "%q is reserved (%s)", p, r)
				}
			}
			for i, m := range vm.Mounts {
				if p == m.Path || strings.HasPrefix(p, m.Path+"/") || strings.HasPrefix(m.Path, p+"/") {
					return fieldErr("vm.workspace.path", "%q overlaps vm.mounts[%d] (%q)", p, i, m.Path)
				}
			}
		}
	}
	if wa != nil {
		if wa.S3Key == "" {
			return fieldErr("vm.workspace_archive.s3_key", "required: an archive_id alone must be resolved by the cloud API first")
		}
		if strings.HasPrefix(wa.S3Key, "/") || strings.Contains(wa.S3Key, "\x00") {
			return fieldErr("vm.workspace_archive.s3_key", "%q must be an object key (no leading /)", wa.S3Key)
		}
		for _, seg := range strings.Split(wa.S3Key, "/") {
			// Some S3 servers and proxies resolve dot segments, so a key
			// with one could name an object outside the prefix it shows.
			if seg == "." || seg == ".." || seg == "" {
				return fieldErr("vm.workspace_archive.s3_key", "%q must be an object key without empty, . or .. segments", wa.S3Key)
			}
		}
		if wa.SizeBytes != nil && *wa.SizeBytes < 0 {
			return fieldErr("vm.workspace_archive.size_bytes", "must not be negative")
		}
		if !v.o.WorkspaceArchives {
			return fieldErr("vm.workspace_archive", "this server has no archive bucket to fetch s3_key from (berth serve --workspace-archive-bucket)")
		}
	}
	if !slices.Contains(WorkspaceDrivers, vm.Driver) {
		return fieldErr("vm.driver", "%s needs a driver that shares a writable directory with its replicas (process, container, kvm or libvirt), not %q", field, vm.Driver)
	}
	if ws != nil && ws.Path != "" && ws.Path != DefaultWorkspacePath {
		writable := false
		if v.o.Mounter != nil {
			_, writable = v.o.Mounter(string(vm.Driver))
		}
		if !writable {
			return fieldErr("vm.workspace.path", "%q: the %s driver attaches the workspace at %s only (it attaches no writable mounts)", ws.Path, vm.Driver, DefaultWorkspacePath)
		}
	}
	if ws != nil {
		p := Scaling(v.s.Scaling)
		if p.MaxReplicas > 1 {
			return fieldErr("scaling.max_replicas", "%d: vm.workspace has one owner at a time and requires max_replicas 1", p.MaxReplicas)
		}
		if p.WarmPool != 0 {
			return fieldErr("scaling.warm_pool", "%d: vm.workspace requires warm_pool 0 (a warm replica would hold a stale copy)", p.WarmPool)
		}
	}
	return nil
}
