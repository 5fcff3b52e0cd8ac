package admin

import (
	"errors"
	"net/http"
	"strings"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/disks"
	"github.com/berth-dev/berth/internal/web"
)

// The disk routes (app-lb §2.3 "Guard rules, disks, images"): fleet-wide,
// the census read with view, every change with admin. A confined caller
// gets the same 403 on every one of them, whether or not the disk exists.
func (a *API) routeDisks() {
	a.handle("GET /disks", tierView, wallFleet, a.listDisks)
	a.handle("POST /disks/sweep", tierCRUD, wallFleet, a.sweepDisks)
	a.handle("POST /disks/purge-orphans", tierCRUD, wallFleet, a.purgeOrphans)
	a.handle("PATCH /disks/{id}", tierCRUD, wallFleet, a.patchDisk)
	a.handle("DELETE /disks/{id}", tierCRUD, wallFleet, a.deleteDisk)
	a.handle("POST /disks/{id}/archive", tierCRUD, wallFleet, a.archiveDisk)
}

func (a *API) disks() (*disks.Manager, error) {
	if a.o.Disks == nil {
		return nil, web.Errorf(http.StatusServiceUnavailable, "disk management is not running on this server")
	}
	return a.o.Disks, nil
}

// diskError maps package disks' errors onto the envelope.
func diskError(err error, what string) error {
	switch {
	case errors.Is(err, disks.ErrNotFound):
		return &web.Error{Status: http.StatusNotFound, Message: strings.TrimPrefix(err.Error(), disks.ErrNotFound.Error()+": ")}
	case errors.Is(err, disks.ErrBusy):
		return &web.Error{Status: http.StatusConflict, Message: strings.TrimPrefix(err.Error(), disks.ErrBusy.Error()+": ")}
	case errors.Is(err, disks.ErrNoTarget):
		return web.Errorf(http.StatusNotImplemented, "no disk archive target is configured on this server")
	case errors.Is(err, disks.ErrRecords):
		return &web.Error{Status: http.StatusServiceUnavailable, Message: "the disk records could not be read, so berth cannot tell which disks are retained", Err: err}
	default:
		return &web.Error{Status: http.StatusInternalServerError, Message: what, Err: err}
	}
}

// diskID is the {id} path value, checked: a disk id names one directory
// (a replica id or a Computer id), 1–200 of A-Z a-z 0-9 . _ -, not . or ..
func diskID(r *http.Request) (string, error) {
	id := r.PathValue("id")
	ok := id != "" && len(id) <= 200 && id != "." && id != ".."
	for _, c := range id {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			ok = false
		}
	}
	if !ok {
		return "", web.Invalid("id", "%q is not a disk id (a sandbox id: letters, digits, '.', '_' and '-')", id)
	}
	return id, nil
}

// listDisks is GET /disks: the DiskInventory.
func (a *API) listDisks(w http.ResponseWriter, r *http.Request) error {
	m, err := a.disks()
	if err != nil {
		return err
	}
	inv, err := m.Inventory(r.Context())
	if err != nil {
		return diskError(err, "the disk census failed")
	}
	web.WriteJSON(w, http.StatusOK, inv)
	return nil
}

// sweepDisks is POST /disks/sweep: remove what has expired now.
func (a *API) sweepDisks(w http.ResponseWriter, r *http.Request) error {
	m, err := a.disks()
	if err != nil {
		return err
	}
	out, err := m.Sweep(r.Context())
	if err != nil {
		return diskError(err, "the disk sweep failed")
	}
	web.WriteJSON(w, http.StatusOK, out)
	return nil
}

// purgeOrphans is POST /disks/purge-orphans: remove every orphan not
// retained.
func (a *API) purgeOrphans(w http.ResponseWriter, r *http.Request) error {
	m, err := a.disks()
	if err != nil {
		return err
	}
	out, err := m.PurgeOrphans(r.Context())
	if err != nil {
		return diskError(err, "the orphan purge failed")
	}
	web.WriteJSON(w, http.StatusOK, out)
	return nil
}

// patchDisk is PATCH /disks/{id} {retain?, note?: string|null}: 204.
func (a *API) patchDisk(w http.ResponseWriter, r *http.Request) error {
	m, err := a.disks()
	if err != nil {
		return err
	}
	id, err := diskID(r)
	if err != nil {
		return err
	}
	var p apitype.DiskPatch
	if err := web.ReadClosedJSON(w, r, &p, apitype.UnknownKey); err != nil {
		return err
	}
	var note *string
	if p.Note.IsNull() {
		note = new(string)
	} else if v, ok := p.Note.Get(); ok {
		if len(v) > 1024 {
			return web.Invalid("note", "must be at most 1024 bytes, got %d", len(v))
		}
		note = &v
	}
	if _, err := m.Patch(r.Context(), id, p.Retain, note); err != nil {
		return diskError(err, "the disk record was not saved")
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// diskForce parses ?force= as app-lb does for the disk routes: 1, true,
// yes, on (0, false, no, off, or absent: false); anything else is a 400.
func diskForce(r *http.Request) (bool, error) {
	switch v := r.URL.Query().Get("force"); v {
	case "", "0", "false", "no", "off":
		return false, nil
	case "1", "true", "yes", "on":
		return true, nil
	default:
		return false, web.Invalid("force", "must be true or false (or 1, yes, on / 0, no, off), got %q", v)
	}
}

// deleteDisk is DELETE /disks/{id}[?force=]: the purge outcome.
func (a *API) deleteDisk(w http.ResponseWriter, r *http.Request) error {
	m, err := a.disks()
	if err != nil {
		return err
	}
	id, err := diskID(r)
	if err != nil {
		return err
	}
	force, err := diskForce(r)
	if err != nil {
		return err
	}
	out, err := m.Delete(r.Context(), id, force)
	if err != nil {
		return diskError(err, "the disk was not removed")
	}
	web.WriteJSON(w, http.StatusOK, out)
	return nil
}

// archiveDisk is POST /disks/{id}/archive [{purge?}]: 202 ArchiveView,
// running; GET /disks shows its progress.
func (a *API) archiveDisk(w http.ResponseWriter, r *http.Request) error {
	m, err := a.disks()
	if err != nil {
		return err
	}
	id, err := diskID(r)
	if err != nil {
		return err
	}
	var req apitype.DiskArchiveRequest
	if r.ContentLength != 0 {
		if err := web.ReadClosedJSON(w, r, &req, apitype.UnknownKey); err != nil {
			return err
		}
	}
	v, err := m.Archive(r.Context(), id, req.Purge != nil && *req.Purge)
	if err != nil {
		return diskError(err, "the disk archive did not start")
	}
	web.WriteJSON(w, http.StatusAccepted, v)
	return nil
}
