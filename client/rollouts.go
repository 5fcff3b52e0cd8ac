package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/berth-dev/berth/apitype"
)

// StartRollout asks for a candidate-first rollout of deployment id to spec
// (`POST /deployments/:id/rollouts`), admitted only while the deployment is
// at rollout_revision expected. Retrying with the same operation id and
// spec returns the same operation.
func (c *Client) StartRollout(ctx context.Context, id, operation, expected string, spec apitype.DeploymentSpec) (*apitype.RolloutOperation, error) {
	if id == "" {
		return nil, errNoID
	}
	body := map[string]any{"operation_id": operation, "expected_revision": expected, "spec": spec}
	var op apitype.RolloutOperation
	if _, err := c.send(ctx, http.MethodPost, deploymentPath(id, "/rollouts"), nil, body, &op); err != nil {
		return nil, err
	}
	return &op, nil
}

// Rollout returns one rollout operation (`GET /deployments/:id/rollouts/:operation`).
func (c *Client) Rollout(ctx context.Context, id, operation string) (*apitype.RolloutOperation, error) {
	if id == "" {
		return nil, errNoID
	}
	var op apitype.RolloutOperation
	if _, err := c.send(ctx, http.MethodGet, deploymentPath(id, "/rollouts/"+url.PathEscape(operation)), nil, nil, &op); err != nil {
		return nil, err
	}
	return &op, nil
}

// Rollouts returns a deployment's rollout history, newest first, at most
// limit (0: the server's bound) — berth's own `GET /deployments/:id/rollouts`.
func (c *Client) Rollouts(ctx context.Context, id string, limit int) ([]apitype.RolloutOperation, error) {
	if id == "" {
		return nil, errNoID
	}
	path := deploymentPath(id, "/rollouts")
	if limit > 0 {
		path += "?limit=" + strconv.Itoa(limit)
	}
	var ops []apitype.RolloutOperation
	if _, err := c.send(ctx, http.MethodGet, path, nil, nil, &ops); err != nil {
		return nil, err
	}
	return ops, nil
}

// UndoRollout rolls deployment id back to the spec its current revision
// replaced, as a new rollout — berth's own `POST /deployments/:id/rollouts/undo`.
// operation may be empty (the server names it).
func (c *Client) UndoRollout(ctx context.Context, id, operation string) (*apitype.RolloutOperation, error) {
	if id == "" {
		return nil, errNoID
	}
	body := map[string]any{}
	if operation != "" {
		body["operation_id"] = operation
	}
	var op apitype.RolloutOperation
	if _, err := c.send(ctx, http.MethodPost, deploymentPath(id, "/rollouts/undo"), nil, body, &op); err != nil {
		return nil, err
	}
	return &op, nil
}
