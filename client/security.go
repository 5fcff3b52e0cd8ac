package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/berth-dev/berth/apitype"
)

// SecurityFilter narrows `GET /security`: Severity is a floor, Limit at
// most 1000 (the server's default is 200).
type SecurityFilter struct {
	Severity   apitype.Severity
	Rule       string
	Deployment string
	Namespace  string
	Limit      int
}

// Security reads the SIEM's alerts, the guard rules in force and their
// counts (`GET /security`).
func (c *Client) Security(ctx context.Context, f SecurityFilter) (*apitype.SecurityResponse, error) {
	q := url.Values{}
	for k, v := range map[string]string{"severity": string(f.Severity), "rule": f.Rule, "deployment": f.Deployment, "namespace": f.Namespace} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if f.Limit > 0 {
		q.Set("limit", strconv.Itoa(f.Limit))
	}
	path := "/security"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var out apitype.SecurityResponse
	if _, err := c.Do(ctx, http.MethodGet, path, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// AddRule puts a guard rule in force (`POST /security/rules`). The same
// conditions again replace the rule, which is how its expiry is extended.
func (c *Client) AddRule(ctx context.Context, spec apitype.RuleSpec) (*apitype.RuleView, error) {
	var out apitype.RuleView
	if _, err := c.Do(ctx, http.MethodPost, "/security/rules", spec, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// SetRuleExpiry sets when a guard rule ends, secs from now; nil makes it
// permanent (`PATCH /security/rules/:id`).
func (c *Client) SetRuleExpiry(ctx context.Context, id string, secs *int64) (*apitype.RuleView, error) {
	body := struct {
		ExpiresInSecs *int64 `json:"expires_in_secs"`
	}{secs}
	var out apitype.RuleView
	if _, err := c.Do(ctx, http.MethodPatch, "/security/rules/"+url.PathEscape(id), body, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteRule ends a guard rule (`DELETE /security/rules/:id`).
func (c *Client) DeleteRule(ctx context.Context, id string) error {
	_, err := c.Do(ctx, http.MethodDelete, "/security/rules/"+url.PathEscape(id), nil, nil)
	return err
}
