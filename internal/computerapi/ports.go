package computerapi

import (
	"github.com/berth-dev/berth/apitype/computertype"
	"net/http"
	"strconv"

	"github.com/berth-dev/berth/internal/computer"
	"github.com/berth-dev/berth/internal/web"
)

func port(e computer.Exposure) computertype.Port {
	return computertype.Port{Port: e.Port, Host: e.Host, URL: e.URL, Public: e.Public, SignIn: e.SignIn}
}

func (a *API) exposePort(w http.ResponseWriter, r *http.Request, c *call) error {
	var req computertype.PortRequest
	if err := readJSON(w, r, &req); err != nil {
		return err
	}
	if req.Port < 1 || req.Port > 65535 {
		return web.Invalid("port", "must be from 1 to 65535, got %d", req.Port)
	}
	if req.Public && req.SignIn != "" {
		return web.Invalid("sign_in", "a public port needs no sign-in: sign_in admits browsers to a private one")
	}
	if req.SignIn != "" {
		if a.o.SignIn == nil {
			return web.Invalid("sign_in", "this server has no sign-in gates")
		}
		if err := a.o.SignIn(r.Context(), c.comp.Namespace, req.SignIn); err != nil {
			return web.Invalid("sign_in", "%v", err)
		}
	}
	e, err := a.o.Manager.ExposePort(r.Context(), c.id, req)
	if err != nil {
		return managerError(err, c.id)
	}
	web.WriteJSON(w, http.StatusCreated, port(e))
	return nil
}

func (a *API) listPorts(w http.ResponseWriter, r *http.Request, c *call) error {
	es, err := a.o.Manager.Ports(r.Context(), c.id)
	if err != nil {
		return managerError(err, c.id)
	}
	out := computertype.PortList{Ports: make([]computertype.Port, 0, len(es))}
	for _, e := range es {
		out.Ports = append(out.Ports, port(e))
	}
	web.WriteJSON(w, http.StatusOK, out)
	return nil
}

func (a *API) unexposePort(w http.ResponseWriter, r *http.Request, c *call) error {
	n, err := strconv.Atoi(r.PathValue("port"))
	if err != nil || n < 1 || n > 65535 {
		return web.Invalid("port", "must be from 1 to 65535, got %q", r.PathValue("port"))
	}
	if err := a.o.Manager.UnexposePort(r.Context(), c.id, n); err != nil {
		return managerError(err, c.id)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
