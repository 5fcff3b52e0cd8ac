package client

import (
	"context"
	"net/http"

	"github.com/berth-dev/berth/apitype"
)

// Certs lists the TLS certificates the server holds (`GET /certs`).
func (c *Client) Certs(ctx context.Context) ([]apitype.CertStatus, error) {
	var out []apitype.CertStatus
	if _, err := c.Do(ctx, http.MethodGet, "/certs", nil, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// PendingCerts lists the routed hosts that have no certificate yet, and
// why (berth's own `GET /certs/pending`).
func (c *Client) PendingCerts(ctx context.Context) ([]apitype.CertPending, error) {
	var out []apitype.CertPending
	if _, err := c.Do(ctx, http.MethodGet, "/certs/pending", nil, &out); err != nil {
		return nil, err
	}
	return out, nil
}
