package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/berth-dev/berth/client"
)

var artifactCmd = &command{
	name:    "artifact",
	summary: "Push, fetch and list a namespace's artifacts",
	help: `Usage: berth artifact push FILE [--tag TAG] [-n NAMESPACE]
       berth artifact get REF [-o FILE] [-n NAMESPACE]
       berth artifact tags [--prefix P] [-n NAMESPACE] [--output json|yaml]

Artifacts are content-addressed blobs (a tarball a mount or a site bundle
unpacks, a rootfs, a Dockerfile manifest) in berth's own artifact store,
served per namespace at /namespaces/NAMESPACE/artifacts. A spec names them
with store: local and ref: TAG or a digest.

push uploads FILE and prints its sha256 digest; --tag also points TAG at it.
Pushing needs an admin credential for the whole namespace.

get writes the blob REF names (a tag, or a 64-hex digest) to FILE (-o; "-"
or none: standard output), checking the digest as it arrives.

tags lists the namespace's tags (those starting with --prefix).

-n defaults to the credential's namespace, else "default".
`,
	run: runArtifact,
}

func runArtifact(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 {
		return usagef("missing subcommand (push, get or tags)")
	}
	sub, rest := args[0], args[1:]
	fs := e.flagSet("artifact " + sub)
	ns := fs.String("namespace", "", "")
	fs.StringVar(ns, "n", "", "")
	switch sub {
	case "push":
		tag := fs.String("tag", "", "")
		pos, err := e.parse(fs, rest)
		if err != nil {
			return err
		}
		if len(pos) != 1 {
			return usagef("want one FILE")
		}
		c, n, err := e.artifactClient(ctx, *ns)
		if err != nil {
			return err
		}
		b, err := c.PushArtifactFile(ctx, n, pos[0])
		if err != nil {
			return err
		}
		if *tag != "" {
			if _, err := c.TagArtifact(ctx, n, *tag, b.Digest); err != nil {
				return err
			}
		}
		fmt.Fprintf(e.stdout, "sha256:%s\n", b.Digest)
		return nil
	case "get":
		// -o is the output file here, not the output format.
		out, rest := outputFile(rest)
		pos, err := e.parse(fs, rest)
		if err != nil {
			return err
		}
		if len(pos) != 1 {
			return usagef("want one REF (a tag or a digest)")
		}
		c, n, err := e.artifactClient(ctx, *ns)
		if err != nil {
			return err
		}
		return fetchArtifact(ctx, e, c, n, pos[0], out)
	case "tags":
		prefix := fs.String("prefix", "", "")
		pos, err := e.parse(fs, rest)
		if err != nil {
			return err
		}
		if len(pos) != 0 {
			return usagef("tags takes no arguments")
		}
		c, n, err := e.artifactClient(ctx, *ns)
		if err != nil {
			return err
		}
		tags, err := c.ArtifactTags(ctx, n, *prefix)
		if err != nil {
			return err
		}
		if e.structured() {
			return e.printValue("", tags)
		}
		tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "TAG\tDIGEST\tSIZE\tUPDATED")
		for _, t := range tags {
			fmt.Fprintf(tw, "%s\tsha256:%s\t%d\t%s\n", t.Tag, t.Digest, t.Size, t.UpdatedAt.Format(time.RFC3339))
		}
		return tw.Flush()
	}
	return usagef("unknown subcommand %q (push, get or tags)", sub)
}

// artifactClient returns the client and the namespace meant: -n, else the
// credential's own, else "default".
func (e *env) artifactClient(ctx context.Context, ns string) (*client.Client, string, error) {
	c, err := e.client()
	if err != nil {
		return nil, "", err
	}
	if ns != "" {
		return c, ns, nil
	}
	who, err := c.WhoAmI(ctx)
	if err != nil {
		return nil, "", err
	}
	if who.Namespace != "" {
		return c, who.Namespace, nil
	}
	return c, "default", nil
}

// fetchArtifact writes REF to file through a temporary file renamed into
// place once the digest checked out, so a failed get leaves no file that
// looks fetched.
func fetchArtifact(ctx context.Context, e *env, c *client.Client, ns, ref, file string) error {
	if file == "" || file == "-" {
		_, _, err := c.FetchArtifact(ctx, ns, ref, e.stdout)
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(file), "."+filepath.Base(file)+".part-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	d, n, err := c.FetchArtifact(ctx, ns, ref, tmp)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), file); err != nil {
		return err
	}
	fmt.Fprintf(e.stderr, "sha256:%s %d bytes -> %s\n", d, n, file)
	return nil
}

// outputFile takes -o/--output FILE (or -o=FILE) out of args: for get it
// names the file written, where every other command's -o is a format.
func outputFile(args []string) (string, []string) {
	var file string
	var rest []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			rest = append(rest, args[i:]...)
			break
		}
		switch {
		case a == "-o" || a == "--o" || a == "-output" || a == "--output":
			if i+1 < len(args) {
				file = args[i+1]
				i++
			}
		case strings.HasPrefix(a, "-o=") || strings.HasPrefix(a, "--o="):
			file = a[strings.Index(a, "=")+1:]
		case strings.HasPrefix(a, "-output=") || strings.HasPrefix(a, "--output="):
			file = a[strings.Index(a, "=")+1:]
		default:
			rest = append(rest, a)
		}
	}
	return file, rest
}
