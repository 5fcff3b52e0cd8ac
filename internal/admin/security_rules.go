package admin

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/guard"
	"github.com/berth-dev/berth/internal/web"
)

// The guard rules' writes (app-lb §6.3): fleet-wide, for operators only.
// The rules in force are read through GET /security.

func (a *API) guard() (*guard.Guard, error) {
	if a.o.Guard == nil {
		return nil, web.Errorf(http.StatusServiceUnavailable, "guard rules are not enabled on this server")
	}
	return a.o.Guard, nil
}

// guardError maps package guard's errors onto the envelope; unsaved says
// what a change the store refused left in force.
func guardError(err error, id, unsaved string) error {
	var fe *web.FieldError
	switch {
	case errors.As(err, &fe):
		return &web.Error{Status: http.StatusBadRequest, Message: fe.Error()}
	case errors.Is(err, guard.ErrEmptyMatch):
		return &web.Error{Status: http.StatusBadRequest, Message: err.Error()}
	case errors.Is(err, guard.ErrFull):
		return &web.Error{Status: http.StatusConflict, Message: err.Error()}
	case errors.Is(err, guard.ErrNotFound):
		return web.Errorf(http.StatusNotFound, "no rule %q", id)
	case errors.Is(err, guard.ErrNotSaved):
		return &web.Error{Status: http.StatusInternalServerError, Message: unsaved + ", but was not saved: berth retries the write every 10 s, and a restart before it lands undoes it", Err: err}
	default:
		return &web.Error{Status: http.StatusInternalServerError, Message: "the guard rules failed", Err: err}
	}
}

// postRule is POST /security/rules: a rule in force, or the one with the
// same conditions replaced (its note and expiry). 201 RuleView.
func (a *API) postRule(w http.ResponseWriter, r *http.Request) error {
	g, err := a.guard()
	if err != nil {
		return err
	}
	var spec apitype.RuleSpec
	if err := web.ReadClosedJSON(w, r, &spec, apitype.UnknownKey); err != nil {
		return err
	}
	v, err := g.Add(r.Context(), spec)
	if err != nil {
		return guardError(err, "", "the rule is in force")
	}
	web.WriteJSON(w, http.StatusCreated, v)
	return nil
}

// rulePatch is the body of PATCH /security/rules/{id}; the field is
// required, null making the rule permanent.
type rulePatch struct {
	ExpiresInSecs json.RawMessage `json:"expires_in_secs"`
}

// patchRule is PATCH /security/rules/{id} {expires_in_secs: number|null}.
func (a *API) patchRule(w http.ResponseWriter, r *http.Request) error {
	g, err := a.guard()
	if err != nil {
		return err
	}
	var p rulePatch
	if err := web.ReadClosedJSON(w, r, &p, apitype.UnknownKey); err != nil {
		return err
	}
	var secs *int64
	switch raw := bytes.TrimSpace(p.ExpiresInSecs); {
	case raw == nil:
		return web.Invalid("expires_in_secs", "required: seconds from now, or null for a permanent rule")
	case string(raw) == "null":
	default:
		var n int64
		if err := json.Unmarshal(raw, &n); err != nil {
			return web.Invalid("expires_in_secs", "expected a whole number of seconds or null, got %s", raw)
		}
		secs = &n
	}
	id := r.PathValue("id")
	v, err := g.SetExpiry(r.Context(), id, secs)
	if err != nil {
		return guardError(err, id, "the new expiry is in force")
	}
	web.WriteJSON(w, http.StatusOK, v)
	return nil
}

// deleteRule is DELETE /security/rules/{id}: 204.
func (a *API) deleteRule(w http.ResponseWriter, r *http.Request) error {
	g, err := a.guard()
	if err != nil {
		return err
	}
	id := r.PathValue("id")
	if err := g.Delete(r.Context(), id); err != nil {
		return guardError(err, id, "the rule is out of force")
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
