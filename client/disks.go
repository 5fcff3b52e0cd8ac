package client

import (
	"context"
	"errors"
	"net/http"
	"net/url"

	"github.com/berth-dev/berth/apitype"
)

var errNoDisk = errors.New("client: empty disk id")

func diskPath(id string) string { return "/disks/" + url.PathEscape(id) }

// Disks returns the disk inventory (`GET /disks`, fleet-wide callers only).
func (c *Client) Disks(ctx context.Context) (*apitype.DiskInventory, error) {
	var out apitype.DiskInventory
	if _, err := c.Do(ctx, http.MethodGet, "/disks", nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// PatchDisk sets a disk's retain and note (`PATCH /disks/:id`); nil
// leaves one as it is, a note of "" clears it.
func (c *Client) PatchDisk(ctx context.Context, id string, retain *bool, note *string) error {
	if id == "" {
		return errNoDisk
	}
	p := apitype.DiskPatch{Retain: retain}
	if note != nil {
		p.Note = apitype.Some(*note)
	}
	_, err := c.Do(ctx, http.MethodPatch, diskPath(id), p, nil)
	return err
}

// DeleteDisk removes a disk (`DELETE /disks/:id`); force stops a running
// sandbox first and removes a retained disk.
func (c *Client) DeleteDisk(ctx context.Context, id string, force bool) (*apitype.DiskOutcome, error) {
	if id == "" {
		return nil, errNoDisk
	}
	p := diskPath(id)
	if force {
		p += "?force=true"
	}
	var out apitype.DiskOutcome
	if _, err := c.Do(ctx, http.MethodDelete, p, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// PurgeOrphanDisks removes every orphaned disk not retained (`POST
// /disks/purge-orphans`).
func (c *Client) PurgeOrphanDisks(ctx context.Context) (*apitype.DiskOutcome, error) {
	var out apitype.DiskOutcome
	if _, err := c.Do(ctx, http.MethodPost, "/disks/purge-orphans", struct{}{}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// SweepDisks removes the disks that have expired (`POST /disks/sweep`).
func (c *Client) SweepDisks(ctx context.Context) (*apitype.DiskOutcome, error) {
	var out apitype.DiskOutcome
	if _, err := c.Do(ctx, http.MethodPost, "/disks/sweep", struct{}{}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ArchiveDisk starts archiving a disk (`POST /disks/:id/archive`); purge
// removes it once archived. The archive runs on: Disks shows its progress.
func (c *Client) ArchiveDisk(ctx context.Context, id string, purge bool) (*apitype.ArchiveView, error) {
	if id == "" {
		return nil, errNoDisk
	}
	var out apitype.ArchiveView
	if _, err := c.Do(ctx, http.MethodPost, diskPath(id)+"/archive", apitype.DiskArchiveRequest{Purge: &purge}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteDeploymentRecord forgets a deployment's record without tearing
// anything down (`DELETE /deployments/:id/record`, If-Match etag): a 409
// while it has replicas or a running job.
func (c *Client) DeleteDeploymentRecord(ctx context.Context, id, etag string) error {
	_, err := c.send(ctx, http.MethodDelete, "/deployments/"+url.PathEscape(id)+"/record", http.Header{"If-Match": {etag}}, nil, nil)
	return err
}

// DeleteRetiredRecord keeps a deployment's record under the server's
// retired directory, then forgets it (`DELETE
// /deployments/:id/retired-record`, If-Match etag; fleet-wide admins).
func (c *Client) DeleteRetiredRecord(ctx context.Context, id, etag string) error {
	_, err := c.send(ctx, http.MethodDelete, "/deployments/"+url.PathEscape(id)+"/retired-record", http.Header{"If-Match": {etag}}, nil, nil)
	return err
}
