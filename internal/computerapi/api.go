// Package computerapi serves the Computer API on berth's admin listener:
// the lifecycle of Computers, the grants that let agents use them, every
// operation of the contract's computerActionSchema under
// /computers/{id}/..., the facts log (JSON pages and SSE) and the usage
// ledger routes for the billing host.
//
// # Who may call what
//
// Each route is one of three kinds:
//
//   - Admin routes (create, list, grants, facts, usage) take an admin
//     credential only (package auth: the operator, or an app-token with
//     admin scope whose walls reach the Computer's namespace).
//   - Operation routes map to exactly one action of the contract. They take
//     an admin credential or a grant token (`Authorization: Bearer bcg_…`,
//     package grant) whose action set holds that action, for this very
//     Computer, unexpired and unrevoked. Nothing in a request body counts
//     towards authority.
//   - GET /computers/{id} takes an admin credential or any valid grant of
//     that Computer: its state is what an agent needs to know to wait for
//     it, and says nothing the grant does not already imply.
//
// A grant that does not verify (malformed, forged, expired, revoked, not
// issued here) is a 401; a valid grant used for another Computer or an
// action outside its set is a 403, answered before the Computer is looked
// up, so a grant is no oracle for other Computers' existence. Each 401
// counts as a failed credential of the client's address in the brake the
// admin gate shares (Options.Brake): repeated bad grants are slowed, then
// answered 429 with Retry-After, as bad admin credentials are. The 403s
// do not count: the caller holds a real grant.
//
// # Egress
//
// With Options.Egress, every command the API starts (exec, bash,
// processStart, terminal) gets HTTP_PROXY, HTTPS_PROXY (and lower-case)
// pointing at berth's egress proxy with a credential naming the Computer
// and the grant used, so its traffic is checked against that grant's
// egress policy and recorded as egress facts with the grant's provenance
// (package egress). Work started with an admin credential carries no
// policy: its egress is refused, and recorded with the admin's
// provenance. These variables override the request's env; NO_PROXY is
// the request's when it sets one. The
// terminal websocket also accepts the grant in a `grant` query parameter,
// since browsers cannot set headers on a websocket.
//
// # Facts
//
// Every operation that changes files emits a files.written fact per file,
// and exec, bash and the terminal emit a process.exited fact when their
// command ends (requestId names the run), each stamped with the
// provenance of the grant used, or for admin callers {actor: "operator"},
// {actor: "token:<id>"} or {actor: "ungated"}. Background processes carry
// their starter's provenance in the agent's process tag
// (computer.ProcessTag); the manager records their exits, since nobody
// waits for them.
//
// # Paths
//
// File paths are relative to the Computer's workspace, or absolute with
// the workspace as "/". A path whose ".." would climb out is a 403, and
// one with a NUL byte a 400, before the Computer is touched; the agent
// refuses symlinks that lead out (403) on its side.
package computerapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/apitype/computertype"
	"github.com/berth-dev/berth/internal/agent"
	"github.com/berth-dev/berth/internal/auth"
	"github.com/berth-dev/berth/internal/computer"
	"github.com/berth-dev/berth/internal/grant"
	"github.com/berth-dev/berth/internal/web"
)

// Manager is what the handlers need of the Computer manager (package
// computer's *Manager).
type Manager interface {
	Create(ctx context.Context, r computer.CreateRequest) (computer.Computer, error)
	Get(ctx context.Context, id string) (computer.Computer, error)
	List(ctx context.Context, namespace string) ([]computer.Computer, error)
	Start(ctx context.Context, id string, wait bool) (computer.Computer, error)
	Stop(ctx context.Context, id string) error
	Delete(ctx context.Context, id string) error
	SetBackings(ctx context.Context, id string, b []computer.Backing) (computer.Computer, error)
	Use(ctx context.Context, id string) (*agent.Client, func(), error)
	Emit(ctx context.Context, f computer.Fact) error
	Facts(ctx context.Context, id string, after int64, limit int) ([]computer.FactRecord, error)
	WaitFacts(ctx context.Context, id string, after int64) <-chan struct{}
	PendingUsage(ctx context.Context) ([]computer.UsageInterval, error)
	Capacity(ctx context.Context) (computer.Capacity, error)
	AcknowledgeUsage(ctx context.Context, us []computer.UsageInterval) error
	ExposePort(ctx context.Context, id string, req computertype.PortRequest) (computer.Exposure, error)
	UnexposePort(ctx context.Context, id string, port int) error
	Ports(ctx context.Context, id string) ([]computer.Exposure, error)
}

