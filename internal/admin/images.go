package admin

import (
	"errors"
	"mime"
	"net/http"
	"syscall"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/image"
	"github.com/berth-dev/berth/internal/web"
)

// maxImageUpload bounds a tarball uploaded to POST /images.
const maxImageUpload = 32 << 30

// uploadDeadline is how long an upload may take to arrive: the admin
// listener's read timeout is made for JSON bodies, not root filesystems.
const uploadDeadline = 30 * time.Minute

func (a *API) images() (*image.Store, error) {
	if a.o.Images == nil {
		return nil, web.Errorf(http.StatusServiceUnavailable, "the image inventory is not running")
	}
	return a.o.Images, nil
}

// imageError maps package image's errors onto the envelope; an image in
// use answers 409 with its references, as app-lb's inventory does.
func imageError(w http.ResponseWriter, err error) error {
	var inUse *image.InUseError
	switch {
	case errors.As(err, &inUse):
		web.WriteJSON(w, http.StatusConflict, struct {
			Error      string                   `json:"error"`
			References []apitype.ImageReference `json:"references"`
			Sandboxes  []string                 `json:"sandboxes"`
		}{inUse.Error(), refs(inUse.References), []string{}})
		return nil
	case errors.Is(err, image.ErrNotFound):
		return &web.Error{Status: http.StatusNotFound, Message: err.Error()}
	case errors.Is(err, image.ErrPinned):
		return &web.Error{Status: http.StatusConflict, Message: err.Error()}
	case errors.Is(err, image.ErrBadName), errors.Is(err, image.ErrBadSource):
		return &web.Error{Status: http.StatusBadRequest, Message: err.Error()}
	default:
		return &web.Error{Status: http.StatusInternalServerError, Message: "the image store failed", Err: err}
	}
}

func refs(rs []image.Reference) []apitype.ImageReference {
	out := make([]apitype.ImageReference, len(rs))
	for i, r := range rs {
		out[i] = apitype.ImageReference{Kind: r.Kind, ID: r.ID}
	}
	return out
}

func imageView(im image.Image) apitype.ImageView {
	return apitype.ImageView{
		Name: im.Name, Source: im.Source, Tier: "local", Digest: im.Digest, Bytes: im.Size,
		Pinned: im.Pinned, Present: true, LastUsed: im.CreatedAt.Unix(),
		References: refs(im.References),
	}
}

// importImage is POST /images. A JSON body {name, path} imports a
// directory or tarball on berth's host; any other body is a tarball
// (optionally gzipped) uploaded under ?name=.
func (a *API) importImage(w http.ResponseWriter, r *http.Request) error {
	s, err := a.images()
	if err != nil {
		return err
	}
	var im image.Image
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt == "application/json" {
		var req apitype.ImageImport
		if err := web.ReadJSON(w, r, &req); err != nil {
			return err
		}
		if req.Path == "" {
			return web.Invalid("path", "required: a directory or tarball on the server's host (or upload a tarball with ?name=)")
		}
		if im, err = s.Import(r.Context(), req.Name, req.Path); err != nil {
			return imageError(w, err)
		}
	} else {
		name := r.URL.Query().Get("name")
		if name == "" {
			return web.Errorf(http.StatusBadRequest, "name the image with ?name= (the body is its tarball)")
		}
		http.NewResponseController(w).SetReadDeadline(time.Now().Add(uploadDeadline))
		body := http.MaxBytesReader(w, r.Body, maxImageUpload)
		if im, err = s.ImportTar(r.Context(), name, body, "upload"); err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				return web.Errorf(http.StatusRequestEntityTooLarge, "the image exceeds %d bytes", mbe.Limit)
			}
			return imageError(w, err)
		}
	}
	web.WriteJSON(w, http.StatusCreated, imageView(im))
	return nil
}

