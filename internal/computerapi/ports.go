package computerapi

import (
	"net/http"
	"strconv"

	"github.com/berth-dev/berth/internal/computer"
	"github.com/berth-dev/berth/internal/web"
)

// PortRequest is the body of exposePort.
type PortRequest struct {
	Port int `json:"port"`
	// Public makes the port reachable without a credential; otherwise the
	// data plane asks for a grant of the Computer.
	Public bool `json:"public,omitempty"`
}

// Port is an exposed port: the hostname and URL at which the gateway's
// data plane reaches it.
type Port struct {
	Port   int    `json:"port"`
	Host   string `json:"host"`
	URL    string `json:"url"`
	Public bool   `json:"public"`
}

// PortList is the answer of listPorts.
type PortList struct {
	Ports []Port `json:"ports"`
}

func port(e computer.Exposure) Port {
	return Port{Port: e.Port, Host: e.Host, URL: e.URL, Public: e.Public}
}

func (a *API) exposePort(w http.ResponseWriter, r *http.Request, c *call) error {
	var req PortRequest
	if err := web.ReadJSON(w, r, &req); err != nil {
		return err
	}
	if req.Port < 1 || req.Port > 65535 {
		return web.Invalid("port", "must be from 1 to 65535, got %d", req.Port)
	}
	e, err := a.o.Manager.ExposePort(r.Context(), c.id, req.Port, req.Public)
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
	out := PortList{Ports: make([]Port, 0, len(es))}
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
