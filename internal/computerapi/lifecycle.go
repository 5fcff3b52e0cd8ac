package computerapi

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/berth-dev/berth/apitype/computertype"

	"github.com/berth-dev/berth/internal/auth"
	"github.com/berth-dev/berth/internal/computer"
	"github.com/berth-dev/berth/internal/grant"
	"github.com/berth-dev/berth/internal/web"
)

func view(c computer.Computer) computertype.Computer {
	v := computertype.Computer{
		ID: c.ID, Namespace: c.Namespace, Image: c.Image, Size: c.Size,
		IdleTimeoutSecs: int64(c.IdleTimeout / time.Second),
		Backings:        c.Backings, State: c.State,
		CreatedAt: c.CreatedAt.UnixMilli(), UpdatedAt: c.UpdatedAt.UnixMilli(),
	}
	if v.Backings == nil {
		v.Backings = []computer.Backing{}
	}
	if c.Active.Kind != "" {
		act := c.Active
		v.Active = &act
	}
	return v
}

func (a *API) create(w http.ResponseWriter, r *http.Request) error {
	var req computertype.NewComputer
	if err := readJSON(w, r, &req); err != nil {
		return err
	}
	p := auth.FromContext(r.Context())
	ns := req.Namespace
	if ns == "" {
		ns = "default"
		if p.Confined() {
			ns = p.Token.Namespace
		}
	}
	if !p.Administers(ns) {
		return web.Errorf(http.StatusForbidden, "this credential does not administer namespace %q", ns)
	}
	if req.ID == "" {
		var b [6]byte
		rand.Read(b[:])
		req.ID = hex.EncodeToString(b[:])
	}
	if err := a.mayBack(p.Confined(), ns, "backings", req.Backings); err != nil {
		return err
	}
	cr := computer.CreateRequest{ID: req.ID, Namespace: ns, Image: req.Image, Size: req.Size, Backings: req.Backings, Start: req.Start}
	if req.IdleTimeoutSecs != nil {
		if *req.IdleTimeoutSecs < 0 {
			return web.Invalid("idleTimeoutSecs", "must not be negative")
		}
		cr.IdleTimeout = time.Duration(*req.IdleTimeoutSecs) * time.Second
	}
	c, err := a.o.Manager.Create(r.Context(), cr)
	if err != nil {
		return managerError(err, req.ID)
	}
	w.Header().Set("Location", "/computers/"+c.ID)
	web.WriteJSON(w, http.StatusCreated, view(c))
	return nil
}

func (a *API) list(w http.ResponseWriter, r *http.Request) error {
	p := auth.FromContext(r.Context())
	ns := r.URL.Query().Get("namespace")
	if ns != "" && !p.Reaches(ns) {
		return web.Errorf(http.StatusForbidden, "this credential cannot reach namespace %q", ns)
	}
	cs, err := a.o.Manager.List(r.Context(), ns)
	if err != nil {
		return managerError(err, "")
	}
	out := computertype.ComputerList{Computers: []computertype.Computer{}}
	for _, c := range cs {
		if p.Reaches(c.Namespace) {
			out.Computers = append(out.Computers, view(c))
		}
	}
	web.WriteJSON(w, http.StatusOK, out)
	return nil
}

func (a *API) get(w http.ResponseWriter, r *http.Request, c *call) error {
	web.WriteJSON(w, http.StatusOK, view(c.comp))
	return nil
}