// Grants is what the handlers need of the grant issuer (package grant's
// *Issuer).
type Grants interface {
	Issue(ctx context.Context, r grant.Request) (grant.Grant, string, error)
	Verify(token string) (grant.Grant, error)
	Revoke(ctx context.Context, computerID, id string) error
	RevokeComputer(ctx context.Context, computerID string) (int, error)
	List(computerID string) []grant.Status
}

// Options configure the API.
type Options struct {
	Manager Manager
	Grants  Grants
	// Gate authenticates admin callers; nil trusts every caller without a
	// credential, as an ungated loopback admin API does.
	Gate *auth.Gate
	Log  *slog.Logger
	// Now is the clock for grant expiry requests; default time.Now.
	Now func() time.Time
	// FactsKeepAlive is how often an idle facts stream gets a comment
	// line, so proxies do not close it; default 15s.
	FactsKeepAlive time.Duration
	// Brake counts grants that do not verify as failed credentials of
	// the client's address; pass the Gate's, so grant and admin failures
	// add up (berth serve does). Nil counts no grant failures.
	Brake *auth.Brake
	// Egress, when set, gives every command the API starts (exec, bash,
	// processStart, terminal) the proxy variables of the egress proxy
	// for the grant it runs under (see package egress).
	Egress Egress
	// Confinement bounds the backings a namespace-confined admin caller,
	// or any grant, may give a Computer: only those whose drivers the
	// operator allows the Computer's namespace.
	Confinement auth.Confinement
	// DefaultBackings are the manager's backings for a Computer given
	// none (computer.Options.DefaultBackings); default [{kind: process}].
	DefaultBackings []computer.Backing
	// SignIn checks that an exposed port's sign_in names an auth provider
	// of namespace ns that can sign a browser in; nil refuses every
	// sign_in (this server has no sign-in gates).
	SignIn func(ctx context.Context, ns, provider string) error
}

// API is the Computer API's http.Handler. It serves /computers and the
// paths below it.
type API struct {
	o      Options
	mux    *http.ServeMux
	routes map[string]grant.Action
}

// New returns the Computer API handler.
func New(o Options) *API {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Gate == nil {
		o.Gate = auth.New(auth.Config{Log: o.Log})
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.FactsKeepAlive <= 0 {
		o.FactsKeepAlive = 15 * time.Second
	}
	a := &API{o: o, mux: http.NewServeMux(), routes: map[string]grant.Action{}}

	// Admin routes.
	a.admin("POST /computers", auth.CRUD, auth.WallNarrow, a.create)
	a.admin("GET /computers", auth.View, auth.WallNarrow, a.list)
	a.admin("GET /computers/usage/pending", auth.View, auth.WallFleet, a.pendingUsage)
	a.admin("GET /computers/hosts/capacity", auth.View, auth.WallFleet, a.capacity)
	a.admin("POST /computers/usage/acknowledge", auth.CRUD, auth.WallFleet, a.acknowledgeUsage)
	a.adminComputer("POST /computers/{id}/grants", auth.CRUD, a.issueGrant)
	a.adminComputer("GET /computers/{id}/grants", auth.CRUD, a.listGrants)
	a.adminComputer("DELETE /computers/{id}/grants/{gid}", auth.CRUD, a.revokeGrant)
	a.adminComputer("GET /computers/{id}/facts", auth.View, a.facts)

	// Read by an admin or any grant of the Computer.
	a.op("GET /computers/{id}", "", a.get)

	// Operations, one action each.
	a.op("DELETE /computers/{id}", grant.Delete, a.delete)
	a.op("POST /computers/{id}/start", grant.Start, a.start)
	a.op("POST /computers/{id}/stop", grant.Stop, a.stop)
	a.op("GET /computers/{id}/backings", grant.Backing, a.getBackings)
	a.op("PUT /computers/{id}/backings", grant.Backing, a.putBackings)
	a.op("POST /computers/{id}/exec", grant.Exec, a.exec)
	a.op("POST /computers/{id}/bash", grant.Bash, a.bash)
	a.op("GET /computers/{id}/terminal", grant.Terminal, a.terminal)
	a.op("POST /computers/{id}/files/read", grant.FilesRead, a.readText)
	a.op("GET /computers/{id}/files/readBytes", grant.FilesReadBytes, a.readBytes)
	a.op("POST /computers/{id}/files/write", grant.FilesWrite, a.writeText)
	a.op("PUT /computers/{id}/files/writeBytes", grant.FilesWriteByte, a.writeBytes)
	a.op("POST /computers/{id}/files/list", grant.FilesList, a.listFiles)
	a.op("POST /computers/{id}/files/glob", grant.FilesGlob, a.glob)
	a.op("POST /computers/{id}/files/grep", grant.FilesGrep, a.grep)
	a.op("POST /computers/{id}/files/edit", grant.FilesEdit, a.edit)
	a.op("POST /computers/{id}/files/patch", grant.FilesPatch, a.patch)
	a.op("POST /computers/{id}/mkdir", grant.Mkdir, a.mkdir)
	a.op("POST /computers/{id}/processes", grant.ProcessStart, a.processStart)
	a.op("GET /computers/{id}/processes", grant.ProcessList, a.processList)
	a.op("GET /computers/{id}/processes/{pid}/output", grant.ProcessList, a.processOutput)
	a.op("DELETE /computers/{id}/processes/{pid}", grant.ProcessKill, a.processKill)
	a.op("POST /computers/{id}/ports", grant.ExposePort, a.exposePort)
	a.op("GET /computers/{id}/ports", grant.ListPorts, a.listPorts)
	a.op("DELETE /computers/{id}/ports/{port}", grant.UnexposePort, a.unexposePort)
	return a
}

// Routes lists the route patterns the API serves with the action each
// requires ("" for routes that take no grant action), for documentation
// and for tests that walk every route.
func (a *API) Routes() map[string]grant.Action { return maps.Clone(a.routes) }

func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	web.ServeMux(a.o.Log, a.mux, w, r)
}

