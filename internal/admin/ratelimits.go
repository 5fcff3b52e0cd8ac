package admin

import (
	"errors"
	"net/http"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/ratelimit"
	"github.com/berth-dev/berth/internal/web"
)

// The routes of berth's own per-client rate limits (apitype.RateLimit;
// not app-lb's), one per deployment, beside its spec:
//
//	GET    /deployments/{id}/rate-limit  200 RateLimit; 404 when none
//	PUT    /deployments/{id}/rate-limit  200 the stored (normalized) RateLimit
//	DELETE /deployments/{id}/rate-limit  204; 404 when none
//
// They sit behind the deployment wall like every /deployments/{id} route:
// a caller confined to a namespace is refused a foreign deployment exactly
// as a missing one (auth.WallDeployment), so the answers say nothing of
// what lies behind another wall.

// rateLimitTarget checks that rate limits are enabled and that {id} is a
// deployment.
func (a *API) rateLimitTarget(r *http.Request) (string, error) {
	if a.o.RateLimits == nil {
		return "", unavailable("rate limits")
	}
	id := r.PathValue("id")
	if _, ok := a.o.Registry.Get(id); !ok {
		return "", web.Errorf(http.StatusNotFound, "no deployment %q", id)
	}
	return id, nil
}

func (a *API) getRateLimit(w http.ResponseWriter, r *http.Request) error {
	id, err := a.rateLimitTarget(r)
	if err != nil {
		return err
	}
	rl, ok := a.o.RateLimits.Get(id)
	if !ok {
		return web.Errorf(http.StatusNotFound, "deployment %q has no rate limit", id)
	}
	web.WriteJSON(w, http.StatusOK, rl)
	return nil
}

// putRateLimit is PUT /deployments/{id}/rate-limit: the deployment's limit
// set or replaced whole (a replaced limit's counts start afresh).
func (a *API) putRateLimit(w http.ResponseWriter, r *http.Request) error {
	id, err := a.rateLimitTarget(r)
	if err != nil {
		return err
	}
	// Closed: a RateLimit is berth's own type, with no newer peer's keys
	// to carry through, so an unknown key is a mistake (a misspelt limit
	// would go unenforced).
	var rl apitype.RateLimit
	if err := web.ReadClosedJSON(w, r, &rl, apitype.UnknownKey); err != nil {
		return err
	}
	if caller(r).Confined() && rl.MaxClients > ratelimit.DefaultMaxClients {
		// Each remembered client is about 200 bytes of berth's memory,
		// grown by whoever sends traffic: a namespace keeps to the default.
		return web.Invalid("max_clients", "at most %d for a namespace credential", ratelimit.DefaultMaxClients)
	}
	out, err := a.o.RateLimits.Put(r.Context(), id, rl)
	if err != nil {
		return rateLimitError(err, id)
	}
	web.WriteJSON(w, http.StatusOK, out)
	return nil
}

func (a *API) deleteRateLimit(w http.ResponseWriter, r *http.Request) error {
	id, err := a.rateLimitTarget(r)
	if err != nil {
		return err
	}
	if err := a.o.RateLimits.Delete(r.Context(), id); err != nil {
		return rateLimitError(err, id)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func rateLimitError(err error, id string) error {
	var fe *web.FieldError
	switch {
	case errors.As(err, &fe):
		return web.Invalid(fe.Field, "%s", fe.Msg)
	case errors.Is(err, ratelimit.ErrNoDeployment):
		return web.Errorf(http.StatusNotFound, "no deployment %q", id)
	case errors.Is(err, ratelimit.ErrNotFound):
		return web.Errorf(http.StatusNotFound, "deployment %q has no rate limit", id)
	default:
		return &web.Error{Status: http.StatusInternalServerError, Message: "the rate limit change was not saved", Err: err}
	}
}
