package admin

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/auth"
	"github.com/berth-dev/berth/internal/namespaces"
	"github.com/berth-dev/berth/internal/registry"
	"github.com/berth-dev/berth/internal/secrets"
	"github.com/berth-dev/berth/internal/web"
)

// Route tiers and walls, as admin.New registers them (app-lb.md §2.1; see
// package auth). Every route goes through a.handle, so a deployment route
// registered with wallDeployment cannot forget its wall.
const (
	tierOpen = auth.Open          // no credential: /healthz
	tierAny  = auth.AnyCredential // any valid credential: /whoami
	tierView = auth.View          // admin scope view or admin
	tierCRUD = auth.CRUD          // admin scope admin

	wallNone       = auth.NoWall
	wallDeployment = auth.WallDeployment // {id} must be a deployment the caller touches
	wallNarrow     = auth.WallNarrow     // the handler narrows to what the caller sees
	wallFleet      = auth.WallFleet      // fleet-wide callers only
	queryToken     = auth.AllowQueryToken
)

// handle registers fn for pattern behind the gate with the given tier and
// wall.
func (a *API) handle(pattern string, tier auth.Tier, wall auth.Wall, fn web.HandlerFunc) {
	a.handleHTTP(pattern, tier, wall, web.Handle(a.o.Log, fn))
}

// handleHTTP is handle for a plain http.Handler.
func (a *API) handleHTTP(pattern string, tier auth.Tier, wall auth.Wall, h http.Handler) {
	a.mux.Handle(pattern, a.gate().Wrap(tier, wall, a, h))
}

// gate returns the configured gate, or an ungated one: with no gate
// configured (tests, embedding) every credential-less caller is trusted.
func (a *API) gate() *auth.Gate {
	if a.o.Gate == nil {
		a.o.Gate = auth.New(auth.Config{Tokens: a.o.Tokens, Log: a.o.Log})
	}
	return a.o.Gate
}

// Locate implements auth.Locator for the deployment wall.
func (a *API) Locate(id string) (string, bool) {
	e, ok := a.o.Registry.Get(id)
	if !ok {
		return "", false
	}
	return namespace(e), true
}

func caller(r *http.Request) *auth.Principal { return auth.FromContext(r.Context()) }

// mayWrite checks a deployment write by the caller: it must touch the
// deployment as written (id, namespace) and, when the id is taken, the
// deployment it would replace, so no one can overwrite or move a
// deployment behind another wall.
func (a *API) mayWrite(p *auth.Principal, s *apitype.DeploymentSpec) error {
	if p.Confined() && s.Namespace == "" {
		// A namespace credential writes into its namespace by default.
		s.Namespace = p.Token.Namespace
	}
	ns := s.Namespace
	if ns == "" {
		ns = "default"
	}
	if !p.Touches(s.ID, ns) {
		return web.Errorf(http.StatusForbidden, "this token is not scoped to deployment %q", s.ID)
	}
	if e, ok := a.o.Registry.Get(s.ID); ok && !p.Touches(e.Spec.ID, namespace(e)) {
		return web.Errorf(http.StatusForbidden, "this token is not scoped to deployment %q", s.ID)
	}
	return nil
}

// writeOptions qualifies a deployment write by p: a writer that does not
// cover the whole fleet is held to its namespace (registry.PutOptions).
func writeOptions(p *auth.Principal) registry.PutOptions {
	return registry.PutOptions{Restricted: !p.Fleet(), Visible: p.Touches}
}

func (a *API) whoami(w http.ResponseWriter, r *http.Request) error {
	web.WriteJSON(w, http.StatusOK, auth.WhoAmI(caller(r), time.Now()))
	return nil
}

// specs returns every deployment spec, for reference checks.
func (a *API) specs() []apitype.DeploymentSpec {
	es := a.o.Registry.List()
	out := make([]apitype.DeploymentSpec, len(es))
	for i, e := range es {
		out[i] = e.Spec
	}
	return out
}

// defaultNamespace is the namespace a request means when it names none: a
// confined caller's own, otherwise "default".
func defaultNamespace(p *auth.Principal, ns string) string {
	if ns != "" {
		return ns
	}
	if p.Confined() {
		return p.Token.Namespace
	}
	return "default"
}

func unavailable(what string) error {
	return web.Errorf(http.StatusServiceUnavailable, "%s are not enabled on this server", what)
}

