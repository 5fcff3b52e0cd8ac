package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/berth-dev/berth/apitype"
)

// obsPath is the obs plugin's API path of namespace ns.
func obsPath(ns, rest string) string {
	return "/namespaces/" + url.PathEscape(ns) + "/plugins/obs/api/" + rest
}

// ObsFleet reads namespace ns's telemetry overview over window ("" is
// the server's default, 1h) (`GET …/plugins/obs/api/fleet`).
func (c *Client) ObsFleet(ctx context.Context, ns, window string) (*apitype.ObsFleet, error) {
	path := obsPath(ns, "fleet")
	if window != "" {
		path += "?" + url.Values{"window": {window}}.Encode()
	}
	var out apitype.ObsFleet
	if _, err := c.Do(ctx, http.MethodGet, path, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ObsDeployment reads one deployment's telemetry over window.
func (c *Client) ObsDeployment(ctx context.Context, ns, id, window string) (*apitype.ObsDeployment, error) {
	if id == "" {
		return nil, errNoID
	}
	path := obsPath(ns, "deployments/"+url.PathEscape(id))
	if window != "" {
		path += "?" + url.Values{"window": {window}}.Encode()
	}
	var out apitype.ObsDeployment
	if _, err := c.Do(ctx, http.MethodGet, path, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ObsLogQuery selects a page of a deployment's stored log lines. Zero
// fields are left to the server: the last hour, 200 lines.
type ObsLogQuery struct {
	Window   string // a window name, as "1h"; or From and To
	From, To int64  // epoch ms
	Level    string // debug, info, warn or error
	Backend  string
	Q        string // a substring of the message
	Limit    int    // at most 1000
	Before   int64  // the previous page's next_before_ms
}

// ObsLogs reads one page of a deployment's stored log lines, newest first
// (`GET …/plugins/obs/api/deployments/:id/logs`).
func (c *Client) ObsLogs(ctx context.Context, ns, id string, lq ObsLogQuery) (*apitype.ObsLogs, error) {
	if id == "" {
		return nil, errNoID
	}
	q := url.Values{}
	for k, v := range map[string]string{"window": lq.Window, "level": lq.Level, "backend": lq.Backend, "q": lq.Q} {
		if v != "" {
			q.Set(k, v)
		}
	}
	for k, v := range map[string]int64{"from": lq.From, "to": lq.To, "limit": int64(lq.Limit), "before": lq.Before} {
		if v != 0 {
			q.Set(k, strconv.FormatInt(v, 10))
		}
	}
	path := obsPath(ns, "deployments/"+url.PathEscape(id)+"/logs")
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var out apitype.ObsLogs
	if _, err := c.Do(ctx, http.MethodGet, path, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ObsAlertSpec is a new alert rule: the deployment's errors over the
// trailing minute above Threshold POST to WebhookURL (public https).
type ObsAlertSpec struct {
	Deployment string  `json:"deployment"`
	Threshold  float64 `json:"threshold"`
	WebhookURL string  `json:"webhook_url"`
	Metric     string  `json:"metric,omitempty"`
}

// ObsAlerts lists namespace ns's alert rules.
func (c *Client) ObsAlerts(ctx context.Context, ns string) ([]apitype.ObsAlert, error) {
	var out []apitype.ObsAlert
	if _, err := c.Do(ctx, http.MethodGet, obsPath(ns, "alerts"), nil, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// AddObsAlert creates an alert rule in namespace ns.
func (c *Client) AddObsAlert(ctx context.Context, ns string, spec ObsAlertSpec) (*apitype.ObsAlert, error) {
	var out apitype.ObsAlert
	if _, err := c.Do(ctx, http.MethodPost, obsPath(ns, "alerts"), spec, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteObsAlert deletes namespace ns's alert rule id.
func (c *Client) DeleteObsAlert(ctx context.Context, ns, id string) error {
	if id == "" {
		return errNoID
	}
	_, err := c.Do(ctx, http.MethodDelete, obsPath(ns, "alerts/"+url.PathEscape(id)), nil, nil)
	return err
}
