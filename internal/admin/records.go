package admin

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/registry"
	"github.com/berth-dev/berth/internal/spec"
	"github.com/berth-dev/berth/internal/web"
)

// The record routes (app-lb.md §2.3, [v2]): forget a deployment's record
// without tearing anything down, for a deployment with nothing live.
// DELETE /deployments/{id}/record is behind the deployment wall (a
// confined caller gets the same 403 for a deployment of another
// namespace as for a missing one); DELETE /deployments/{id}/retired-record
// is the fleet's, and keeps the record as JSON under <data>/retired first.
func (a *API) routeRecords() {
	a.handle("DELETE /deployments/{id}/record", tierCRUD, wallDeployment, a.deleteRecord)
	a.handle("DELETE /deployments/{id}/retired-record", tierCRUD, wallFleet, a.deleteRetiredRecord)
}

// ifMatch is the required If-Match of a record deletion: 428 without one,
// 400 for one that is not a strong ETag, as PUT parses it.
func ifMatch(r *http.Request) (string, error) {
	im := r.Header.Get("If-Match")
	if im == "" {
		return "", web.Errorf(http.StatusPreconditionRequired, "If-Match is required: send the deployment's ETag (GET /deployments/%s answers it)", r.PathValue("id"))
	}
	tag, err := spec.ParseIfMatch(im)
	if err != nil {
		return "", web.Errorf(http.StatusBadRequest, "%v", err)
	}
	return tag, nil
}

// idle says what is live of deployment e: its replicas (ready, draining,
// pending or suspended) and a running job; nil when nothing is.
func (a *API) idle(r *http.Request, e *registry.Entry, running bool) error {
	id := e.Spec.ID
	if running {
		return web.Errorf(http.StatusConflict, "a job for deployment %q is running; wait for it to end", id)
	}
	if e.VMPool == nil {
		return nil
	}
	st := e.VMPool.Status()
	var live []string
	n := 0
	for _, rv := range st.Replicas {
		if rv.Phase != "pending" {
			n++
		}
	}
	if n > 0 {
		live = append(live, fmt.Sprintf("%d running", n))
	}
	if st.Pending > 0 {
		live = append(live, fmt.Sprintf("%d pending", st.Pending))
	}
	if st.Suspended > 0 {
		live = append(live, fmt.Sprintf("%d suspended", st.Suspended))
	}
	if len(live) > 0 {
		return web.Errorf(http.StatusConflict, "deployment %q still has replicas (%s): only a record with nothing live is forgotten; DELETE /deployments/%s tears it down", id, strings.Join(live, ", "), id)
	}
	if ws, ok := e.VMPool.Config().Workspace.(WorkspaceStatuser); ok {
		// Forgetting the record removes the workspace from this host: not
		// while a capture is owed or a snapshot is not in its store yet.
		if w := ws.WorkspaceStatus(); w != nil && (w.Phase != apitype.WorkspaceIdle || len(w.Pending) > 0 || w.PushPending) {
			return web.Errorf(http.StatusConflict, "deployment %q's workspace is not settled (phase %s, %d captures pending, push pending: %v): its record is forgotten once its last snapshot is in its store", id, w.Phase, len(w.Pending), w.PushPending)
		}
	}
	return nil
}

// jobRunning reports whether a job of deployment id runs.
func (a *API) jobRunning(r *http.Request, id string) (bool, error) {
	if a.o.Jobs == nil {
		return false, nil
	}
	infos, err := a.o.Jobs.List(r.Context(), id)
	if err != nil {
		return false, &web.Error{Status: http.StatusServiceUnavailable, Message: "the job history could not be read, so berth cannot tell whether a job runs", Err: err}
	}
	for _, in := range infos {
		if in.Record.Status == apitype.JobRunning {
			return true, nil
		}
	}
	return false, nil
}

// forget removes deployment id's record if If-Match matches and nothing
// is live, calling keep (if set) with the entry first: 204.
func (a *API) forget(w http.ResponseWriter, r *http.Request, keep func(*registry.Entry) error) error {
	id := r.PathValue("id")
	tag, err := ifMatch(r)
	if err != nil {
		return err
	}
	if _, ok := a.o.Registry.Get(id); !ok {
		return errorFor(registry.ErrNotFound, id)
	}
	running, err := a.jobRunning(r, id)
	if err != nil {
		return err
	}
	var gone *registry.Entry
	err = a.o.Registry.Forget(r.Context(), id, tag, func(e *registry.Entry) error {
		if err := a.idle(r, e, running); err != nil {
			return err
		}
		gone = e
		if keep != nil {
			return keep(e)
		}
		return nil
	})
	if err != nil {
		var we *web.Error
		if errors.As(err, &we) {
			return we
		}
		if errors.Is(err, registry.ErrPrecondition) {
			return web.Errorf(http.StatusPreconditionFailed, "If-Match does not match the current deployment spec")
		}
		return errorFor(err, id)
	}
	if gone != nil {
		a.announce(gone, apitype.FeedRemoved)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// deleteRecord is DELETE /deployments/{id}/record.
func (a *API) deleteRecord(w http.ResponseWriter, r *http.Request) error {
	return a.forget(w, r, nil)
}

// RetiredRecord is what DELETE /deployments/{id}/retired-record keeps of
// a deployment, as <data>/retired/<sha256 of this JSON>.json.
type RetiredRecord struct {
	Spec      apitype.DeploymentSpec `json:"spec"`
	ETag      string                 `json:"etag"`
	Revision  int64                  `json:"revision"`
	CreatedAt time.Time              `json:"created_at"`
	UpdatedAt time.Time              `json:"updated_at"`
	RetiredAt time.Time              `json:"retired_at"`
	RetiredBy string                 `json:"retired_by"`
}

// deleteRetiredRecord is DELETE /deployments/{id}/retired-record: the
// record is written to the retired directory (fsynced) before it is
// forgotten, so a failure to keep it forgets nothing.
func (a *API) deleteRetiredRecord(w http.ResponseWriter, r *http.Request) error {
	if a.o.RetiredDir == "" {
		return web.Errorf(http.StatusServiceUnavailable, "retired records are not kept on this server")
	}
	return a.forget(w, r, func(e *registry.Entry) error {
		rec := RetiredRecord{Spec: e.Spec, ETag: e.ETag, Revision: e.Revision, CreatedAt: e.CreatedAt, UpdatedAt: e.UpdatedAt,
			RetiredAt: time.Now().UTC(), RetiredBy: caller(r).Name()}
		b, err := json.MarshalIndent(rec, "", "  ")
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		if err := writeRetired(a.o.RetiredDir, hex.EncodeToString(sum[:])+".json", b); err != nil {
			return &web.Error{Status: http.StatusInternalServerError, Message: "the retired record was not kept, so it was not forgotten", Err: err}
		}
		return nil
	})
}

// writeRetired writes name in dir durably: a temporary file, fsynced,
// renamed, and the directory fsynced.
func writeRetired(dir, name string, b []byte) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+name+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), filepath.Join(dir, name))
	}
	if err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