// ---- tokens ----

func (a *API) mintToken(w http.ResponseWriter, r *http.Request) error {
	if a.o.Tokens == nil {
		return unavailable("app-tokens")
	}
	var req apitype.NewToken
	if err := web.ReadJSON(w, r, &req); err != nil {
		return err
	}
	t, err := a.o.Tokens.Mint(r.Context(), caller(r), req)
	if err != nil {
		return err
	}
	w.Header().Set("Cache-Control", "no-store") // the secret is in this body
	web.WriteJSON(w, http.StatusCreated, t)
	return nil
}

func (a *API) listTokens(w http.ResponseWriter, r *http.Request) error {
	if a.o.Tokens == nil {
		return unavailable("app-tokens")
	}
	ts, err := a.o.Tokens.List(r.Context(), caller(r))
	if err != nil {
		return err
	}
	web.WriteJSON(w, http.StatusOK, ts)
	return nil
}

func (a *API) getToken(w http.ResponseWriter, r *http.Request) error {
	if a.o.Tokens == nil {
		return unavailable("app-tokens")
	}
	t, err := a.o.Tokens.Get(r.Context(), caller(r), r.PathValue("id"))
	if err != nil {
		return err
	}
	web.WriteJSON(w, http.StatusOK, t)
	return nil
}

// tokenProvenance is GET /tokens/{id}/provenance, berth's own: who
// minted the token, for the callers who may see the token.
func (a *API) tokenProvenance(w http.ResponseWriter, r *http.Request) error {
	if a.o.Tokens == nil {
		return unavailable("app-tokens")
	}
	t, err := a.o.Tokens.Get(r.Context(), caller(r), r.PathValue("id"))
	if err != nil {
		return err
	}
	web.WriteJSON(w, http.StatusOK, t.Provenance())
	return nil
}

func (a *API) patchToken(w http.ResponseWriter, r *http.Request) error {
	if a.o.Tokens == nil {
		return unavailable("app-tokens")
	}
	var p apitype.TokenPatch
	if err := web.ReadJSON(w, r, &p); err != nil {
		return err
	}
	t, err := a.o.Tokens.Patch(r.Context(), caller(r), r.PathValue("id"), p)
	if err != nil {
		return err
	}
	web.WriteJSON(w, http.StatusOK, t)
	return nil
}

