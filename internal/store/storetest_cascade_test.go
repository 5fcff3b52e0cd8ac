package store_test

import (
	"testing"

	"github.com/berth-dev/berth/internal/store/storetest"
)

// TestDeploymentCascadeSuite: a deployment's delete takes its pulls and
// rollouts with it.
func TestDeploymentCascadeSuite(t *testing.T) {
	storetest.RunDeploymentCascade(t, func(t *testing.T) storetest.CascadeBackend { return openSQLite(t) })
}
