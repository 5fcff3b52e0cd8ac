package client

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/berth-dev/berth/apitype"
)

// Jobs lists background jobs, newest first: every deployment's
// (`GET /jobs`, fleet-wide credentials only) when deployment is empty,
// else that deployment's (`GET /deployments/:id/jobs`).
func (c *Client) Jobs(ctx context.Context, deployment string) ([]apitype.JobRecord, error) {
	path := "/jobs"
	if deployment != "" {
		path = deploymentPath(deployment, "/jobs")
	}
	var out []apitype.JobRecord
	if _, err := c.send(ctx, http.MethodGet, path, nil, nil, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// Job returns one job (`GET /jobs/:id`).
func (c *Client) Job(ctx context.Context, id string) (*apitype.JobRecord, error) {
	if id == "" {
		return nil, fmt.Errorf("client: empty job id")
	}
	var out apitype.JobRecord
	if _, err := c.send(ctx, http.MethodGet, "/jobs/"+url.PathEscape(id), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// StartJob starts a deployment's job of kind: image-build
// (`POST /deployments/:id/build`), artifact-pull (`…/pull`), mount-pull
// (`…/mounts/pull`) or host-update (`…/update`), with body (nil sends
// `{}`). The server answers 202 with the job's record.
func (c *Client) StartJob(ctx context.Context, deployment string, kind apitype.JobKind, body any) (*apitype.JobRecord, error) {
	if deployment == "" {
		return nil, errNoID
	}
	suffix, ok := map[apitype.JobKind]string{
		apitype.JobImageBuild: "/build", apitype.JobArtifactPull: "/pull",
		apitype.JobMountPull: "/mounts/pull", apitype.JobHostUpdate: "/update",
	}[kind]
	if !ok {
		return nil, fmt.Errorf("client: unknown job kind %q", kind)
	}
	if body == nil {
		body = json.RawMessage(`{}`)
	}
	var out apitype.JobRecord
	if _, err := c.send(ctx, http.MethodPost, deploymentPath(deployment, suffix), nil, body, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// HostUpdate starts a deployment's host-update job
// (`POST /deployments/:id/update`).
func (c *Client) HostUpdate(ctx context.Context, deployment string) (*apitype.JobRecord, error) {
	return c.StartJob(ctx, deployment, apitype.JobHostUpdate, nil)
}

// PullOptions are an artifact pull's parameters (all optional).
type PullOptions struct {
	// Ref pulls this tag or digest instead of the spec's artifact.ref.
	Ref string `json:"ref,omitempty"`
	// OperationID names the rollout the pull belongs to; it needs Ref.
	OperationID string `json:"operation_id,omitempty"`
	// Force fetches even when the digest is the one already pulled.
	Force bool `json:"force,omitempty"`
}

// PullArtifact starts a deployment's artifact-pull job
// (`POST /deployments/:id/pull`).
func (c *Client) PullArtifact(ctx context.Context, deployment string, o PullOptions) (*apitype.JobRecord, error) {
	return c.StartJob(ctx, deployment, apitype.JobArtifactPull, o)
}

// PullMounts starts a vm deployment's mount-pull job
// (`POST /deployments/:id/mounts/pull`), force fetching every blob again
// even when its digest is unchanged.
func (c *Client) PullMounts(ctx context.Context, deployment string, force bool) (*apitype.JobRecord, error) {
	return c.StartJob(ctx, deployment, apitype.JobMountPull, struct {
		Force bool `json:"force,omitempty"`
	}{force})
}

// Build starts a vm deployment's image-build job
// (`POST /deployments/:id/build`), building ref instead of the spec's
// build.ref when it is not "".
func (c *Client) Build(ctx context.Context, deployment, ref string) (*apitype.JobRecord, error) {
	return c.StartJob(ctx, deployment, apitype.JobImageBuild, struct {
		Ref string `json:"ref,omitempty"`
	}{ref})
}

// jobLogLine is one object of berth's `GET /jobs/:id/log` NDJSON stream.
type jobLogLine struct {
	Line   *string            `json:"line"`
	Status *apitype.JobStatus `json:"status"`
	Error  *string            `json:"error"`
}

// JobLog calls line with each line of a job's log (`GET /jobs/:id/log`,
// berth's own) and returns the job's status (and error) when the stream
// ends. With follow it waits for new lines until the job finishes or ctx
// ends; the HTTP client's timeout does not apply.
func (c *Client) JobLog(ctx context.Context, id string, follow bool, line func(string)) (apitype.JobStatus, string, error) {
	if id == "" {
		return "", "", fmt.Errorf("client: empty job id")
	}
	path := "/jobs/" + url.PathEscape(id) + "/log"
	if follow {
		path += "?follow=1"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return "", "", fmt.Errorf("client: GET %s: %w", path, err)
	}
	req.Header.Set("Accept", "application/x-ndjson")
	c.setHeaders(req.Header)
	hc := c.hc
	if follow {
		hc = c.untimed()
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBytes))
		return "", "", newError(resp.StatusCode, b)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var l jobLogLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return "", "", fmt.Errorf("client: GET %s: bad log line: %w", path, err)
		}
		switch {
		case l.Line != nil:
			line(*l.Line)
		case l.Status != nil:
			msg := ""
			if l.Error != nil {
				msg = *l.Error
			}
			return *l.Status, msg, nil
		}
	}
	if err := sc.Err(); err != nil && ctx.Err() == nil {
		return "", "", fmt.Errorf("client: GET %s: reading the log: %w", path, err)
	}
	return "", "", fmt.Errorf("client: GET %s: the log ended before the job's status", path)
}
