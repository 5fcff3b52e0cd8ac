package build

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/berth-dev/berth/internal/untar"
)

// maxDockerfile caps a recipe's Dockerfile.
const maxDockerfile = 1 << 20

// fetchRecipe writes a Recipe's Dockerfile next to (not in) a context
// directory holding its unpacked context tarball.
func fetchRecipe(ctx context.Context, dir string, r Recipe) (ctxDir, dockerfile string, err error) {
	df, ctxTar, err := r.Fetch(ctx)
	if ctxTar != nil {
		defer ctxTar.Close()
	}
	if err != nil {
		return "", "", err
	}
	if len(df) == 0 {
		return "", "", errors.New("the recipe has an empty Dockerfile")
	}
	if len(df) > maxDockerfile {
		return "", "", fmt.Errorf("the recipe's Dockerfile is over %d bytes", maxDockerfile)
	}
	recipe := filepath.Join(dir, "recipe")
	ctxDir = filepath.Join(recipe, "context")
	if err := os.MkdirAll(ctxDir, 0o755); err != nil {
		return "", "", err
	}
	dockerfile = filepath.Join(recipe, "Dockerfile")
	if err := os.WriteFile(dockerfile, df, 0o644); err != nil {
		return "", "", err
	}
	if ctxTar != nil {
		// Berth's one extractor, as for any tree berth's user reads:
		// directories, files and links only, with their permission bits;
		// a name that climbs out of the context is refused.
		if _, err := untar.Unpack(ctx, ctxTar, ctxDir, untar.Options{RefuseOutside: true}); err != nil {
			return "", "", fmt.Errorf("the recipe's context: %w", err)
		}
	}
	return ctxDir, dockerfile, nil
}
