package cli

import (
	"context"
	"flag"
	"fmt"
	"net/http"

	"github.com/berth-dev/berth/apitype"
)

var scaleCmd = &command{
	name:    "scale",
	summary: "Change a vm deployment's scaling policy",
	help: `Usage: berth scale ID [--min N] [--max N] [--warm N] [--target-concurrency N]
                      [--scale-to-zero-after SECS] [--idle-action destroy|retain]

Change the scaling policy of a vm deployment. Only the flags given are
sent; the rest of the policy stays as it is. At least one is required.

Flags:
  --min N                    fewest replicas, even when idle
  --max N                    most replicas
  --warm N                   idle replicas kept booted beyond demand
  --target-concurrency N     in-flight requests per replica to aim for
  --scale-to-zero-after SECS idle seconds before a replica is retired
  --idle-action ACTION       what retiring does: destroy, or retain (stop, keep the disk)
`,
	run: runScale,
}

// scaleFlags maps each scale flag to its ScalingPolicy JSON key.
var scaleFlags = []struct{ flag, key string }{
	{"min", "min_replicas"},
	{"max", "max_replicas"},
	{"warm", "warm_pool"},
	{"target-concurrency", "target_concurrency"},
	{"scale-to-zero-after", "scale_to_zero_after_secs"},
}

func runScale(ctx context.Context, e *env, args []string) error {
	fs := e.flagSet("scale")
	ints := make(map[string]*int, len(scaleFlags))
	for _, f := range scaleFlags {
		ints[f.flag] = fs.Int(f.flag, 0, "")
	}
	idle := fs.String("idle-action", "", "")
	pos, err := e.parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("want exactly one deployment ID, got %d arguments", len(pos))
	}
	id := stripKind(pos[0])
	if id == "" {
		return usagef("empty deployment ID")
	}

	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	patch := map[string]any{}
	for _, f := range scaleFlags {
		if !set[f.flag] {
			continue
		}
		n := *ints[f.flag]
		if n < 0 {
			return usagef("--%s must not be negative", f.flag)
		}
		patch[f.key] = n
	}
	if set["idle-action"] {
		switch a := apitype.IdleAction(*idle); a {
		case apitype.IdleDestroy, apitype.IdleRetain:
			patch["idle_action"] = a
		default:
			return usagef("--idle-action must be destroy or retain, not %q", *idle)
		}
	}
	if len(patch) == 0 {
		return usagef("no scaling flags given")
	}

	c, err := e.client()
	if err != nil {
		return err
	}
	if e.structured() {
		return e.fetchAndPrint(ctx, c, http.MethodPatch, deploymentPath(id)+"/scaling", patch, nil)
	}
	st, err := c.PatchScaling(ctx, id, patch)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "deployment/%s scaled: %s\n", st.Spec.ID, scalingSummary(st.Spec.Scaling))
	return nil
}
