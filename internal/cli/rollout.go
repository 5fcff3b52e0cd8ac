package cli

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/berth-dev/berth/apitype"
)

var rolloutCmd = &command{
	name:    "rollout",
	summary: "Show or undo a vm deployment's candidate-first rollouts",
	help: `Usage: berth rollout status ID
       berth rollout history ID
       berth rollout undo ID [--operation-id OP]

A change of a vm deployment's replica template (berth apply, a PUT, POST
/deployments/ID/rollouts) is a rollout: the replicas keep serving while
candidates of the new template boot, and drain once the candidates pass
their health probe (health.expected_header included). A candidate that
fails stops the rollout and puts the previous spec back.

  status   the newest rollout: its operation, status, phase and error
  history  the rollouts berth keeps for the deployment, newest first
  undo     roll back to the spec the current revision replaced, as a new
           rollout (berth keeps the last 20 operations' specs)

-o json and -o yaml print the server's reply as received.
`,
	run: runRollout,
}

func runRollout(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 {
		return usagef("missing subcommand: status, history or undo")
	}
	sub, rest := args[0], args[1:]
	fs := e.flagSet("rollout " + sub)
	opID := fs.String("operation-id", "", "")
	pos, err := e.parse(fs, rest)
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
	if sub != "undo" && *opID != "" {
		return usagef("--operation-id is for rollout undo")
	}
	c, err := e.client()
	if err != nil {
		return err
	}
	switch sub {
	case "status":
		if e.structured() {
			return e.fetchAndPrint(ctx, c, "GET", deploymentPath(id)+"/rollouts?limit=1", nil, nil)
		}
		ops, err := c.Rollouts(ctx, id, 1)
		if err != nil {
			return err
		}
		if len(ops) == 0 {
			fmt.Fprintf(e.stdout, "deployment/%s has had no rollout\n", id)
			return nil
		}
		printRollout(e.stdout, &ops[0])
	case "history":
		if e.structured() {
			return e.fetchAndPrint(ctx, c, "GET", deploymentPath(id)+"/rollouts", nil, nil)
		}
		ops, err := c.Rollouts(ctx, id, 0)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "OPERATION\tSTATUS\tPHASE\tFROM\tTO\tERROR")
		for _, op := range ops {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", op.OperationID, op.Status, op.Phase, shortRev(op.SourceRevision), shortRev(op.TargetSpecSHA256), oneLine(deref(op.Error), 60))
		}
		tw.Flush()
	case "undo":
		if e.structured() {
			body := map[string]any{}
			if *opID != "" {
				body["operation_id"] = *opID
			}
			return e.fetchAndPrint(ctx, c, "POST", deploymentPath(id)+"/rollouts/undo", body, nil)
		}
		op, err := c.UndoRollout(ctx, id, *opID)
		if err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "deployment/%s rolling back to revision %s (operation %s, %s)\n", id, shortRev(op.TargetSpecSHA256), op.OperationID, op.Status)
	default:
		return usagef("unknown subcommand %q: want status, history or undo", sub)
	}
	return nil
}

// printRollout prints one operation for people.
func printRollout(w io.Writer, op *apitype.RolloutOperation) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	kv := func(k, v string) { fmt.Fprintf(tw, "%s:\t%s\n", k, v) }
	kv("Operation", op.OperationID)
	kv("Status", op.Status)
	kv("Phase", op.Phase)
	kv("From", op.SourceRevision)
	kv("To", op.TargetSpecSHA256)
	kv("Readiness verified", fmt.Sprint(op.ReadinessVerified))
	kv("Previous stopped", fmt.Sprint(op.PreviousStopped))
	if op.Error != nil && *op.Error != "" {
		kv("Error", *op.Error)
	}
	if len(op.FailureSettlement) > 0 {
		kv("Settlement", string(op.FailureSettlement))
	}
	tw.Flush()
}

func shortRev(r string) string {
	if len(r) > 12 {
		return r[:12]
	}
	return r
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func oneLine(s string, n int) string {
	if len(s) > n {
		return s[:n-1] + "…"
	}
	return s
}
