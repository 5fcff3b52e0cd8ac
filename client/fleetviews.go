package client

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"

	"github.com/berth-dev/berth/apitype"
)

// FleetQuery narrows and pages `GET /fleet/deployments` and `GET
// /fleet/gateways/:id/metrics`. The zero value asks for the server's
// first page (100) of every namespace the caller reaches.
type FleetQuery struct {
	// Namespace matches deployments of one namespace; a confined token's
	// is its own.
	Namespace string
	// Offset skips that many matched deployments.
	Offset int
	// Limit caps how many come back; 0 leaves the server's default.
	Limit int
}

func (q FleetQuery) query() (string, error) {
	if q.Offset < 0 || q.Limit < 0 {
		return "", errors.New("client: fleet query offset and limit must not be negative")
	}
	v := url.Values{}
	if q.Namespace != "" {
		v.Set("namespace", q.Namespace)
	}
	if q.Offset > 0 {
		v.Set("offset", strconv.Itoa(q.Offset))
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if len(v) == 0 {
		return "", nil
	}
	return "?" + v.Encode(), nil
}

// FleetSummary is every live host of the fleet with what its last report
// said, and the pool rolled up over the fleet (`GET /fleet`, fleet-wide
// callers only). A server that is not part of a fleet answers 409 with
// code fleet_not_configured.
func (c *Client) FleetSummary(ctx context.Context) (*apitype.FleetSummary, error) {
	var out apitype.FleetSummary
	if _, err := c.Do(ctx, http.MethodGet, "/fleet", nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// FleetDeployments lists the deployments the fleet's hosts serve, by id,
// with the hosts serving each and their pools (`GET
// /fleet/deployments?namespace=&offset=&limit=`).
func (c *Client) FleetDeployments(ctx context.Context, q FleetQuery) (*apitype.FleetDeployments, error) {
	qs, err := q.query()
	if err != nil {
		return nil, err
	}
	var out apitype.FleetDeployments
	if _, err := c.Do(ctx, http.MethodGet, "/fleet/deployments"+qs, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// FleetGatewayMetrics is host id's last report: its usage and the
// deployments it serves, paged by q (`GET /fleet/gateways/:id/metrics`).
// A host that is down or has not reported yet is a 404.
func (c *Client) FleetGatewayMetrics(ctx context.Context, id string, q FleetQuery) (*apitype.FleetGatewayMetrics, error) {
	if id == "" {
		return nil, errors.New("client: empty gateway id")
	}
	qs, err := q.query()
	if err != nil {
		return nil, err
	}
	var out apitype.FleetGatewayMetrics
	if _, err := c.Do(ctx, http.MethodGet, "/fleet/gateways/"+url.PathEscape(id)+"/metrics"+qs, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// FleetNetwork is each live host's address and the routes and
// deployments it serves (`GET /fleet/network`, fleet-wide callers only).
func (c *Client) FleetNetwork(ctx context.Context) (*apitype.FleetNetwork, error) {
	var out apitype.FleetNetwork
	if _, err := c.Do(ctx, http.MethodGet, "/fleet/network", nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Services lists the services with members in the fleet, by id, after the
// id after ("" from the first), at most limit of them (0: the server's
// most, 100); the reply's Next is the after of the next page (`GET
// /services?after=&limit=`, fleet-wide callers only).
func (c *Client) Services(ctx context.Context, after string, limit int) (*apitype.FleetServices, error) {
	if limit < 0 {
		return nil, errors.New("client: services limit must not be negative")
	}
	v := url.Values{}
	if after != "" {
		v.Set("after", after)
	}
	if limit > 0 {
		v.Set("limit", strconv.Itoa(limit))
	}
	path := "/services"
	if len(v) > 0 {
		path += "?" + v.Encode()
	}
	var out apitype.FleetServices
	if _, err := c.Do(ctx, http.MethodGet, path, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ControlPlaneConfig reads the fleet's configuration as etcd keeps it, at
// its revision (0 before the first write) (`GET /control-plane/config`).
func (c *Client) ControlPlaneConfig(ctx context.Context) (*apitype.ControlPlaneConfig, error) {
	var out apitype.ControlPlaneConfig
	if _, err := c.Do(ctx, http.MethodGet, "/control-plane/config", nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ErrStaleRevision is what [Client.PutControlPlaneConfig]'s error matches
// (with [errors.Is]) when the stored configuration is no longer at the
// revision expected: read it again, and retry on the new revision.
var ErrStaleRevision = errors.New("client: the control-plane configuration changed since the expected revision")

// staleError is the server's 409 to a PUT with a stale
// expected_revision: it is ErrStaleRevision and unwraps to the *Error.
type staleError struct{ err *Error }

func (e staleError) Unwrap() error        { return e.err }
func (e staleError) Is(target error) bool { return target == ErrStaleRevision }
func (e staleError) Error() string        { return e.err.Message }

// PutControlPlaneConfig writes doc as the fleet's configuration if the
// stored one is still at revision expected (0: none stored yet), and
// returns it at its new revision (`PUT /control-plane/config`). When the
// stored configuration moved on, the error matches [ErrStaleRevision]
// (and [IsConflict]).
func (c *Client) PutControlPlaneConfig(ctx context.Context, expected int64, doc apitype.ControlPlaneDoc) (*apitype.ControlPlaneConfig, error) {
	if expected < 0 {
		return nil, errors.New("client: expected_revision must not be negative")
	}
	var out apitype.ControlPlaneConfig
	_, err := c.Do(ctx, http.MethodPut, "/control-plane/config", apitype.ControlPlaneConfigPut{ExpectedRevision: &expected, Config: &doc}, &out)
	var e *Error
	if errors.As(err, &e) && e.Status == http.StatusConflict && e.Code == "stale_revision" {
		return nil, staleError{e}
	}
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// DiscoveryStatus is a discovery-backed deployment's service members as
// the fleet holds them (`GET /deployments/:id/discovery-status`). A
// deployment without discovery is a 400.
func (c *Client) DiscoveryStatus(ctx context.Context, id string) (*apitype.DiscoveryStatus, error) {
	if id == "" {
		return nil, errors.New("client: empty deployment id")
	}
	var out apitype.DiscoveryStatus
	if _, err := c.Do(ctx, http.MethodGet, "/deployments/"+url.PathEscape(id)+"/discovery-status", nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
