package client

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/berth-dev/berth/apitype"
)

// imagePath is the path of one image; names may hold "/" and ":", which
// stay as they are (the route's last segment takes the rest of the path).
func imagePath(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return "/images/" + strings.Join(parts, "/")
}

var errNoImage = errors.New("client: empty image name")

// Images returns the image inventory (`GET /images`).
func (c *Client) Images(ctx context.Context) (*apitype.ImageInventory, error) {
	var out apitype.ImageInventory
	if _, err := c.Do(ctx, http.MethodGet, "/images", nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Image returns one image (`GET /images/:name`).
func (c *Client) Image(ctx context.Context, name string) (*apitype.ImageView, error) {
	if name == "" {
		return nil, errNoImage
	}
	var out apitype.ImageView
	if _, err := c.Do(ctx, http.MethodGet, imagePath(name), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// PinImage sets or clears an image's pin (`PATCH /images/:name`). A pinned
// image cannot be deleted.
func (c *Client) PinImage(ctx context.Context, name string, pinned bool) (*apitype.ImageView, error) {
	if name == "" {
		return nil, errNoImage
	}
	var out apitype.ImageView
	if _, err := c.Do(ctx, http.MethodPatch, imagePath(name), apitype.ImagePatch{Pinned: &pinned}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteImage deletes an image (`DELETE /images/:name`). One that is
// pinned or used by a deployment is a 409 ([IsConflict]).
func (c *Client) DeleteImage(ctx context.Context, name string) error {
	if name == "" {
		return errNoImage
	}
	_, err := c.Do(ctx, http.MethodDelete, imagePath(name), nil, nil)
	return err
}

// ImportImageFromHost imports a directory or tarball that is on the
// server's host (`POST /images` {name, path}).
func (c *Client) ImportImageFromHost(ctx context.Context, name, path string) (*apitype.ImageView, error) {
	var out apitype.ImageView
	if _, err := c.send(ctx, http.MethodPost, "/images", nil, apitype.ImageImport{Name: name, Path: path}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// UploadImage imports the tarball (optionally gzipped) read from r under
// name (`POST /images?name=`, the tarball as the body).
func (c *Client) UploadImage(ctx context.Context, name string, r io.Reader) (*apitype.ImageView, error) {
	if name == "" {
		return nil, errNoImage
	}
	var out apitype.ImageView
	if err := c.upload(ctx, http.MethodPost, "/images?"+url.Values{"name": {name}}.Encode(), "application/x-tar", r, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ImportImage uploads the directory or tarball at the local path src as
// image name: a tarball is sent as it is, a directory as a gzipped tarball
// written while it is sent (so nothing is staged on disk). Owners are kept
// as numeric ids.
func (c *Client) ImportImage(ctx context.Context, name, src string) (*apitype.ImageView, error) {
	fi, err := os.Stat(src)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	if !fi.IsDir() {
		f, err := os.Open(src)
		if err != nil {
			return nil, fmt.Errorf("client: %w", err)
		}
		defer f.Close()
		return c.UploadImage(ctx, name, f)
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(TarDir(pw, src)) }()
	defer pr.Close()
	return c.UploadImage(ctx, name, pr)
}

// TarDir writes the tree at dir to w as a gzipped tarball with paths
// relative to dir: directories, regular files, symlinks (not followed),
// and device nodes and fifos; hard links are stored as copies.
func TarDir(w io.Writer, dir string) error {
	zw := gzip.NewWriter(w)
	tw := tar.NewWriter(zw)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if fi.Mode()&fs.ModeSocket != 0 {
			return nil
		}
		link := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(rel)
		if fi.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uname, hdr.Gname = "", "" // numeric ids (FileInfoHeader's) only
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !fi.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(tw, f)
		return err
	})
	if err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return zw.Close()
}

// PullImage pulls a registry reference into the server's image store
// (`POST /images/pull`, berth's own) with namespace's registry credentials
// ("" : the caller's namespace) and returns its image.
func (c *Client) PullImage(ctx context.Context, ref, namespace string) (*apitype.ImageView, error) {
	if ref == "" {
		return nil, errNoImage
	}
	var out apitype.ImageView
	if _, err := c.Do(ctx, http.MethodPost, "/images/pull", apitype.ImagePull{Ref: ref, Namespace: namespace}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// SweepImages removes unused, unpinned images beyond the server's image
// budget, oldest first (`POST /images/sweep`).
func (c *Client) SweepImages(ctx context.Context) (*apitype.ImageSweep, error) {
	var out apitype.ImageSweep
	if _, err := c.Do(ctx, http.MethodPost, "/images/sweep", nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

func registryCredPath(ns, host string) string {
	p := "/namespaces/" + url.PathEscape(ns) + "/registry-credentials"
	if host != "" {
		p += "/" + url.PathEscape(host)
	}
	return p
}

// RegistryCredentials lists which secrets hold namespace ns's registry
// credentials, by host (`GET /namespaces/:ns/registry-credentials`).
func (c *Client) RegistryCredentials(ctx context.Context, ns string) ([]apitype.RegistryCredential, error) {
	var out []apitype.RegistryCredential
	if _, err := c.Do(ctx, http.MethodGet, registryCredPath(ns, ""), nil, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// PutRegistryCredential names the secret of namespace ns that holds its
// credentials for a registry host (`PUT /namespaces/:ns/registry-credentials/:host`).
func (c *Client) PutRegistryCredential(ctx context.Context, ns, host, secret string) (*apitype.RegistryCredential, error) {
	var out apitype.RegistryCredential
	if _, err := c.Do(ctx, http.MethodPut, registryCredPath(ns, host), apitype.RegistryCredentialPut{Secret: secret}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteRegistryCredential removes a namespace's mapping for a registry host.
func (c *Client) DeleteRegistryCredential(ctx context.Context, ns, host string) error {
	_, err := c.Do(ctx, http.MethodDelete, registryCredPath(ns, host), nil, nil)
	return err
}