// listImages is GET /images: the inventory.
func (a *API) listImages(w http.ResponseWriter, r *http.Request) error {
	s, err := a.images()
	if err != nil {
		return err
	}
	list, err := s.List(r.Context())
	if err != nil {
		return imageError(w, err)
	}
	inv := apitype.ImageInventory{
		GeneratedAt: time.Now().Unix(), Complete: true, DeleteSupported: true,
		Images: make([]apitype.ImageView, len(list)),
	}
	seen := map[string]bool{}
	for i, im := range list {
		inv.Images[i] = imageView(im)
		if !seen[im.Digest] {
			seen[im.Digest] = true
			inv.LocalBytes += im.Size
		}
	}
	var st syscall.Statfs_t
	if syscall.Statfs(s.Dir(), &st) == nil && st.Blocks > 0 {
		inv.DiskUsedPct = 100 * float64(st.Blocks-st.Bfree) / float64(st.Blocks)
	}
	web.WriteJSON(w, http.StatusOK, inv)
	return nil
}

// getImage is GET /images/{name}.
func (a *API) getImage(w http.ResponseWriter, r *http.Request) error {
	s, err := a.images()
	if err != nil {
		return err
	}
	im, err := s.Get(r.Context(), r.PathValue("name"))
	if err != nil {
		return imageError(w, err)
	}
	web.WriteJSON(w, http.StatusOK, imageView(im))
	return nil
}

// patchImage is PATCH /images/{name} {pinned}.
func (a *API) patchImage(w http.ResponseWriter, r *http.Request) error {
	s, err := a.images()
	if err != nil {
		return err
	}
	var p apitype.ImagePatch
	if err := web.ReadJSON(w, r, &p); err != nil {
		return err
	}
	if p.Pinned == nil {
		return web.Invalid("pinned", "required: true or false")
	}
	im, err := s.Pin(r.Context(), r.PathValue("name"), *p.Pinned)
	if err != nil {
		return imageError(w, err)
	}
	web.WriteJSON(w, http.StatusOK, imageView(im))
	return nil
}

// deleteImage is DELETE /images/{name}: 204, or 409 while pinned or used.
func (a *API) deleteImage(w http.ResponseWriter, r *http.Request) error {
	s, err := a.images()
	if err != nil {
		return err
	}
	if err := s.Delete(r.Context(), r.PathValue("name")); err != nil {
		return imageError(w, err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// pullImage is POST /images/pull {ref, namespace?} (berth's own): pull a
// registry reference with the namespace's registry credentials and make
// it usable by that namespace. A namespace credential pulls for its own
// namespace only.
func (a *API) pullImage(w http.ResponseWriter, r *http.Request) error {
	s, err := a.images()
	if err != nil {
		return err
	}
	var req apitype.ImagePull
	if err := web.ReadJSON(w, r, &req); err != nil {
		return err
	}
	if req.Ref == "" {
		return web.Invalid("ref", "required: a registry reference, e.g. docker.io/library/alpine:3.20")
	}
	if !image.IsReference(req.Ref) || !image.ValidName(req.Ref) {
		return web.Invalid("ref", "%q is not a registry reference: name a registry host (docker.io/library/alpine:3.20, ghcr.io/o/app:v1) or a digest", req.Ref)
	}
	p := caller(r)
	ns := defaultNamespace(p, req.Namespace)
	if !p.Administers(ns) {
		return web.Errorf(http.StatusForbidden, "this credential cannot pull images for the %q namespace", ns)
	}
	http.NewResponseController(w).SetWriteDeadline(time.Now().Add(uploadDeadline))
	im, err := s.Pull(r.Context(), req.Ref, ns)
	if err != nil {
		if errors.Is(err, image.ErrPull) {
			return &web.Error{Status: http.StatusBadGateway, Message: err.Error()}
		}
		return imageError(w, err)
	}
	if im, err = s.Get(r.Context(), im.Name); err != nil {
		return imageError(w, err)
	}
	web.WriteJSON(w, http.StatusOK, imageView(im))
	return nil
}

// sweepImages is POST /images/sweep: trees no image names are removed,
// then unused, unpinned images (pulled, imported or built)
// oldest first, while the store exceeds its budget; layers go once no
// image uses them.
func (a *API) sweepImages(w http.ResponseWriter, r *http.Request) error {
	s, err := a.images()
	if err != nil {
		return err
	}
	res, err := s.Sweep(r.Context(), a.o.ImageBudget)
	if err != nil {
		return imageError(w, err)
	}
	web.WriteJSON(w, http.StatusOK, apitype.ImageSweep{Pressure: res.Pressure, Offloaded: res.Removed, Failed: res.Failed, FreedBytes: res.Freed, Orphans: res.Orphans})
	return nil
}
