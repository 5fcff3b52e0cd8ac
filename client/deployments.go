package client

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"

	"github.com/berth-dev/berth/apitype"
)

// errNoID is returned before any request when a deployment id is empty:
// "/deployments/" would silently name the collection instead.
var errNoID = errors.New("client: empty deployment id")

// deploymentPath returns the escaped path of one deployment plus suffix.
func deploymentPath(id, suffix string) string {
	return "/deployments/" + url.PathEscape(id) + suffix
}

// Apply registers spec, or replaces the deployment with its id
// (`POST /deployments`). The server answers 201 either way.
func (c *Client) Apply(ctx context.Context, spec apitype.DeploymentSpec) (*apitype.DeploymentStatus, error) {
	return c.post(ctx, spec, nil)
}

// Create registers spec only if no deployment has its id: it sends
// `If-None-Match: *`, and an existing id fails with an error for which
// [IsPreconditionFailed] is true.
func (c *Client) Create(ctx context.Context, spec apitype.DeploymentSpec) (*apitype.DeploymentStatus, error) {
	return c.post(ctx, spec, http.Header{"If-None-Match": {"*"}})
}

func (c *Client) post(ctx context.Context, spec apitype.DeploymentSpec, h http.Header) (*apitype.DeploymentStatus, error) {
	if spec.ID == "" {
		return nil, errNoID
	}
	var st apitype.DeploymentStatus
	if _, err := c.send(ctx, http.MethodPost, "/deployments", h, spec, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// Deployments lists every deployment the caller can see, sorted by id.
func (c *Client) Deployments(ctx context.Context) ([]apitype.DeploymentStatus, error) {
	var list []apitype.DeploymentStatus
	if _, err := c.send(ctx, http.MethodGet, "/deployments", nil, nil, &list); err != nil {
		return nil, err
	}
	return list, nil
}

// Deployment returns one deployment and its ETag, which [Client.Update]
// takes as If-Match to refuse writing over a change it has not seen.
func (c *Client) Deployment(ctx context.Context, id string) (*apitype.DeploymentStatus, string, error) {
	if id == "" {
		return nil, "", errNoID
	}
	var st apitype.DeploymentStatus
	h, err := c.send(ctx, http.MethodGet, deploymentPath(id, ""), nil, nil, &st)
	if err != nil {
		return nil, "", err
	}
	return &st, h.Get("ETag"), nil
}

// Update replaces the deployment spec.ID with spec (`PUT /deployments/:id`).
// When ifMatch is not empty it is sent as If-Match, and a deployment changed
// since that ETag was read fails with [IsPreconditionFailed].
func (c *Client) Update(ctx context.Context, spec apitype.DeploymentSpec, ifMatch string) (*apitype.DeploymentStatus, error) {
	if spec.ID == "" {
		return nil, errNoID
	}
	var h http.Header
	if ifMatch != "" {
		h = http.Header{"If-Match": {ifMatch}}
	}
	var st apitype.DeploymentStatus
	if _, err := c.send(ctx, http.MethodPut, deploymentPath(spec.ID, ""), h, spec, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// Delete removes a deployment and tears its pool down.
func (c *Client) Delete(ctx context.Context, id string) error {
	if id == "" {
		return errNoID
	}
	_, err := c.send(ctx, http.MethodDelete, deploymentPath(id, ""), nil, nil, nil)
	return err
}

// PatchScaling merges patch into the deployment's scaling policy
// (`PATCH /deployments/:id/scaling`). Keys are [apitype.ScalingPolicy]'s
// JSON names; only the keys present change. It is a map rather than a
// ScalingPolicy so that a caller can send exactly the keys it means to,
// including ones this build does not know.
func (c *Client) PatchScaling(ctx context.Context, id string, patch map[string]any) (*apitype.DeploymentStatus, error) {
	if id == "" {
		return nil, errNoID
	}
	if patch == nil {
		patch = map[string]any{} // null is not an object, and the server says so
	}
	var st apitype.DeploymentStatus
	if _, err := c.send(ctx, http.MethodPatch, deploymentPath(id, "/scaling"), nil, patch, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// DrainUpstream stops sending new requests to one upstream of a static
// deployment. The reply's State is "drained" once nothing is in flight,
// else "draining"; it does not wait. upstream is the address as the spec
// lists it, such as "10.0.0.4:8080" or "https://h:443".
func (c *Client) DrainUpstream(ctx context.Context, id, upstream string, req apitype.DrainRequest) (*apitype.UpstreamTrafficStatus, error) {
	return c.upstream(ctx, http.MethodPut, id, upstream, req)
}

// UndrainUpstream sends traffic to a drained or draining upstream again
// (uncordon).
func (c *Client) UndrainUpstream(ctx context.Context, id, upstream string) (*apitype.UpstreamTrafficStatus, error) {
	return c.upstream(ctx, http.MethodDelete, id, upstream, nil)
}

func (c *Client) upstream(ctx context.Context, method, id, upstream string, body any) (*apitype.UpstreamTrafficStatus, error) {
	if id == "" {
		return nil, errNoID
	}
	if upstream == "" {
		return nil, errors.New("client: empty upstream")
	}
	var st apitype.UpstreamTrafficStatus
	path := deploymentPath(id, "/upstreams/"+url.PathEscape(upstream)+"/drain")
	if _, err := c.send(ctx, method, path, nil, body, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// Health returns nil when the server answers `GET /healthz` with 2xx. It
// needs no credential.
func (c *Client) Health(ctx context.Context) error {
	_, err := c.send(ctx, http.MethodGet, "/healthz", nil, nil, nil)
	return err
}

// Ingress returns the addresses DNS should point deployments' hostnames at.
func (c *Client) Ingress(ctx context.Context) (*apitype.Ingress, error) {
	var in apitype.Ingress
	if _, err := c.send(ctx, http.MethodGet, "/ingress", nil, nil, &in); err != nil {
		return nil, err
	}
	return &in, nil
}

// MetricsQuery filters and pages `GET /metrics`. The zero value asks for
// everything.
type MetricsQuery struct {
	// Deployment matches one id exactly.
	Deployment string
	// Prefix matches ids that start with it.
	Prefix string
	// Namespace matches deployments in one namespace.
	Namespace string
	// Summary drops the per-VM lists (vms, pending_vms, host_sandboxes),
	// which are most of the reply for a large fleet.
	Summary bool
	// Limit caps how many deployments come back; 0 means no cap.
	Limit int
	// Offset skips that many matched deployments, for paging with Limit.
	Offset int
	// Fleet asks for the pool rolled up over every host of the fleet
	// (`scope=fleet`; fleet-wide credentials only).
	Fleet bool
}

// Query returns q as a URL query string, without the leading "?".
func (q MetricsQuery) Query() string {
	v := url.Values{}
	if q.Deployment != "" {
		v.Set("deployment", q.Deployment)
	}
	if q.Prefix != "" {
		v.Set("prefix", q.Prefix)
	}
	if q.Namespace != "" {
		v.Set("namespace", q.Namespace)
	}
	if q.Summary {
		v.Set("summary", "true")
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.Offset > 0 {
		v.Set("offset", strconv.Itoa(q.Offset))
	}
	if q.Fleet {
		v.Set("scope", "fleet")
	}
	return v.Encode()
}

// Metrics returns host, fleet and per-deployment figures.
func (c *Client) Metrics(ctx context.Context, q MetricsQuery) (*apitype.MetricsResponse, error) {
	if q.Limit < 0 || q.Offset < 0 {
		return nil, errors.New("client: metrics limit and offset must not be negative")
	}
	path := "/metrics"
	if qs := q.Query(); qs != "" {
		path += "?" + qs
	}
	var m apitype.MetricsResponse
	if _, err := c.send(ctx, http.MethodGet, path, nil, nil, &m); err != nil {
		return nil, err
	}
	return &m, nil
}
