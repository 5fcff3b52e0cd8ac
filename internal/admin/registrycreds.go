package admin

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/secrets"
	"github.com/berth-dev/berth/internal/web"
)

// RegistryCredentials keeps which secret holds a namespace's credentials
// for a registry host (package server answers it from the store).
type RegistryCredentials interface {
	List(ctx context.Context, namespace string) ([]apitype.RegistryCredential, error)
	Put(ctx context.Context, c apitype.RegistryCredential) error
	// Delete reports false when the namespace has no mapping for host.
	Delete(ctx context.Context, namespace, host string) (bool, error)
}

// registryCredsWall lets a caller manage namespace ns's mappings: the
// same wall as that namespace's secrets, which the mappings name.
func (a *API) registryCreds(r *http.Request, write bool) (RegistryCredentials, string, error) {
	if a.o.RegistryCredentials == nil {
		return nil, "", unavailable("registry credentials")
	}
	ns := r.PathValue("ns")
	if err := secretWall(caller(r), ns, write); err != nil {
		return nil, "", err
	}
	return a.o.RegistryCredentials, ns, nil
}

// validRegistryHost reports whether h is a registry host as references
// name it: a DNS name or IP literal, optionally with a port.
func validRegistryHost(h string) bool {
	if h == "" || len(h) > 255 || strings.Count(h, ":") > 1 {
		return false
	}
	for _, c := range h {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.ContainsRune(".-:", c)) {
			return false
		}
	}
	return true
}

// listRegistryCredentials is GET /namespaces/{ns}/registry-credentials.
func (a *API) listRegistryCredentials(w http.ResponseWriter, r *http.Request) error {
	rc, ns, err := a.registryCreds(r, false)
	if err != nil {
		return err
	}
	list, err := rc.List(r.Context(), ns)
	if err != nil {
		return &web.Error{Status: http.StatusInternalServerError, Message: "the registry credentials could not be read", Err: err}
	}
	web.WriteJSON(w, http.StatusOK, list)
	return nil
}

// putRegistryCredential is PUT /namespaces/{ns}/registry-credentials/{host}
// {secret}: the secret must exist in that namespace.
func (a *API) putRegistryCredential(w http.ResponseWriter, r *http.Request) error {
	rc, ns, err := a.registryCreds(r, true)
	if err != nil {
		return err
	}
	host := r.PathValue("host")
	if !validRegistryHost(host) {
		return web.Invalid("host", "%q is not a registry host (a DNS name or IP, optionally :port, e.g. ghcr.io)", host)
	}
	var req apitype.RegistryCredentialPut
	if err := web.ReadJSON(w, r, &req); err != nil {
		return err
	}
	if req.Secret == "" {
		return web.Invalid("secret", "required: the id of a secret in namespace %q with username/password or .dockerconfigjson", ns)
	}
	if a.o.Secrets == nil {
		return unavailable("secrets")
	}
	if _, err := a.o.Secrets.Get(r.Context(), ns, req.Secret); err != nil {
		if errors.Is(err, secrets.ErrNotFound) {
			return web.Invalid("secret", "no secret %q in namespace %q", req.Secret, ns)
		}
		return secretError(err, req.Secret)
	}
	c := apitype.RegistryCredential{Namespace: ns, Host: host, Secret: req.Secret}
	if err := rc.Put(r.Context(), c); err != nil {
		return &web.Error{Status: http.StatusInternalServerError, Message: "the registry credential was not saved", Err: err}
	}
	web.WriteJSON(w, http.StatusOK, c)
	return nil
}

// deleteRegistryCredential is DELETE /namespaces/{ns}/registry-credentials/{host}.
func (a *API) deleteRegistryCredential(w http.ResponseWriter, r *http.Request) error {
	rc, ns, err := a.registryCreds(r, true)
	if err != nil {
		return err
	}
	host := r.PathValue("host")
	found, err := rc.Delete(r.Context(), ns, host)
	if err != nil {
		return &web.Error{Status: http.StatusInternalServerError, Message: "the registry credential was not deleted", Err: err}
	}
	if !found {
		return web.Errorf(http.StatusNotFound, "namespace %q has no credentials for %q", ns, host)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