func (a *API) revokeToken(w http.ResponseWriter, r *http.Request) error {
	if a.o.Tokens == nil {
		return unavailable("app-tokens")
	}
	if err := a.o.Tokens.Revoke(r.Context(), caller(r), r.PathValue("id")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// ---- secrets ----

// secretWall checks that p may see (and, with write, change) the secrets of
// ns, before anything is looked up, so a refusal says nothing about whether
// a secret exists.
func secretWall(p *auth.Principal, ns string, write bool) error {
	if !p.Reaches(ns) {
		return web.Errorf(http.StatusForbidden, "this credential cannot reach the %q namespace's secrets", ns)
	}
	if write && !p.Administers(ns) {
		return web.Errorf(http.StatusForbidden, "this credential may only view the %q namespace's secrets", ns)
	}
	return nil
}

func secretError(err error, id string) error {
	var fe *secrets.FieldError
	switch {
	case errors.As(err, &fe):
		return web.Invalid(fe.Field, "%s", fe.Msg)
	case errors.Is(err, secrets.ErrNotFound):
		return web.Errorf(http.StatusNotFound, "no secret %q", id)
	default:
		return &web.Error{Status: http.StatusInternalServerError, Message: "the secret was not saved", Err: err}
	}
}

func (a *API) postSecret(w http.ResponseWriter, r *http.Request) error {
	var s apitype.SecretSpec
	if err := web.ReadJSON(w, r, &s); err != nil {
		return err
	}
	return a.putSecretSpec(w, r, s)
}

// putSecret is PUT /secrets/{id}: the path id and the query namespace win
// over the body's.
func (a *API) putSecret(w http.ResponseWriter, r *http.Request) error {
	var s apitype.SecretSpec
	if err := web.ReadJSON(w, r, &s); err != nil {
		return err
	}
	s.ID = r.PathValue("id")
	if ns := r.URL.Query().Get("namespace"); ns != "" {
		s.Namespace = ns
	}
	return a.putSecretSpec(w, r, s)
}

func (a *API) putSecretSpec(w http.ResponseWriter, r *http.Request, s apitype.SecretSpec) error {
	if a.o.Secrets == nil {
		return unavailable("secrets")
	}
	p := caller(r)
	s.Namespace = defaultNamespace(p, s.Namespace)
	if err := secretWall(p, s.Namespace, true); err != nil {
		return err
	}
	sum, created, err := a.o.Secrets.Put(r.Context(), s)
	if err != nil {
		return secretError(err, s.ID)
	}
	code := http.StatusOK
	if created {
		code = http.StatusCreated
	}
	web.WriteJSON(w, code, sum)
	return nil
}

func (a *API) listSecrets(w http.ResponseWriter, r *http.Request) error {
	if a.o.Secrets == nil {
		return unavailable("secrets")
	}
	p, ns := caller(r), r.URL.Query().Get("namespace")
	if ns != "" {
		if err := secretWall(p, ns, false); err != nil {
			return err
		}
	}
	all, err := a.o.Secrets.List(r.Context())
	if err != nil {
		return secretError(err, "")
	}
	out := []apitype.SecretSummary{}
	for _, s := range all {
		if p.Reaches(s.Namespace) && (ns == "" || s.Namespace == ns) {
			out = append(out, s)
		}
	}
	web.WriteJSON(w, http.StatusOK, out)
	return nil
}

// secretTarget is the secret a request names: /secrets/{id} in
// ?namespace= (see defaultNamespace), once the caller passes the secret
// wall for reading, or with write for changing it.
func (a *API) secretTarget(r *http.Request, write bool) (ns, id string, err error) {
	if a.o.Secrets == nil {
		return "", "", unavailable("secrets")
	}
	p := caller(r)
	ns = defaultNamespace(p, r.URL.Query().Get("namespace"))
	if err := secretWall(p, ns, write); err != nil {
		return "", "", err
	}
	return ns, r.PathValue("id"), nil
}

func (a *API) getSecret(w http.ResponseWriter, r *http.Request) error {
	ns, id, err := a.secretTarget(r, false)
	if err != nil {
		return err
	}
	s, err := a.o.Secrets.Get(r.Context(), ns, id)
	if err != nil {
		return secretError(err, id)
	}
	web.WriteJSON(w, http.StatusOK, s)
	return nil
}

func (a *API) patchSecret(w http.ResponseWriter, r *http.Request) error {
	ns, id, err := a.secretTarget(r, true)
	if err != nil {
		return err
	}
	var patch apitype.SecretPatch
	if err := web.ReadJSON(w, r, &patch); err != nil {
		return err
	}
	s, err := a.o.Secrets.Patch(r.Context(), ns, id, patch)
	if err != nil {
		return secretError(err, id)
	}
	web.WriteJSON(w, http.StatusOK, s)
	return nil
}

func (a *API) deleteSecret(w http.ResponseWriter, r *http.Request) error {
	ns, id, err := a.secretTarget(r, true)
	if err != nil {
		return err
	}
	force, err := web.BoolParam(r, "force")
	if err != nil {
		return err
	}
	if _, err := a.o.Secrets.Get(r.Context(), ns, id); err != nil {
		return secretError(err, id)
	}
	if !force {
		var users []string
		for _, d := range secrets.ReferencedBy(a.specs(), ns, id) {
			users = append(users, "deployment "+d)
		}
		users = append(users, a.providersUsing(r.Context(), ns, id)...)
		if len(users) > 0 {
			return web.Errorf(http.StatusConflict, "secret %q is referenced by %s; pass force=true to delete it anyway", id, strings.Join(users, ", "))
		}
	}
	if err := a.o.Secrets.Delete(r.Context(), ns, id); err != nil {
		return secretError(err, id)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// providersUsing names the auth providers of ns whose client_secret or JWT
// secret is secret id.
func (a *API) providersUsing(ctx context.Context, ns, id string) []string {
	if a.o.Namespaces == nil {
		return nil
	}
	ps, err := a.o.Namespaces.Providers(ctx)
	if err != nil {
		return nil
	}
	var out []string
	for _, pv := range ps {
		if pv.Namespace != ns {
			continue
		}
		refs := []*apitype.SecretRef{pv.ClientSecret}
		if pv.JWT != nil {
			refs = append(refs, pv.JWT.Secret)
		}
		for _, ref := range refs {
			if ref != nil && ref.Secret == id {
				out = append(out, "auth provider "+pv.Name)
				break
			}
		}
	}
	return out
}

// ---- namespaces ----

func (a *API) listNamespaces(w http.ResponseWriter, r *http.Request) error {
	p := caller(r)
	type acc struct {
		visible, total int
		declared       *namespaces.Namespace
	}
	all := map[string]*acc{}
	get := func(ns string) *acc {
		if all[ns] == nil {
			all[ns] = &acc{}
		}
		return all[ns]
	}
	if p.Confined() {
		get(p.Token.Namespace) // its own namespace, even before anything lives there
	}
	for _, e := range a.o.Registry.List() {
		ns := namespace(e)
		x := get(ns)
		x.total++
		if p.Touches(e.Spec.ID, ns) {
			x.visible++
		}
	}
	if a.o.Namespaces != nil {
		decl, err := a.o.Namespaces.List(r.Context())
		if err != nil {
			return &web.Error{Status: http.StatusInternalServerError, Message: "could not read the namespaces", Err: err}
		}
		for i := range decl {
			get(decl[i].Name).declared = &decl[i]
		}
	}
	out := []apitype.NamespaceEntry{}
	for _, ns := range slices.Sorted(maps.Keys(all)) {
		x := all[ns]
		if !p.Reaches(ns) && x.visible == 0 {
			continue
		}
		ent := apitype.NamespaceEntry{Namespace: ns, Deployments: x.visible, Declared: x.declared != nil}
		if d := x.declared; d != nil {
			ent.Description = d.Description
			at := d.CreatedAt.Unix()
			ent.CreatedAt = &at
			withDomains(&ent, d.Domains)
		}
		out = append(out, ent)
	}
	web.WriteJSON(w, http.StatusOK, out)
	return nil
}

func namespaceError(err error) error {
	var fe *namespaces.FieldError
	switch {
	case errors.As(err, &fe):
		return web.Invalid(fe.Field, "%s", fe.Msg)
	case errors.Is(err, namespaces.ErrNotFound):
		return web.Errorf(http.StatusNotFound, "%s", strings.TrimPrefix(err.Error(), namespaces.ErrNotFound.Error()+": "))
	case errors.Is(err, namespaces.ErrConflict):
		return web.Errorf(http.StatusConflict, "%s", strings.TrimPrefix(err.Error(), namespaces.ErrConflict.Error()+": "))
	default:
		return &web.Error{Status: http.StatusInternalServerError, Message: "the change was not saved", Err: err}
	}
}

func (a *API) declareNamespace(w http.ResponseWriter, r *http.Request) error {
	if a.o.Namespaces == nil {
		return unavailable("namespaces")
	}
	var req apitype.NamespaceSpec
	if err := web.ReadJSON(w, r, &req); err != nil {
		return err
	}
	n, created, err := a.o.Namespaces.Declare(r.Context(), req)
	if err != nil {
		return namespaceError(err)
	}
	if a.o.Plugins != nil {
		// A namespace gets the enabled per-namespace plugins (app-lb).
		if err := a.o.Plugins.NamespaceKnown(r.Context(), n.Name); err != nil {
			return &web.Error{Status: http.StatusInternalServerError, Message: "the namespace was declared, but its plugins were not installed", Err: err}
		}
	}
	count := 0
	for _, e := range a.o.Registry.List() {
		if namespace(e) == n.Name {
			count++
		}
	}
	at := n.CreatedAt.Unix()
	code := http.StatusOK
	if created {
		code = http.StatusCreated
	}
	ent := apitype.NamespaceEntry{Namespace: n.Name, Deployments: count, Declared: true, Description: n.Description, CreatedAt: &at}
	withDomains(&ent, n.Domains)
	web.WriteJSON(w, code, ent)
	return nil
}

// withDomains puts a declared namespace's domains on its entry, as the
// extra key "domains" (the contract's NamespaceEntry takes extra keys).
func withDomains(ent *apitype.NamespaceEntry, domains []string) {
	if domains == nil {
		domains = []string{}
	}
	raw, _ := json.Marshal(domains)
	ent.Extra = map[string]json.RawMessage{"domains": raw}
}

func (a *API) deleteNamespace(w http.ResponseWriter, r *http.Request) error {
	if a.o.Namespaces == nil {
		return unavailable("namespaces")
	}
	name := r.PathValue("name")
	var inside []string
	for _, e := range a.o.Registry.List() {
		if namespace(e) == name {
			inside = append(inside, e.Spec.ID)
		}
	}
	if len(inside) > 0 {
		return web.Errorf(http.StatusConflict, "namespace %q still holds deployments %s; delete them first", name, strings.Join(inside, ", "))
	}
	if err := a.o.Namespaces.Remove(r.Context(), name); err != nil {
		return namespaceError(err)
	}
	if a.o.Plugins != nil {
		if err := a.o.Plugins.NamespaceRemoved(r.Context(), name); err != nil {
			return &web.Error{Status: http.StatusInternalServerError, Message: "the namespace was removed, but its plugin installs were not", Err: err}
		}
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// ---- auth providers ----

func (a *API) listProviders(w http.ResponseWriter, r *http.Request) error {
	if a.o.Namespaces == nil {
		return unavailable("auth providers")
	}
	p, ns := caller(r), r.URL.Query().Get("namespace")
	ps, err := a.o.Namespaces.Providers(r.Context())
	if err != nil {
		return namespaceError(err)
	}
	out := []apitype.AuthProviderView{}
	for _, v := range ps {
		if p.Reaches(v.Namespace) && (ns == "" || v.Namespace == ns) {
			out = append(out, v)
		}
	}
	web.WriteJSON(w, http.StatusOK, out)
	return nil
}

func providerWall(p *auth.Principal, ns string, write bool) error {
	if !p.Reaches(ns) || write && !p.Administers(ns) {
		return web.Errorf(http.StatusForbidden, "this credential does not administer namespace %q", ns)
	}
	return nil
}

func (a *API) putProvider(w http.ResponseWriter, r *http.Request) error {
	if a.o.Namespaces == nil {
		return unavailable("auth providers")
	}
	var v apitype.AuthProviderView
	if err := web.ReadJSON(w, r, &v); err != nil {
		return err
	}
	p := caller(r)
	v.Namespace = defaultNamespace(p, v.Namespace)
	if err := providerWall(p, v.Namespace, true); err != nil {
		return err
	}
	out, created, err := a.o.Namespaces.PutProvider(r.Context(), v)
	if err != nil {
		return namespaceError(err)
	}
	code := http.StatusOK
	if created {
		code = http.StatusCreated
	}
	web.WriteJSON(w, code, out)
	return nil
}

func (a *API) getProvider(w http.ResponseWriter, r *http.Request) error {
	if a.o.Namespaces == nil {
		return unavailable("auth providers")
	}
	ns, name := r.PathValue("namespace"), r.PathValue("name")
	if err := providerWall(caller(r), ns, false); err != nil {
		return err
	}
	v, err := a.o.Namespaces.Provider(r.Context(), ns, name)
	if err != nil {
		return namespaceError(err)
	}
	web.WriteJSON(w, http.StatusOK, v)
	return nil
}

func (a *API) deleteProvider(w http.ResponseWriter, r *http.Request) error {
	if a.o.Namespaces == nil {
		return unavailable("auth providers")
	}
	ns, name := r.PathValue("namespace"), r.PathValue("name")
	if err := providerWall(caller(r), ns, true); err != nil {
		return err
	}
	if _, err := a.o.Namespaces.Provider(r.Context(), ns, name); err != nil {
		return namespaceError(err)
	}
	if users := namespaces.ProviderUsers(a.specs(), ns, name); len(users) > 0 {
		return web.Errorf(http.StatusConflict, "auth provider %q is inherited by deployments %s; point their gates elsewhere first", name, strings.Join(users, ", "))
	}
	if a.o.PortSignIns != nil {
		ports, err := a.o.PortSignIns(r.Context(), ns, name)
		if err != nil {
			return &web.Error{Status: http.StatusInternalServerError, Message: "the Computers' ports could not be read", Err: err}
		}
		if len(ports) > 0 {
			return web.Errorf(http.StatusConflict, "auth provider %q signs browsers in to the Computer ports %s; expose them without sign_in first", name, strings.Join(ports, ", "))
		}
	}
	if err := a.o.Namespaces.DeleteProvider(r.Context(), ns, name); err != nil {
		return namespaceError(err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// visible reports whether the caller of r may see deployment e; list routes
// and /metrics narrow with it.
func visible(p *auth.Principal, e *registry.Entry) bool { return p.Touches(e.Spec.ID, namespace(e)) }
