package cli

import (
	"context"
	"fmt"
)

var deleteCmd = &command{
	name:    "delete",
	summary: "Delete a resource: deployment, vm, secret, namespace, token, image, computer",
	help: `Usage: berth delete deployment ID
       berth delete deployment/ID
       berth delete vm SB -d DEPLOYMENT [--force]
       berth delete secret ID [-n NAMESPACE] [--force]
       berth delete namespace NAME
       berth delete token ID...      (revokes them, as 'berth token revoke')
       berth delete image NAME...    (as 'berth image delete')
       berth delete computer ID      (as 'berth computer delete')

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
	return dispatch(ctx, e, "delete", args)
}

// deleteDeployment is delete deployment ID.
func deleteDeployment(ctx context.Context, e *env, args []string) error {
	id, c, err := e.deploymentClient("delete", args, true)
	if err != nil {
		return err
	}
	if err := c.Delete(ctx, id); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "deployment/%s deleted\n", id)
	return nil
}
