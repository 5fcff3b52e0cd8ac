package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/auth"
)

// renewer answers as the composition root's adapter of fleetca does: its
// err for every call, counting them.
type renewer struct {
	err   error
	calls int
}

func (f *renewer) Renew(_ context.Context, req apitype.FleetRenewRequest) (apitype.FleetCertificate, error) {
	f.calls++
	if f.err != nil {
		return apitype.FleetCertificate{}, f.err
	}
	return apitype.FleetCertificate{HostID: "beta", Certificate: "PEM of " + req.CSR}, nil
}

// TestFleetRenewRoute: POST /fleet/renew takes no credential (the body's
// proof is one); a berth without the fleet CA answers 409, a body missing
// a field 400 without asking the signer, a refused proof 403 renew_refused
// with its reason, a malformed one 400, and a good one the certificate.
func TestFleetRenewRoute(t *testing.T) {
	r := newRig(t, auth.Confinement{})
	body := `{"chain":"c","csr":"r","timestamp":1796500000,"signature":"s"}`
	want(t, r.do("POST", "/fleet/renew", "", body), http.StatusConflict, "holds no fleet CA")

	f := &renewer{}
	r.api = New(Options{Registry: r.reg, Fleet: r.fleet, FleetRenew: f, Gate: auth.New(auth.Config{Password: "pw"})})
	for _, b := range []string{`{"csr":"r","timestamp":1,"signature":"s"}`, `{"chain":"c","timestamp":1,"signature":"s"}`, `{"chain":"c","csr":"r","signature":"s"}`, `{"chain":"c","csr":"r","timestamp":1}`} {
		want(t, r.do("POST", "/fleet/renew", "", b), http.StatusBadRequest, "chain, csr, timestamp and signature are required")
	}
	if f.calls != 0 {
		t.Fatalf("the signer was asked %d times for incomplete bodies", f.calls)
	}
	f.err = fmt.Errorf("%w: timestamp: too old", ErrRenewRefused)
	w := r.do("POST", "/fleet/renew", "", body)
	want(t, w, http.StatusForbidden, "too old")
	if e := decode[map[string]any](t, w); e["code"] != "renew_refused" {
		t.Fatalf("refusal code: %v", e)
	}
	f.err = fmt.Errorf("%w: csr: not PEM", ErrJoinBadRequest)
	want(t, r.do("POST", "/fleet/renew", "", body), http.StatusBadRequest, "not PEM")
	f.err = errors.New("disk on fire")
	want(t, r.do("POST", "/fleet/renew", "", body), http.StatusInternalServerError, "could not be signed")
	f.err = nil
	w = r.do("POST", "/fleet/renew", "", body)
	want(t, w, http.StatusOK)
	if got := decode[apitype.FleetCertificate](t, w); got.HostID != "beta" || got.Certificate != "PEM of r" {
		t.Fatalf("answer: %+v", got)
	}
}
