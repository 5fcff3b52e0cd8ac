package cli

import (
	"context"
	"fmt"
)

var deleteCmd = &command{
	name:    "delete",
	summary: "Delete a deployment, or one of its VMs",
	help: `Usage: berth delete deployment ID
       berth delete deployment/ID
       berth delete vm SB -d DEPLOYMENT [--force]
       berth delete secret ID [-n NAMESPACE] [--force]
       berth delete namespace NAME

delete secret refuses while deployments reference the secret, unless
--force. delete namespace forgets a declared namespace that holds no
deployments.

Delete a deployment: its routes stop matching and its VMs are torn down.

delete vm removes one VM (sandbox SB) of a vm deployment. It stops taking
new requests and is killed once those in flight finish ("draining"), or
at once when idle or with --force ("killed"). The autoscaler replaces it
if the deployment still needs it.
`,
	run: runDelete,
}

func runDelete(ctx context.Context, e *env, args []string) error {
	if e.isVMResource(args) {
		return runDeleteVM(ctx, e, args)
	}
	if kind := accessResource(args); kind != "" {
		return runDeleteAccess(ctx, e, kind, args)
	}
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