// call is one authorized request on a Computer.
type call struct {
	id    string
	comp  computer.Computer
	prov  computer.Provenance
	p     *auth.Principal // the admin caller, nil under a grant
	grant *grant.Grant    // the grant used, nil for an admin caller
}

// opFunc handles an authorized operation.
type opFunc func(w http.ResponseWriter, r *http.Request, c *call) error

// admin registers a route that takes an admin credential and names no
// Computer.
func (a *API) admin(pattern string, tier auth.Tier, wall auth.Wall, fn web.HandlerFunc) {
	a.routes[pattern] = ""
	inner := web.Handle(a.o.Log, fn)
	a.mux.Handle(pattern, a.refuseGrant(a.o.Gate.Wrap(tier, wall, nil, inner)))
}

// adminComputer registers an admin route on Computer {id}.
func (a *API) adminComputer(pattern string, tier auth.Tier, fn opFunc) {
	a.routes[pattern] = ""
	inner := web.Handle(a.o.Log, func(w http.ResponseWriter, r *http.Request) error {
		c, err := a.adminCall(r, tier)
		if err != nil {
			return err
		}
		return fn(w, r, c)
	})
	a.mux.Handle(pattern, a.refuseGrant(a.o.Gate.Wrap(tier, auth.WallNarrow, nil, inner)))
}

