package client

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"

	"github.com/berth-dev/berth/apitype"
)

// errNoPlugin is returned before any request when a plugin id is empty.
var errNoPlugin = errors.New("client: empty plugin id")

// Plugins lists the compiled-in plugins with their records and status
// (`GET /api/plugins`; a fleet-wide credential).
func (c *Client) Plugins(ctx context.Context) ([]apitype.PluginView, error) {
	var out []apitype.PluginView
	if _, err := c.Do(ctx, http.MethodGet, "/api/plugins", nil, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// SetPluginEnabled switches plugin id on or off for the fleet, keeping its
// config (`POST /api/plugins/{id}/enable|disable`).
func (c *Client) SetPluginEnabled(ctx context.Context, id string, on bool) (*apitype.PluginView, error) {
	if id == "" {
		return nil, errNoPlugin
	}
	verb := "disable"
	if on {
		verb = "enable"
	}
	var out apitype.PluginView
	if _, err := c.Do(ctx, http.MethodPost, "/api/plugins/"+url.PathEscape(id)+"/"+verb, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// InstallPlugin installs the per-namespace plugin id in namespace ns with
// config (nil: {}) (`PUT /namespaces/{ns}/plugins/{id}`).
func (c *Client) InstallPlugin(ctx context.Context, ns, id string, config json.RawMessage) (*apitype.NamespacePlugin, error) {
	if id == "" {
		return nil, errNoPlugin
	}
	var body any
	if config != nil {
		body = map[string]json.RawMessage{"config": config}
	}
	var out apitype.NamespacePlugin
	if _, err := c.Do(ctx, http.MethodPut, pluginPath(ns, id), body, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// UninstallPlugin uninstalls plugin id from namespace ns (`DELETE
// /namespaces/{ns}/plugins/{id}`).
func (c *Client) UninstallPlugin(ctx context.Context, ns, id string) (*apitype.NamespacePlugin, error) {
	if id == "" {
		return nil, errNoPlugin
	}
	var out apitype.NamespacePlugin
	if _, err := c.Do(ctx, http.MethodDelete, pluginPath(ns, id), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

func pluginPath(ns, id string) string {
	return "/namespaces/" + url.PathEscape(ns) + "/plugins/" + url.PathEscape(id)
}

// Feeds lists the namespaces whose event feeds the caller can read, with
// how many events each holds (`GET /feeds`).
func (c *Client) Feeds(ctx context.Context) ([]apitype.FeedIndexEntry, error) {
	var out []apitype.FeedIndexEntry
	if _, err := c.Do(ctx, http.MethodGet, "/feeds", nil, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// Feed reads namespace ns's feed events, newest first (`GET
// /feeds/{ns}?format=json`).
func (c *Client) Feed(ctx context.Context, ns string) ([]apitype.FeedEvent, error) {
	if ns == "" {
		return nil, errors.New("client: empty namespace")
	}
	var out []apitype.FeedEvent
	if _, err := c.Do(ctx, http.MethodGet, "/feeds/"+url.PathEscape(ns)+"?format=json", nil, &out); err != nil {
		return nil, err
	}
	return out, nil
}
