// Package jobs runs berth's durable background jobs (app-lb.md §1.3 Jobs):
// at most one job per deployment at a time, each an apitype.JobRecord kept
// in the store from the moment it starts, so its log and outcome survive a
// restart. It also keeps the registered CI workflows and runs them
// (Workflows, below).
//
// # Records
//
// A job's record is inserted before Start returns (so a 202 names a job
// that exists), then rewritten as its log grows and its outcome fields are
// set: a per-job writer goroutine writes the newest snapshot whenever
// something changed, so lines that arrive while a write is syncing share
// the next one. The final record (status, finished_at, error) is committed
// before the job counts as finished: before the deployment may start
// another and before followers see it end. A record found "running" when
// the manager starts (berth crashed or was killed while it ran) is marked
// failed with an error saying so. The log keeps the last 400 lines; the
// history keeps 20 jobs per deployment and 2,000 in all, oldest pruned
// first (never a running one).
//
// # Adding a kind
//
// A kind is a Kind function registered under its apitype.JobKind:
//
//	m.Register(apitype.JobImageBuild, func(ctx context.Context, req jobs.Request) (jobs.Run, error) {
//		b := req.Deployment.Spec.Build
//		if b == nil {
//			return nil, jobs.Errorf(http.StatusBadRequest, "deployment %q has no build section", req.Deployment.ID)
//		}
//		// Decode req.Body ({ref?}) and check everything that can be
//		// checked now: an error here is the start route's answer and no
//		// job is recorded (a *jobs.Error sets the status; others are 400).
//		return func(ctx context.Context, j *jobs.Job) error {
//			j.Redact(token)                              // before anything could log it
//			j.Logf("cloning %s", b.Repo)                 // one line of the job's log
//			j.Set(func(r *apitype.JobRecord) { r.Repo = b.Repo })  // outcome fields
//			return nil                                   // nil: succeeded; an error: failed, with its message
//		}, nil
//	})
//
// The start routes (POST /deployments/{id}/build, /pull, /mounts/pull,
// /update) already call Manager.Start with their kind: registering it in
// the composition root (package server) is all a new kind needs; until
// then the route answers 501 naming the kind.
//
// Run's ctx is cancelled when berth shuts down and when the deployment is
// deleted (Cancel); a kind must stop promptly then, killing what it
// started. Secrets: a kind passes every secret value it holds to
// Job.Redact before logging anything; every log line and the final error
// are masked, so no value reaches the record or the database.
//
// # Workflows
//
// A workflow (apitype.WorkflowSpec) names a git repository, a ref and a
// path (a file or glob) of YAML files, each {steps: [{job, deployment,
// ref?, force?}]}, decoded strictly (an unknown key is refused, named) and
// concatenated in file-name order. Workflows.Run (POST
// /workflows/{id}/runs) runs an enabled workflow in a goroutine the
// Workflows owns: RunOptions.Checkout fetches the repository (in berth,
// build.Builder.Checkout, the image builder's git fetch and its policy),
// every step is checked (a kind this server runs, a deployment that
// exists), then each is started with Manager.Start, so it is an ordinary
// job with its record, and followed (Manager.Follow, no clock involved)
// to its end; the first failure fails the run and skips the rest. One
// run of a workflow at a time. A run (RunView) lives in memory only, the
// last DefaultKeepRuns of them; its jobs are durable. Close ends the
// running runs (Workflows.Close before Manager.Close). Tag-push triggers,
// runner networks and secrets_prefix are not offered: the last two are
// refused when set, not ignored.
package jobs
