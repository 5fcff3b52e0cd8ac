package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/berth-dev/berth/apitype"
)

var imageCmd = &command{
	name:    "image",
	summary: "Import, list, pin and delete root filesystem images",
	help: `Usage: berth image import NAME DIR|TARBALL [--on-server]
       berth image pull REF [--namespace NS]
       berth image sweep
       berth image list [-o json|yaml]
       berth image pin NAME...
       berth image unpin NAME...
       berth image delete NAME...

Images are the root filesystems the container and VM drivers boot replicas
from; a vm deployment names one in vm.image.

import uploads a directory (sent as a gzipped tarball) or a tarball (.tar or
.tar.gz, sent as it is) under NAME. With --on-server the path is read on
the server's host instead, and nothing is uploaded. Importing the same
content again changes nothing; other content under a name that a deployment
uses is refused.

pull fetches a registry reference (a name with a registry host, such as
docker.io/library/alpine:3.20 or ghcr.io/o/app:v1, or one with a
@sha256: digest) with the namespace's registry credentials (PUT
/namespaces/NS/registry-credentials/HOST {"secret": ID}). A deployment
whose vm.image is a reference pulls it by itself; pull ahead of time so the
first replica does not wait.

sweep removes unused, unpinned images, oldest first, while the images take
more than the server's --image-budget.

list shows every image with its digest, size, pin and the deployments that
use it. A pinned image cannot be deleted; neither can one a deployment uses.
`,
	run: runImage,
}

func runImage(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 {
		return usagef("missing subcommand (import, pull, sweep, list, pin, unpin or delete)")
	}
	sub, rest := args[0], args[1:]
	switch sub {
	case "import":
		fs := e.flagSet("image import")
		onServer := fs.Bool("on-server", false, "")
		pos, err := e.parse(fs, rest)
		if err != nil {
			return err
		}
		if len(pos) != 2 {
			return usagef("want NAME and DIR|TARBALL")
		}
		c, err := e.client()
		if err != nil {
			return err
		}
		var im *apitype.ImageView
		if *onServer {
			im, err = c.ImportImageFromHost(ctx, pos[0], pos[1])
		} else {
			im, err = c.ImportImage(ctx, pos[0], pos[1])
		}
		if err != nil {
			return err
		}
		return e.printImage(im, "imported")
	case "pull":
		fs := e.flagSet("image pull")
		ns := fs.String("namespace", "", "")
		pos, err := e.parse(fs, rest)
		if err != nil {
			return err
		}
		if len(pos) != 1 {
			return usagef("want one registry reference REF")
		}
		c, err := e.client()
		if err != nil {
			return err
		}
		im, err := c.PullImage(ctx, pos[0], *ns)
		if err != nil {
			return err
		}
		return e.printImage(im, "pulled")
	case "sweep":
		if err := e.parseNone(e.flagSet("image sweep"), rest); err != nil {
			return err
		}
		c, err := e.client()
		if err != nil {
			return err
		}
		res, err := c.SweepImages(ctx)
		if err != nil {
			return err
		}
		for _, n := range res.Offloaded {
			fmt.Fprintf(e.stdout, "image/%s removed\n", n)
		}
		for _, f := range res.Failed {
			fmt.Fprintf(e.stderr, "image/%s not removed: %s\n", f[0], f[1])
		}
		if res.Orphans > 0 {
			fmt.Fprintf(e.stdout, "%d unnamed image trees removed\n", res.Orphans)
		}
		if len(res.Offloaded) == 0 && len(res.Failed) == 0 && res.Orphans == 0 {
			fmt.Fprintf(e.stdout, "nothing to remove (over budget: %v)\n", res.Pressure)
		} else {
			fmt.Fprintf(e.stdout, "%d bytes freed\n", res.FreedBytes)
		}
		return nil
	case "list", "ls":
		if err := e.parseNone(e.flagSet("image list"), rest); err != nil {
			return err
		}
		return e.listImages(ctx, "")
	case "pin", "unpin":
		pos, err := e.parse(e.flagSet("image "+sub), rest)
		if err != nil {
			return err
		}
		if len(pos) == 0 {
			return usagef("missing image NAME")
		}
		c, err := e.client()
		if err != nil {
			return err
		}
		for _, name := range pos {
			if _, err := c.PinImage(ctx, name, sub == "pin"); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "image/%s %sned\n", name, sub)
		}
		return nil
	case "delete", "rm":
		pos, err := e.parse(e.flagSet("image delete"), rest)
		if err != nil {
			return err
		}
		return e.deleteImages(ctx, pos)
	case "-h", "--help", "help":
		return errHelp
	}
	return usagef("unknown subcommand %q (want import, pull, sweep, list, pin, unpin or delete)", sub)
}

// listImages prints the images (`get images`, `image list`), or only the
// one named name.
func (e *env) listImages(ctx context.Context, name string) error {
	c, err := e.client()
	if err != nil {
		return err
	}
	if e.structured() {
		return e.printItem(ctx, c, "/images", "images", "image", "name", name)
	}
	inv, err := c.Images(ctx)
	if err != nil {
		return err
	}
	list := inv.Images
	if name != "" {
		list = slices.DeleteFunc(list, func(im apitype.ImageView) bool { return im.Name != name })
		if len(list) == 0 {
			return fmt.Errorf("no image %q", name)
		}
	}
	if len(list) == 0 {
		fmt.Fprintln(e.stderr, "No images found.")
		return nil
	}
	tw := newTable(e.stdout)
	row(tw, "NAME", "DIGEST", "SIZE", "PINNED", "USED-BY", "LAST-USED")
	for _, im := range list {
		var users []string
		for _, r := range im.References {
			users = append(users, r.Kind+"/"+r.ID)
		}
		row(tw, im.Name, shortDigest(im.Digest), sizeString(im.Bytes), im.Pinned, orDash(strings.Join(users, ",")), stamp(&im.LastUsed))
	}
	return tw.Flush()
}

// deleteImages deletes images by name (`delete image`, `image delete`).
func (e *env) deleteImages(ctx context.Context, names []string) error {
	if len(names) == 0 {
		return usagef("missing image NAME")
	}
	c, err := e.client()
	if err != nil {
		return err
	}
	for _, name := range names {
		if err := c.DeleteImage(ctx, name); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "image/%s deleted\n", name)
	}
	return nil
}

// shortDigest is the first 12 hex digits of a digest, as docker shows.
func shortDigest(d string) string {
	h := strings.TrimPrefix(d, "sha256:")
	if len(h) > 12 {
		h = h[:12]
	}
	return h
}

// sizeString shows a byte count in binary units.
func sizeString(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// printImage prints an image an import or a pull produced: the document
// in a structured output, else one line saying what was done.
func (e *env) printImage(im *apitype.ImageView, done string) error {
	if e.structured() {
		b, err := json.Marshal(im)
		if err != nil {
			return err
		}
		return e.printDocs("image", []json.RawMessage{b}, false)
	}
	fmt.Fprintf(e.stdout, "image/%s %s (%s, %s)\n", im.Name, done, shortDigest(im.Digest), sizeString(im.Bytes))
	return nil
}
