package client

import (
	"context"
	"errors"
	"net/http"
	"net/url"

	"github.com/berth-dev/berth/apitype"
)

// FleetHosts lists the live hosts of the server's fleet (`GET
// /fleet/hosts`, berth's own, fleet-wide callers only). A server that is
// not part of a fleet answers 409 with code fleet_not_configured.
func (c *Client) FleetHosts(ctx context.Context) (*apitype.FleetHosts, error) {
	var out apitype.FleetHosts
	if _, err := c.Do(ctx, http.MethodGet, "/fleet/hosts", nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// CordonHost marks a host cordoned: it starts no new Computers (`POST
// /fleet/hosts/:id/cordon`).
func (c *Client) CordonHost(ctx context.Context, id string) (*apitype.FleetHost, error) {
	return c.hostState(ctx, id, "cordon")
}

// DrainHost marks a host draining (`POST /fleet/hosts/:id/drain`); until
// berth places work across hosts, that is what cordon does.
func (c *Client) DrainHost(ctx context.Context, id string) (*apitype.FleetHost, error) {
	return c.hostState(ctx, id, "drain")
}

// UncordonHost makes a cordoned or draining host active again (`POST
// /fleet/hosts/:id/uncordon`).
func (c *Client) UncordonHost(ctx context.Context, id string) (*apitype.FleetHost, error) {
	return c.hostState(ctx, id, "uncordon")
}

func (c *Client) hostState(ctx context.Context, id, action string) (*apitype.FleetHost, error) {
	if id == "" {
		return nil, errors.New("client: empty host id")
	}
	var out apitype.FleetHost
	if _, err := c.Do(ctx, http.MethodPost, "/fleet/hosts/"+url.PathEscape(id)+"/"+action, struct{}{}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