// refuseGrant answers a grant token on an admin route with a 403: grants
// act on a Computer, they do not administer it.
func (a *API) refuseGrant(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if tok, ok := grantToken(r, false); ok {
			if _, err := a.o.Grants.Verify(tok); err != nil {
				if !a.blocked(w, r) {
					a.unauthorized(w, r, err)
				}
				return
			}
			web.WriteError(a.o.Log, w, r, web.Errorf(http.StatusForbidden, "%s %s needs an admin credential; a grant cannot use it", r.Method, r.URL.Path))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// op registers an operation route: action "" admits any grant of the
// Computer.
func (a *API) op(pattern string, action grant.Action, fn opFunc) {
	a.routes[pattern] = action
	tier := auth.CRUD
	if action == "" {
		tier = auth.View
	}
	wall := auth.WallNarrow
	allowQuery := action == grant.Terminal
	if allowQuery {
		wall |= auth.AllowQueryToken
	}
	admin := a.o.Gate.Wrap(tier, wall, nil, web.Handle(a.o.Log, func(w http.ResponseWriter, r *http.Request) error {
		c, err := a.adminCall(r, tier)
		if err != nil {
			return err
		}
		return fn(w, r, c)
	}))
	a.mux.Handle(pattern, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, ok := grantToken(r, allowQuery)
		if !ok {
			admin.ServeHTTP(w, r)
			return
		}
		// A valid grant always works, even from a locked-out address (a
		// correct credential is never refused); only failures meet the
		// brake. Verifying first is one MAC, and a grant's 256 bits
		// cannot be guessed, so answering a right one tells nothing.
		g, err := a.o.Grants.Verify(tok)
		if err != nil {
			if !a.blocked(w, r) {
				a.unauthorized(w, r, err)
			}
			return
		}
		id := r.PathValue("id")
		if g.ComputerID != id {
			web.WriteError(a.o.Log, w, r, web.Errorf(http.StatusForbidden, "this grant is not valid for Computer %q", id))
			return
		}
		if action != "" && !g.Allows(action) {
			web.WriteError(a.o.Log, w, r, web.Errorf(http.StatusForbidden, "this grant does not include the %q action", action))
			return
		}
		web.Handle(a.o.Log, func(w http.ResponseWriter, r *http.Request) error {
			comp, err := a.o.Manager.Get(r.Context(), id)
			if err != nil {
				return managerError(err, id)
			}
			if g.IssuedAt < comp.CreatedAt.UnixMilli() {
				// The grant was issued for an earlier Computer of the same
				// id (deleting a Computer revokes its grants; this catches
				// a Computer created behind berth's back).
				a.fail(r)
				return &web.Error{Status: http.StatusUnauthorized, Message: "this grant predates the Computer it names", Header: bearerChallenge()}
			}
			prov := computer.Provenance{Actor: g.Provenance.Actor, Via: g.Provenance.Via}
			return fn(w, r, &call{id: id, comp: comp, prov: prov, grant: &g})
		}).ServeHTTP(w, r)
	}))
}

// adminCall resolves the Computer of an admin request and checks that the
// caller's walls reach its namespace: view routes need the namespace in
// reach, the rest need to administer it. A caller confined elsewhere gets
// the same 403 whether or not the Computer exists.
func (a *API) adminCall(r *http.Request, tier auth.Tier) (*call, error) {
	p := auth.FromContext(r.Context())
	id := r.PathValue("id")
	comp, err := a.o.Manager.Get(r.Context(), id)
	if err != nil {
		if errors.Is(err, computer.ErrNotFound) && !p.Fleet() {
			return nil, web.Errorf(http.StatusForbidden, "this credential does not reach Computer %q", id)
		}
		return nil, managerError(err, id)
	}
	ok := p.Administers(comp.Namespace)
	if tier == auth.View {
		ok = p.Reaches(comp.Namespace)
	}
	if !ok {
		return nil, web.Errorf(http.StatusForbidden, "this credential does not reach Computer %q", id)
	}
	return &call{id: id, comp: comp, prov: adminProvenance(p), p: p}, nil
}

// adminProvenance is the provenance stamped on facts of an admin caller.
func adminProvenance(p *auth.Principal) computer.Provenance {
	switch p.Kind {
	case auth.Operator:
		return computer.Provenance{Actor: "operator"}
	case auth.AppToken:
		return computer.Provenance{Actor: "token:" + p.Token.ID}
	}
	return computer.Provenance{Actor: string(p.Kind)}
}

// grantToken returns the grant token of r: the bearer credential when it
// is one, else (allowQuery) the `grant` query parameter.
func grantToken(r *http.Request, allowQuery bool) (string, bool) {
	h := r.Header.Get("Authorization")
	if scheme, rest, ok := strings.Cut(h, " "); ok && strings.EqualFold(scheme, "Bearer") {
		rest = strings.TrimSpace(rest)
		return rest, strings.HasPrefix(rest, grant.Prefix)
	}
	if h == "" && allowQuery {
		if t := r.URL.Query().Get("grant"); t != "" {
			return t, true
		}
	}
	return "", false
}

func bearerChallenge() http.Header {
	return http.Header{"Www-Authenticate": {`Bearer error="invalid_token"`}, "Cache-Control": {"no-store"}}
}

// unauthorized answers a grant that does not verify. The reason is logged
// and, since it is about the caller's own token, said.
func (a *API) unauthorized(w http.ResponseWriter, r *http.Request, err error) {
	a.o.Log.Info("grant refused", "method", r.Method, "path", r.URL.Path, "reason", err)
	a.fail(r)
	msg := "the grant is not valid"
	switch {
	case errors.Is(err, grant.ErrExpired):
		msg = "the grant has expired"
	case errors.Is(err, grant.ErrRevoked):
		msg = "the grant has been revoked"
	case errors.Is(err, grant.ErrMalformed):
		msg = "the grant token is malformed"
	}
	web.WriteError(a.o.Log, w, r, &web.Error{Status: http.StatusUnauthorized, Message: msg, Header: bearerChallenge()})
}

