package build_test

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/berth-dev/berth/internal/build"
	"github.com/berth-dev/berth/internal/image"
)

// An image-build job: the deployment's BuildSpec and its resolved auth
// secret in, the image imported into berth's store, the JobRecord's
// fields (repo, ref, commit, dockerfile, image) and the run configuration
// out. jobLog appends to the job's log (app-lb keeps the last 400 lines).
func Example() {
	var (
		ctx     = context.Background()
		dataDir = "/var/lib/berth"
		images  *image.Store // berth's image store
		jobLog  = func(line string) {}
	)
	b := &build.Builder{WorkDir: filepath.Join(dataDir, "builds")}
	_ = b.Sweep() // at startup, before any build: what a crash left

	res, err := b.Build(ctx, build.Request{
		Repo:       "https://git.example.com/team/app.git", // BuildSpec.repo
		Ref:        "",                                     // BuildSpec.ref, or the POST body's {ref}
		Dockerfile: "",                                     // BuildSpec.dockerfile
		Context:    "",                                     // BuildSpec.context
		// BuildSpec.auth, resolved: the secret's key ("token") and username.
		Auth:  &build.Credential{Username: "", Token: "…"},
		Image: "app-build",
		Import: func(ctx context.Context, rootfs string) error {
			_, err := images.Import(ctx, "app-build", rootfs)
			return err
		},
	}, jobLog)
	if err != nil {
		// A *build.BuildError: Step and the last log lines; the job fails
		// with err.Error().
		return
	}
	fmt.Println(res.Repo, res.Ref, res.Commit, res.Dockerfile, res.Image)
	// res.Config: Entrypoint, Cmd, Env, WorkingDir, User and Port for the
	// deployment's vm spec.
}