func (a *API) delete(w http.ResponseWriter, r *http.Request, c *call) error {
	if err := a.o.Manager.Delete(r.Context(), c.id); err != nil {
		return managerError(err, c.id)
	}
	// A later Computer with the same id must not inherit these grants.
	if _, err := a.o.Grants.RevokeComputer(r.Context(), c.id); err != nil {
		return &web.Error{Status: http.StatusInternalServerError, Message: "the Computer was deleted but its grants were not revoked; retry the delete", Err: err}
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (a *API) start(w http.ResponseWriter, r *http.Request, c *call) error {
	wait, err := web.BoolParam(r, "wait")
	if err != nil {
		return err
	}
	comp, err := a.o.Manager.Start(r.Context(), c.id, wait)
	if err != nil {
		return managerError(err, c.id)
	}
	code := http.StatusOK
	if comp.State.State == "queued" || comp.State.State == "starting" {
		code = http.StatusAccepted
	}
	web.WriteJSON(w, code, view(comp))
	return nil
}

func (a *API) stop(w http.ResponseWriter, r *http.Request, c *call) error {
	if err := a.o.Manager.Stop(r.Context(), c.id); err != nil {
		return managerError(err, c.id)
	}
	comp, err := a.o.Manager.Get(r.Context(), c.id)
	if err != nil {
		return managerError(err, c.id)
	}
	web.WriteJSON(w, http.StatusOK, view(comp))
	return nil
}

func (a *API) getBackings(w http.ResponseWriter, r *http.Request, c *call) error {
	v := view(c.comp)
	web.WriteJSON(w, http.StatusOK, computertype.Backings{ComputerID: c.id, Backings: v.Backings})
	return nil
}

func (a *API) putBackings(w http.ResponseWriter, r *http.Request, c *call) error {
	var raw map[string]json.RawMessage
	if err := readJSON(w, r, &raw); err != nil {
		return err
	}
	if _, ok := raw["backings"]; !ok {
		return web.Invalid("backings", "is required (null for the fleet default)")
	}
	var req computertype.Backings
	if err := decodeJSON(mustJSON(raw), &req); err != nil {
		return err
	}
	if req.ComputerID != "" && req.ComputerID != c.id {
		return web.Invalid("computerId", "names Computer %q, but the path names %q", req.ComputerID, c.id)
	}
	// Under a grant, the kinds the Computer has now stay allowed (an
	// operator's process Computer keeps working), but no new kind
	// outside the namespace's drivers comes in by a grant.
	var keep []computer.Backing
	if c.p == nil {
		keep = c.comp.Backings
	}
	if err := a.mayBack(c.p == nil || c.p.Confined(), c.comp.Namespace, "backings", req.Backings, keep...); err != nil {
		return err
	}
	comp, err := a.o.Manager.SetBackings(r.Context(), c.id, req.Backings)
	if err != nil {
		return managerError(err, c.id)
	}
	v := view(comp)
	web.WriteJSON(w, http.StatusOK, computertype.Backings{ComputerID: c.id, Backings: v.Backings})
	return nil
}

// actions converts the wire's action names; grant.Issue checks them.
func actions(names []string) []grant.Action {
	if names == nil {
		return nil
	}
	out := make([]grant.Action, len(names))
	for i, n := range names {
		out[i] = grant.Action(n)
	}
	return out
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// ---- grants ----

func (a *API) issueGrant(w http.ResponseWriter, r *http.Request, c *call) error {
	var req computertype.NewGrant
	if err := readJSON(w, r, &req); err != nil {
		return err
	}
	now := a.o.Now()
	var exp time.Time
	switch {
	case req.ExpiresAt != nil && req.ExpiresInSecs != nil:
		return web.Invalid("expiresAt", "give expiresAt or expiresInSecs, not both")
	case req.ExpiresAt != nil:
		exp = time.UnixMilli(*req.ExpiresAt)
	case req.ExpiresInSecs != nil:
		if *req.ExpiresInSecs <= 0 || *req.ExpiresInSecs > int64(grant.DefaultMaxTTL/time.Second) {
			return web.Invalid("expiresInSecs", "must be from 1 to %d", int64(grant.DefaultMaxTTL/time.Second))
		}
		exp = now.Add(time.Duration(*req.ExpiresInSecs) * time.Second)
	default:
		return web.Invalid("expiresAt", "is required (or expiresInSecs)")
	}
	prov := grant.Provenance{Actor: c.prov.Actor, Via: c.prov.Via}
	if req.Provenance != nil {
		prov = *req.Provenance
	}
	g, tok, err := a.o.Grants.Issue(r.Context(), grant.Request{
		ComputerID: c.id, Actions: actions(req.Actions), ExpiresAt: exp, Egress: req.Egress, Provenance: prov,
	})
	var fe *grant.FieldError
	if errors.As(err, &fe) {
		return web.Invalid(fe.Field, "%s", fe.Msg)
	}
	if err != nil {
		return &web.Error{Status: http.StatusInternalServerError, Message: "the grant was not issued", Err: err}
	}
	w.Header().Set("Cache-Control", "no-store") // the token is in this body
	web.WriteJSON(w, http.StatusCreated, computertype.Grant{ID: g.ID, Grant: g.Contract(), IssuedAt: g.IssuedAt, Token: tok})
	return nil
}

func (a *API) listGrants(w http.ResponseWriter, r *http.Request, c *call) error {
	out := computertype.GrantList{Grants: []computertype.Grant{}}
	for _, s := range a.o.Grants.List(c.id) {
		v := computertype.Grant{ID: s.Grant.ID, Grant: s.Grant.Contract(), IssuedAt: s.Grant.IssuedAt}
		if !s.RevokedAt.IsZero() {
			at := s.RevokedAt.UnixMilli()
			v.RevokedAt = &at
		}
		out.Grants = append(out.Grants, v)
	}
	web.WriteJSON(w, http.StatusOK, out)
	return nil
}

func (a *API) revokeGrant(w http.ResponseWriter, r *http.Request, c *call) error {
	gid := r.PathValue("gid")
	err := a.o.Grants.Revoke(r.Context(), c.id, gid)
	if errors.Is(err, grant.ErrNotFound) {
		return web.Errorf(http.StatusNotFound, "Computer %q has no grant %q (or it has expired)", c.id, gid)
	}
	if err != nil {
		return &web.Error{Status: http.StatusInternalServerError, Message: "the grant was not revoked", Err: err}
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// ---- usage ----

func (a *API) pendingUsage(w http.ResponseWriter, r *http.Request) error {
	us, err := a.o.Manager.PendingUsage(r.Context())
	if err != nil {
		return managerError(err, "")
	}
	out := computertype.PendingUsage{Intervals: make([]computertype.ComputerFact, len(us))}
	for i, u := range us {
		out.Intervals[i] = computer.Fact{
			Kind: computer.FactInterval, ComputerID: u.ComputerID, Provenance: computer.Provenance{Actor: computer.Actor, Via: "ledger"},
			RuntimeID: u.RuntimeID, Backing: u.Backing, StartedAt: u.StartedAt, ObservedAt: u.ObservedAt, Ended: u.Ended,
		}
	}
	web.WriteJSON(w, http.StatusOK, out)
	return nil
}

func (a *API) capacity(w http.ResponseWriter, r *http.Request) error {
	c, err := a.o.Manager.Capacity(r.Context())
	if err != nil {
		return managerError(err, "")
	}
	web.WriteJSON(w, http.StatusOK, computertype.Capacity{Hosts: c.Hosts, FleetLimit: c.FleetLimit, RecycleAfterSecs: int64(c.RecycleAfter / time.Second)})
	return nil
}

func (a *API) acknowledgeUsage(w http.ResponseWriter, r *http.Request) error {
	var req computertype.UsageAck
	if err := readJSON(w, r, &req); err != nil {
		return err
	}
	if req.Intervals == nil {
		return web.Invalid("intervals", "is required")
	}
	acks := make([]computer.UsageInterval, len(req.Intervals))
	for i, iv := range req.Intervals {
		if iv.Kind != "" && iv.Kind != "interval" {
			return web.Invalid(fmt.Sprintf("intervals[%d].kind", i), "must be \"interval\", got %q", iv.Kind)
		}
		acks[i] = computer.UsageInterval{RuntimeID: iv.RuntimeID, Backing: iv.Backing, StartedAt: iv.StartedAt, ObservedAt: iv.ObservedAt, Ended: iv.Ended}
	}
	if err := a.o.Manager.AcknowledgeUsage(r.Context(), acks); err != nil {
		return managerError(err, "")
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// mayBack refuses (403, naming field[i], or field for the default) a
// backing whose driver the operator does not allow confined callers in
// namespace ns, unless its kind is among keep; unconfined callers may use
// every backing. A grant counts as confined: it is an agent's credential,
// never the operator's.
func (a *API) mayBack(confined bool, ns, field string, bs []computer.Backing, keep ...computer.Backing) error {
	if !confined {
		return nil
	}
	name := func(i int) string { return fmt.Sprintf("%s[%d]", field, i) }
	if len(bs) == 0 {
		bs = a.o.DefaultBackings
		if len(bs) == 0 {
			bs = []computer.Backing{{Kind: computer.KindProcess}}
		}
		name = func(int) string { return field }
	}
	allowed := a.o.Confinement.DriversFor(ns)
	for i, b := range bs {
		var ok bool
		switch b.Kind {
		case computer.KindProcess:
			ok = slices.Contains(allowed, "process")
		case computer.KindContainer:
			ok = slices.Contains(allowed, "container")
		case computer.KindVM:
			ok = slices.ContainsFunc(allowed, func(d string) bool { return d == "kvm" || d == "libvirt" || d == "firecracker" })
		default:
			continue // the manager refuses unknown kinds
		}
		ok = ok || slices.ContainsFunc(keep, func(k computer.Backing) bool { return k.Kind == b.Kind })
		if !ok {
			return web.Errorf(http.StatusForbidden, "%s: the %s backing is not allowed for namespace %q (its drivers: %s); name another backing, or ask the operator", name(i), b.Kind, ns, strings.Join(allowed, ", "))
		}
	}
	return nil
}
