package admin

import (
	"net/http"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/web"
)

// CertSource is the HTTPS edge's certificate manager as the admin API sees
// it (package certs, through the server).
type CertSource interface {
	// Certs are the certificates held, sorted by host.
	Certs() []apitype.CertStatus
	// Pending are the routed hosts without a certificate, and why.
	Pending() []apitype.CertPending
}

// certs answers `GET /certs`: the certificates held; none when berth serves
// no HTTPS.
func (a *API) certs(w http.ResponseWriter, r *http.Request) error {
	out := []apitype.CertStatus{}
	if a.o.Certs != nil {
		out = append(out, a.o.Certs.Certs()...)
	}
	web.WriteJSON(w, http.StatusOK, out)
	return nil
}

// pendingCerts answers berth's own `GET /certs/pending`.
func (a *API) pendingCerts(w http.ResponseWriter, r *http.Request) error {
	out := []apitype.CertPending{}
	if a.o.Certs != nil {
		out = append(out, a.o.Certs.Pending()...)
	}
	web.WriteJSON(w, http.StatusOK, out)
	return nil
}
