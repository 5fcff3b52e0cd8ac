package apitype

// ImageInventory is `GET /images`: the root filesystems berth holds for
// its isolating drivers, in the shape of app-lb's images inventory
// (app-lb.md §2.5). berth keeps every image locally, so Complete and
// Present are always true and Tier is "local"; it has no remote store to
// offload to, so Offload is false. The shape is app-lb's, declared in
// internal/contracttest/documented.d.ts (the contract itself does not
// declare it): timestamps are unix seconds, and no key is berth's own.
type ImageInventory struct {
	GeneratedAt     int64       `json:"generated_at"` // unix seconds
	Complete        bool        `json:"complete"`
	DeleteSupported bool        `json:"delete_supported"`
	Offload         bool        `json:"offload"`
	DiskUsedPct     float64     `json:"disk_used_pct"` // of the filesystem holding the images
	PressurePct     float64     `json:"pressure_pct"`  // berth sweeps nothing: always 0
	LocalBytes      int64       `json:"local_bytes"`   // content bytes of all images, shared trees once
	Images          []ImageView `json:"images"`
}

// ImageView is one image of the inventory; `PATCH /images/:name` answers
// it too.
type ImageView struct {
	Name   string `json:"name"`
	Source string `json:"source"` // the host path or "upload" it was imported from
	Tier   string `json:"tier"`   // "local"
	Digest string `json:"digest"` // "sha256:<hex>" over the canonical walk of the tree
	Store  string `json:"store"`  // "" : no artifact store
	Ref    string `json:"ref"`    // "" : no artifact reference
	Bytes  int64  `json:"bytes"`
	// LastUsed is unix seconds. berth does not record when a replica last
	// started from an image, so it is when the image was imported (the
	// last time berth knows it was touched; a re-import with other
	// content moves it).
	LastUsed   int64            `json:"last_used"`
	Pinned     bool             `json:"pinned"`
	Present    bool             `json:"present"`
	References []ImageReference `json:"references"`
}

// ImageReference is something that uses an image, e.g. {kind:
// "deployment", id: "web"}.
type ImageReference struct {
	Kind string `json:"kind"`
	ID   string `json:"id"`
}

// ImagePatch is the body of `PATCH /images/:name`.
type ImagePatch struct {
	Pinned *bool `json:"pinned"`
}

// ImageImport is the JSON body of `POST /images` that imports a directory
// or tarball already on berth's host. (A tarball upload names the image in
// the ?name= query instead.)
type ImageImport struct {
	Name string `json:"name"`
	Path string `json:"path"`
}

// ImagePull is the body of `POST /images/pull` (berth's own): pull the
// registry reference ref for namespace (default: the caller's, or
// "default" for the operator) with that namespace's registry credentials.
type ImagePull struct {
	Ref       string `json:"ref"`
	Namespace string `json:"namespace,omitempty"`
}

// ImageSweep answers `POST /images/sweep`, in app-lb's shape: pressure is
// whether the store was over its budget (serve --image-budget), offloaded
// the images removed (berth has no remote tier: removed from this host,
// oldest first; unused and unpinned ones only), failed the [name, reason]
// pairs of those that could not be. freed_bytes and orphans are berth's
// own: the bytes of files removed (the images' trees and layers, and the
// trees no image named) and how many trees no image named were removed.
type ImageSweep struct {
	Pressure   bool        `json:"pressure"`
	Offloaded  []string    `json:"offloaded"`
	Failed     [][2]string `json:"failed"`
	FreedBytes int64       `json:"freed_bytes"`
	Orphans    int         `json:"orphans"`
}

// RegistryCredential maps a namespace's registry host to the secret of
// that namespace holding its credentials (berth's own, like a Kubernetes
// image pull secret): keys username and password, or a docker
// config.json under .dockerconfigjson or config.json.
type RegistryCredential struct {
	Namespace string `json:"namespace"`
	Host      string `json:"host"`
	Secret    string `json:"secret"`
}

// RegistryCredentialPut is the body of `PUT
// /namespaces/{ns}/registry-credentials/{host}`.
type RegistryCredentialPut struct {
	Secret string `json:"secret"`
}
