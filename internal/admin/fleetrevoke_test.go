package admin

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/auth"
)

type fakeRevoker struct{ calls []string }

func (f *fakeRevoker) Revoke(_ context.Context, id, reason string) (apitype.FleetRevocation, error) {
	f.calls = append(f.calls, id+":"+reason)
	switch id {
	case "nosuch":
		return apitype.FleetRevocation{}, fmt.Errorf("%w: host %q", ErrNoFleetHost, id)
	case "alpha":
		return apitype.FleetRevocation{}, fmt.Errorf("%w: host alpha holds the CA", ErrRevokeRefused)
	}
	return apitype.FleetRevocation{Host: id, Serials: []string{"12"}, Newly: 1, Published: true}, nil
}

// TestFleetRevokeRoute: off the CA host the route answers 409; a
// namespace-confined token gets the fleet-wide 403 and a view token 403,
// neither reaching the revoker; an admin revokes (its reason passed on),
// an unknown host is a 404 naming it, a refusal a 400; no credential, 401.
func TestFleetRevokeRoute(t *testing.T) {
	r := newRig(t, auth.Confinement{})
	want(t, r.do("POST", "/fleet/hosts/beta/revoke", operator, ""), http.StatusConflict, "no fleet CA")
	fr := &fakeRevoker{}
	r.api.o.FleetRevoke = fr
	team := r.mint(`{"name": "team-a", "admin": "admin", "namespace": "team-a", "deployments": []}`)
	want(t, r.do("POST", "/fleet/hosts/beta/revoke", team, ""), http.StatusForbidden, "fleet-wide")
	view := r.mint(`{"name": "viewer", "admin": "view", "deployments": ["*"]}`)
	want(t, r.do("POST", "/fleet/hosts/beta/revoke", view, ""), http.StatusForbidden)
	if w := r.do("POST", "/fleet/hosts/beta/revoke", "", ""); w.Code != http.StatusUnauthorized {
		t.Errorf("without a credential: %d %s", w.Code, w.Body)
	}
	if len(fr.calls) != 0 {
		t.Fatalf("refused callers reached the revoker: %v", fr.calls)
	}
	w := r.do("POST", "/fleet/hosts/beta/revoke", operator, `{"reason": "stolen"}`)
	want(t, w, http.StatusOK)
	if got := decode[apitype.FleetRevocation](t, w); got.Host != "beta" || got.Newly != 1 || len(got.Serials) != 1 {
		t.Errorf("revoked: %+v", got)
	}
	if len(fr.calls) != 1 || fr.calls[0] != "beta:stolen" {
		t.Errorf("revoker calls %v", fr.calls)
	}
	want(t, r.do("POST", "/fleet/hosts/nosuch/revoke", operator, ""), http.StatusNotFound, `"nosuch"`)
	want(t, r.do("POST", "/fleet/hosts/alpha/revoke", operator, ""), http.StatusBadRequest, "holds the CA")
}
