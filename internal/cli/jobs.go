package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/client"
)

var updateCmd = &command{
	name:    "update",
	summary: "Run a static or site deployment's host update (its update.commands) as a job",
	help: `Usage: berth update ID [--follow]

Start the deployment's host-update job: berth runs its update.commands in
update.working_dir on berth's host, then re-probes the deployment. The
server must run with --host-updates, and only a fleet-wide admin
credential may start one. Without --follow, print the job's id; with it,
print the job's log as it runs and exit non-zero if the job fails.

Flags:
  -f, --follow   print the job's log until it finishes
`,
	run: runUpdate,
}

func runUpdate(ctx context.Context, e *env, args []string) error {
	fs := e.flagSet("update")
	follow := fs.Bool("f", false, "")
	fs.BoolVar(follow, "follow", false, "")
	id, err := e.textDeployment("update", fs, args)
	if err != nil {
		return err
	}
	return e.startJob(ctx, *follow, func(c *client.Client) (*apitype.JobRecord, error) { return c.HostUpdate(ctx, id) })
}

var pullCmd = &command{
	name:    "pull",
	summary: "Pull a deployment's artifact (its image or site bundle) as a job",
	help: `Usage: berth pull ID [--ref REF] [--force] [--follow]

Start the deployment's artifact-pull job: berth resolves artifact.ref (or
--ref) through artifact.store, fetches and verifies the blob, and switches
the deployment to it. --force fetches it again even when the digest is
the one already pulled.

Flags:
      --ref REF  pull this tag or digest instead of artifact.ref
      --force    fetch even when nothing changed
  -f, --follow   print the job's log until it finishes
`,
	run: runPull,
}

func runPull(ctx context.Context, e *env, args []string) error {
	fs := e.flagSet("pull")
	follow := fs.Bool("f", false, "")
	fs.BoolVar(follow, "follow", false, "")
	ref := fs.String("ref", "", "")
	force := fs.Bool("force", false, "")
	id, err := e.textDeployment("pull", fs, args)
	if err != nil {
		return err
	}
	return e.startJob(ctx, *follow, func(c *client.Client) (*apitype.JobRecord, error) {
		return c.PullArtifact(ctx, id, client.PullOptions{Ref: *ref, Force: *force})
	})
}

var mountsCmd = &command{
	name:    "mounts",
	summary: "Pull a vm deployment's mounts (vm.mounts) as a job",
	help: `Usage: berth mounts pull ID [--force] [--follow]

Start the deployment's mount-pull job: for each of vm.mounts, berth
resolves ref through its store, fetches and verifies the tarball and
unpacks it into the tree the replicas mount read-only. A mount whose
digest changed recycles the deployment's replicas. Registering or
editing a deployment whose mounts are not pulled starts one by itself.
--force fetches every blob again even when its digest is unchanged.

Flags:
      --force    fetch even when nothing changed
  -f, --follow   print the job's log until it finishes
`,
	run: runMounts,
}

func runMounts(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 || args[0] != "pull" {
		return usagef("want: berth mounts pull ID [--force] [--follow]")
	}
	fs := e.flagSet("mounts pull")
	follow := fs.Bool("f", false, "")
	fs.BoolVar(follow, "follow", false, "")
	force := fs.Bool("force", false, "")
	id, err := e.textDeployment("mounts pull", fs, args[1:])
	if err != nil {
		return err
	}
	return e.startJob(ctx, *follow, func(c *client.Client) (*apitype.JobRecord, error) { return c.PullMounts(ctx, id, *force) })
}

var buildCmd = &command{
	name:    "build",
	summary: "Build a vm deployment's image from its build section as a job",
	help: `Usage: berth build ID [--ref REF] [--follow]

Start the deployment's image-build job: berth fetches build.repo at
build.ref (or --ref: a branch, tag or commit; for build.store, a tag or
digest of a Dockerfile manifest), builds the Dockerfile with buildah,
imports the result as an image and switches the deployment to it.
Registering or editing a deployment whose image is not built starts one
by itself.

Flags:
      --ref REF  build this ref instead of build.ref
  -f, --follow   print the job's log until it finishes
`,
	run: runBuild,
}

func runBuild(ctx context.Context, e *env, args []string) error {
	fs := e.flagSet("build")
	follow := fs.Bool("f", false, "")
	fs.BoolVar(follow, "follow", false, "")
	ref := fs.String("ref", "", "")
	id, err := e.textDeployment("build", fs, args)
	if err != nil {
		return err
	}
	return e.startJob(ctx, *follow, func(c *client.Client) (*apitype.JobRecord, error) { return c.Build(ctx, id, *ref) })
}