// managerError maps the manager's errors onto the envelope.
func managerError(err error, id string) error {
	var ce *computer.CapacityError
	var we *web.Error
	switch {
	case errors.As(err, &we):
		return we
	case errors.As(err, &ce):
		secs := int64((ce.RetryAfter + time.Second - 1) / time.Second)
		if secs < 1 {
			secs = 1
		}
		return &web.Error{
			Status:  http.StatusTooManyRequests,
			Message: fmt.Sprintf("no capacity to run Computer %q now (limit %d); retry in %d seconds, or start it with wait=true to queue", id, ce.Limit, secs),
			Header:  http.Header{"Retry-After": {strconv.FormatInt(secs, 10)}},
		}
	case errors.Is(err, computer.ErrNotFound):
		return web.Errorf(http.StatusNotFound, "no Computer %q", id)
	case errors.Is(err, computer.ErrExists):
		return web.Errorf(http.StatusConflict, "Computer %q already exists", id)
	case errors.Is(err, computer.ErrInvalid):
		return web.Errorf(http.StatusBadRequest, "%s", strings.TrimPrefix(err.Error(), "computer: "))
	case errors.Is(err, computer.ErrFleetUnavailable):
		return &web.Error{Status: http.StatusServiceUnavailable, Message: strings.TrimPrefix(err.Error(), "computer: "), Err: err, Header: http.Header{"Retry-After": {"5"}}}
	case errors.Is(err, computer.ErrUnavailable):
		return &web.Error{Status: http.StatusServiceUnavailable, Message: "the Computer store is unavailable", Err: err, Header: http.Header{"Retry-After": {"5"}}}
	}
	return &web.Error{Status: http.StatusInternalServerError, Message: fmt.Sprintf("Computer %q: the operation failed", id), Err: err}
}

// agentError maps an error of the Computer's agent onto the envelope,
// keeping the agent's client errors (bad path, conflict, precondition)
// and calling the rest a bad gateway.
func agentError(err error, id string) error {
	var ae *agent.Error
	if errors.As(err, &ae) {
		switch ae.Status {
		case http.StatusBadRequest, http.StatusForbidden, http.StatusNotFound, http.StatusConflict,
			http.StatusPreconditionFailed, http.StatusRequestEntityTooLarge, http.StatusUnsupportedMediaType, http.StatusUnprocessableEntity:
			return web.Errorf(ae.Status, "%s", ae.Message)
		}
		return &web.Error{Status: http.StatusBadGateway, Message: fmt.Sprintf("Computer %q: %s", id, ae.Message), Err: err}
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return &web.Error{Status: http.StatusGatewayTimeout, Message: fmt.Sprintf("Computer %q did not answer in time", id), Err: err}
	}
	return &web.Error{Status: http.StatusBadGateway, Message: fmt.Sprintf("could not reach Computer %q", id), Err: err}
}

// use wakes the Computer and returns its agent for one operation.
func (a *API) use(r *http.Request, c *call) (*agent.Client, func(), error) {
	ag, release, err := a.o.Manager.Use(r.Context(), c.id)
	if err != nil {
		return nil, nil, managerError(err, c.id)
	}
	return ag, release, nil
}

// onAgent runs do on the Computer's agent (see use), held only for the
// call, and answers the agent's error as the API's (see agentError).
func onAgent[T any](a *API, r *http.Request, c *call, do func(context.Context, *agent.Client) (T, error)) (T, error) {
	ag, release, err := a.use(r, c)
	if err != nil {
		var zero T
		return zero, err
	}
	defer release()
	v, err := do(r.Context(), ag)
	if err != nil {
		return v, agentError(err, c.id)
	}
	return v, nil
}

// readJSON reads a request body into v (a pointer) as web.ReadJSON does,
// and refuses a key v does not declare (400 `<path>: unknown field`): the
// Computer API's bodies are closed, so a key berth does not act on — a
// typo, or a field of a newer contract — is refused rather than dropped.
func readJSON(w http.ResponseWriter, r *http.Request, v any) error {
	return web.ReadClosedJSON(w, r, v, apitype.UnknownKey)
}

// decodeJSON is readJSON's decoding: web.DecodeJSON, refusing undeclared keys.
func decodeJSON(raw []byte, v any) error { return web.DecodeClosedJSON(raw, v, apitype.UnknownKey) }
