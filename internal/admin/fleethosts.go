package admin

import (
	"context"
	"errors"
	"net/http"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/web"
)

// FleetHosts is the fleet of hosts this berth belongs to (berth serve
// --etcd; package etcdfleet, which the composition root adapts), as the
// /fleet/hosts routes use it.
type FleetHosts interface {
	// Hosts lists the live hosts and the fleet's slots.
	Hosts(ctx context.Context) (apitype.FleetHosts, error)
	// SetHostState cordons, drains or (apitype.HostActive) uncordons a
	// host; ErrNoFleetHost when no such host is known.
	SetHostState(ctx context.Context, id, state string) error
}

// FleetRevoker revokes a host's certificates (POST
// /fleet/hosts/{id}/revoke) on the host holding the fleet CA; nil there
// elsewhere.
type FleetRevoker interface {
	// Revoke revokes every certificate the fleet CA issued to host id,
	// rewrites the CRL and publishes it; ErrNoFleetHost when the CA
	// issued none to id, ErrRevokeRefused (the text says why) for the CA
	// host's own id or a bad id.
	Revoke(ctx context.Context, id, reason string) (apitype.FleetRevocation, error)
}

// ErrRevokeRefused is FleetRevoker.Revoke's refusal.
var ErrRevokeRefused = errors.New("admin: revocation refused")

// ErrNoFleetHost is FleetHosts.SetHostState's answer for an unknown host.
var ErrNoFleetHost = errors.New("admin: no such fleet host")

// The fleet's host routes (berth's own): fleet-wide, the list read with
// view, the state changes with admin; a namespace-confined caller gets
// the fleet-wide 403 on each. Without a fleet they answer 409
// fleet_not_configured.
func (a *API) routeFleetHosts() {
	a.handle("GET /fleet/hosts", tierView, wallFleet, a.listFleetHosts)
	a.handle("POST /fleet/hosts/{id}/cordon", tierCRUD, wallFleet, a.setHostState(apitype.HostCordoned))
	a.handle("POST /fleet/hosts/{id}/drain", tierCRUD, wallFleet, a.setHostState(apitype.HostDraining))
	a.handle("POST /fleet/hosts/{id}/uncordon", tierCRUD, wallFleet, a.setHostState(apitype.HostActive))
	// Revocation of a host's certificates: fleet-wide, admin, on the
	// host holding the fleet CA (409 fleet_ca_not_here elsewhere).
	a.handle("POST /fleet/hosts/{id}/revoke", tierCRUD, wallFleet, a.revokeHost)
	// The fleet tokens, hashes only (app-lb.md §7.6): fleet-wide, view.
	a.handle("GET /fleet/tokens", tierView, wallFleet, a.listFleetTokens)
}

func (a *API) listFleetTokens(w http.ResponseWriter, r *http.Request) error {
	if a.o.Tokens == nil {
		return unavailable("app-tokens")
	}
	ts, err := a.o.Tokens.FleetTokens()
	if err != nil {
		return err
	}
	w.Header().Set("Cache-Control", "no-store")
	web.WriteJSON(w, http.StatusOK, ts)
	return nil
}

func (a *API) fleetHosts() (FleetHosts, error) {
	if a.o.FleetHosts == nil {
		return nil, &web.Error{Status: http.StatusConflict, Code: "fleet_not_configured",
			Message: "this berth is not part of a fleet: start it with --etcd ENDPOINTS (or --etcd-dev) to join one"}
	}
	return a.o.FleetHosts, nil
}

func (a *API) listFleetHosts(w http.ResponseWriter, r *http.Request) error {
	f, err := a.fleetHosts()
	if err != nil {
		return err
	}
	hs, err := f.Hosts(r.Context())
	if err != nil {
		return &web.Error{Status: http.StatusServiceUnavailable, Message: "the fleet's hosts could not be read from etcd", Err: err, Header: http.Header{"Retry-After": {"5"}}}
	}
	if hs.Hosts == nil {
		hs.Hosts = []apitype.FleetHost{}
	}
	web.WriteJSON(w, http.StatusOK, hs)
	return nil
}

func (a *API) setHostState(state string) web.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		f, err := a.fleetHosts()
		if err != nil {
			return err
		}
		id := r.PathValue("id")
		switch err := f.SetHostState(r.Context(), id, state); {
		case errors.Is(err, ErrNoFleetHost):
			return web.Errorf(http.StatusNotFound, "no host %q in the fleet", id)
		case err != nil:
			return &web.Error{Status: http.StatusServiceUnavailable, Message: "the host's state could not be written to etcd", Err: err, Header: http.Header{"Retry-After": {"5"}}}
		}
		hs, err := f.Hosts(r.Context())
		if err != nil {
			return &web.Error{Status: http.StatusServiceUnavailable, Message: "the fleet's hosts could not be read from etcd", Err: err, Header: http.Header{"Retry-After": {"5"}}}
		}
		for _, h := range hs.Hosts {
			if h.ID == id {
				web.WriteJSON(w, http.StatusOK, h)
				return nil
			}
		}
		// Known by its state but down: nothing live to show.
		web.WriteJSON(w, http.StatusOK, apitype.FleetHost{ID: id, State: state, Drivers: []string{}})
		return nil
	}
}

func (a *API) revokeHost(w http.ResponseWriter, r *http.Request) error {
	if a.o.FleetRevoke == nil {
		return &web.Error{Status: http.StatusConflict, Code: "fleet_ca_not_here",
			Message: "this berth holds no fleet CA: revoke a host on the fleet's first host, the one berth fleet init ran on"}
	}
	var req apitype.FleetRevokeRequest
	if r.ContentLength != 0 {
		r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
		if err := web.ReadJSON(w, r, &req); err != nil {
			return err
		}
	}
	id := r.PathValue("id")
	res, err := a.o.FleetRevoke.Revoke(r.Context(), id, req.Reason)
	switch {
	case errors.Is(err, ErrNoFleetHost):
		return &web.Error{Status: http.StatusNotFound, Code: "no_fleet_host", Message: err.Error()}
	case errors.Is(err, ErrRevokeRefused):
		return &web.Error{Status: http.StatusBadRequest, Message: err.Error()}
	case err != nil:
		return &web.Error{Status: http.StatusInternalServerError, Message: "the revocation could not be written", Err: err}
	}
	if res.Serials == nil {
		res.Serials = []string{}
	}
	web.WriteJSON(w, http.StatusOK, res)
	return nil
}