// startJob starts a job with start and, with follow, prints its log until
// it ends (failing when the job failed); without, prints its id.
func (e *env) startJob(ctx context.Context, follow bool, start func(*client.Client) (*apitype.JobRecord, error)) error {
	c, err := e.client()
	if err != nil {
		return err
	}
	rec, err := start(c)
	if err != nil {
		return err
	}
	if !follow {
		fmt.Fprintf(e.stdout, "job/%s started (berth logs job %s -f follows it)\n", rec.ID, rec.ID)
		return nil
	}
	fmt.Fprintf(e.stderr, "job/%s started\n", rec.ID)
	return e.followJob(ctx, c, rec.ID, true)
}

// followJob prints a job's log and fails when the job failed.
func (e *env) followJob(ctx context.Context, c *client.Client, id string, follow bool) error {
	st, msg, err := c.JobLog(ctx, id, follow, func(l string) { fmt.Fprintln(e.stdout, l) })
	if err != nil {
		return err
	}
	if st == apitype.JobFailed {
		return fmt.Errorf("job %s failed: %s", id, msg)
	}
	if follow && st == apitype.JobSucceeded {
		fmt.Fprintf(e.stderr, "job/%s succeeded\n", id)
	}
	return nil
}

// runJobLogs is `logs job ID [-f]`, pos being what follows "logs".
func runJobLogs(ctx context.Context, e *env, pos []string, follow bool) error {
	_, id, _ := strings.Cut(pos[0], "/")
	rest := pos[1:]
	if id == "" && len(rest) > 0 {
		id, rest = rest[0], rest[1:]
	}
	if id == "" || len(rest) > 0 {
		return usagef("want logs job ID [-f]")
	}
	c, err := e.client()
	if err != nil {
		return err
	}
	return e.followJob(ctx, c, id, follow)
}

// getJobs is `get jobs [-d DEPLOYMENT]` and `get job ID`.
func getJobs(ctx context.Context, e *env, args []string) error {
	fs := e.flagSet("get")
	dep := fs.String("d", "", "")
	fs.StringVar(dep, "deployment", "", "")
	pos, err := e.parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return usagef("missing resource type")
	}
	_, id, _ := strings.Cut(pos[0], "/")
	rest := pos[1:]
	if id == "" && len(rest) > 0 {
		id, rest = rest[0], rest[1:]
	}
	if len(rest) > 0 {
		return usagef("unexpected argument %q", rest[0])
	}
	if id != "" && *dep != "" {
		return usagef("get job ID takes no -d")
	}
	c, err := e.client()
	if err != nil {
		return err
	}
	path := "/jobs"
	switch {
	case id != "":
		path = "/jobs/" + url.PathEscape(id)
	case *dep != "":
		path = deploymentPath(*dep) + "/jobs"
	}
	var raw json.RawMessage
	if _, err := c.Do(ctx, "GET", path, nil, &raw); err != nil {
		return err
	}
	var recs []apitype.JobRecord
	if id != "" {
		var r apitype.JobRecord
		err = json.Unmarshal(raw, &r)
		recs = []apitype.JobRecord{r}
	} else {
		err = json.Unmarshal(raw, &recs)
	}
	if err != nil {
		return fmt.Errorf("unexpected reply to GET %s: %w", path, err)
	}
	if e.structured() {
		return e.printDocs("job", []json.RawMessage{raw}, false)
	}
	if len(recs) == 0 {
		fmt.Fprintln(e.stderr, "No jobs.")
		return nil
	}
	tw := newTable(e.stdout)
	head := []any{"ID", "DEPLOYMENT", "KIND", "STATUS", "AGE", "DURATION"}
	if e.output == "wide" {
		head = append(head, "ERROR")
	}
	row(tw, head...)
	now := time.Now().Unix()
	for _, r := range recs {
		dur := "-"
		if r.FinishedAt != nil {
			dur = age(int(*r.FinishedAt - r.StartedAt))
		}
		cols := []any{r.ID, r.Deployment, r.Kind, r.Status, age(int(now - r.StartedAt)), dur}
		if e.output == "wide" {
			msg := ""
			if r.Error != nil {
				msg = *r.Error
			}
			cols = append(cols, msg)
		}
		row(tw, cols...)
	}
	return tw.Flush()
}
