package etcdstore

import (
	"testing"

	"github.com/berth-dev/berth/internal/store/storetest"
)

// TestRolloutsSuite runs the rollouts suite on a real etcd member.
func TestRolloutsSuite(t *testing.T) {
	open, _ := openJobsSuite(t)
	storetest.RunRollouts(t, func(t *testing.T) storetest.RolloutsBackend { return open(t) })
}

// TestDeploymentCascadeSuite: DeleteDeployment does not delete the
// deployment's pulls and rollouts yet (doc.go); the cascade is added in
// deployments.go once every entity's keys are in, and then this runs.
func TestDeploymentCascadeSuite(t *testing.T) {
	t.Skip("DeleteDeployment does not cascade yet: pulls/<id>/ and rollouts/<id>/ outlive the deployment")
	open, _ := openJobsSuite(t)
	storetest.RunDeploymentCascade(t, func(t *testing.T) storetest.CascadeBackend { return open(t) })
}
