package cli

import (
	"context"
	"fmt"
)

var deleteCmd = &command{
	name:    "delete",
	summary: "Delete a deployment",
	help: `Usage: berth delete deployment ID
       berth delete deployment/ID

Delete a deployment: its routes stop matching and its VMs are torn down.
`,
	run: runDelete,
}

func runDelete(ctx context.Context, e *env, args []string) error {
	pos, err := e.parse(e.flagSet("delete"), args)
	if err != nil {
		return err
	}
	id, err := resourceID(pos, true)
	if err != nil {
		return err
	}
	c, err := e.client()
	if err != nil {
		return err
	}
	if err := c.Delete(ctx, id); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "deployment/%s deleted\n", id)
	return nil
}
