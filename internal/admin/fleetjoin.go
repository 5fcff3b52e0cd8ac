package admin

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/web"
)

// FleetJoiner signs a joining host's certificate request (berth fleet
// join) on the host that holds the fleet CA (berth fleet init; package
// fleetca, which the composition root adapts).
type FleetJoiner interface {
	// Join verifies req's MAC under the join token it names, spends the
	// token and answers the host's certificate and the fleet's secret key,
	// sealed with the token for this request; ErrJoinRefused for a token
	// that is not good (unknown or a MAC that does not verify, alike; used;
	// expired), ErrJoinBadRequest for a malformed request.
	Join(ctx context.Context, req apitype.FleetJoinRequest) (apitype.FleetJoinResponse, error)
}

// FleetRenewer renews a joined host's certificate (berth fleet renew) on
// the host that holds the fleet CA.
type FleetRenewer interface {
	// Renew checks req's proof of the current certificate and answers a
	// new one; ErrRenewRefused for a proof that does not hold,
	// ErrJoinBadRequest for a malformed request.
	Renew(ctx context.Context, req apitype.FleetRenewRequest) (apitype.FleetCertificate, error)
}

// FleetJoiner's and FleetRenewer's refusals; the error's text says why.
var (
	ErrJoinRefused    = errors.New("admin: join refused")
	ErrJoinBadRequest = errors.New("admin: bad join request")
	ErrRenewRefused   = errors.New("admin: renewal refused")
)

// POST /fleet/join takes no credential: the one-time join token is one,
// though it never crosses the wire. The body names it by a public id and
// carries a MAC under it over a fresh nonce and the certificate request
// (verified in constant time before the token, good once, for an hour by
// default, is spent), and the answer (the certificate, the CA, which the
// joiner also checks against the fingerprint it was given, and the
// fleet's secret key) is sealed with it for that request, so the route
// may be served in plaintext (README, Fleet; apitype.FleetJoinRequest).
//
// POST /fleet/renew takes no credential either: the body proves the
// caller holds a still valid host certificate of the fleet CA (the
// certificate and a fresh signature by its key over the new certificate
// request; apitype.FleetRenewRequest), and the answer is a certificate
// for a key only the caller holds.
func (a *API) routeFleetJoin() {
	a.handle("POST /fleet/join", tierOpen, wallNone, a.fleetJoin)
	a.handle("POST /fleet/renew", tierOpen, wallNone, a.fleetRenew)
}

func (a *API) fleetRenew(w http.ResponseWriter, r *http.Request) error {
	if a.o.FleetRenew == nil {
		return &web.Error{Status: http.StatusConflict, Code: "fleet_ca_not_here",
			Message: "this berth holds no fleet CA: hosts renew their certificates through the fleet's first host, the one berth fleet init ran on"}
	}
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	var req apitype.FleetRenewRequest
	if err := web.ReadJSON(w, r, &req); err != nil {
		return err
	}
	if req.Chain == "" || req.CSR == "" || req.Signature == "" || req.Timestamp == 0 {
		return web.Errorf(http.StatusBadRequest, "chain, csr, timestamp and signature are required")
	}
	resp, err := a.o.FleetRenew.Renew(r.Context(), req)
	switch {
	case errors.Is(err, ErrRenewRefused):
		return &web.Error{Status: http.StatusForbidden, Code: "renew_refused", Message: err.Error()}
	case errors.Is(err, ErrJoinBadRequest):
		return &web.Error{Status: http.StatusBadRequest, Message: err.Error()}
	case err != nil:
		return &web.Error{Status: http.StatusInternalServerError, Message: "the renewal could not be signed", Err: err}
	}
	web.WriteJSON(w, http.StatusOK, resp)
	return nil
}

func (a *API) fleetJoin(w http.ResponseWriter, r *http.Request) error {
	if a.o.FleetJoin == nil {
		return &web.Error{Status: http.StatusConflict, Code: "fleet_ca_not_here",
			Message: "this berth holds no fleet CA: hosts join the fleet through its first host, the one berth fleet init ran on"}
	}
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	var req apitype.FleetJoinRequest
	if err := web.ReadJSON(w, r, &req); err != nil {
		return err
	}
	var missing []string
	for _, f := range []struct{ name, v string }{{"token_id", req.TokenID}, {"nonce", req.Nonce}, {"csr", req.CSR}, {"mac", req.MAC}} {
		if f.v == "" {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		return web.Errorf(http.StatusBadRequest, "%s required", strings.Join(missing, ", "))
	}
	resp, err := a.o.FleetJoin.Join(r.Context(), req)
	switch {
	case errors.Is(err, ErrJoinRefused):
		return &web.Error{Status: http.StatusForbidden, Code: "join_refused", Message: err.Error()}
	case errors.Is(err, ErrJoinBadRequest):
		return &web.Error{Status: http.StatusBadRequest, Message: err.Error()}
	case err != nil:
		return &web.Error{Status: http.StatusInternalServerError, Message: "the join could not be signed", Err: err}
	}
	web.WriteJSON(w, http.StatusOK, resp)
	return nil
}
