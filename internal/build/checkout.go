package build

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
)

// Checkout fetches repo at ref with the builder's git fetch (the same
// transport and address policy, the credential through GIT_ASKPASS and
// redacted from every line logf gets) into a directory of its own under
// WorkDir, calls fn with the checkout's root and the commit's full hash,
// and removes the directory when fn returns. The fetch is bounded by
// DefaultFetchTimeout; fn by ctx only. Errors are redacted too.
func (b *Builder) Checkout(ctx context.Context, repo, ref string, auth *Credential, logf func(string), fn func(root, commit string) error) error {
	lg := newLogger(logf, auth)
	wd := b.WorkDir
	if wd == "" {
		wd = os.TempDir()
	}
	if err := os.MkdirAll(wd, 0o700); err != nil {
		return err
	}
	dir, err := os.MkdirTemp(wd, "checkout-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	src := filepath.Join(dir, "src")
	fctx, cancel := context.WithTimeout(ctx, DefaultFetchTimeout)
	commit, _, err := b.fetchGit(fctx, dir, src, Request{Repo: repo, Ref: ref, Auth: auth}, lg)
	cancel()
	if err != nil {
		return lg.redactErr(fmt.Errorf("fetching %s: %w", redactURL(repo), err))
	}
	return lg.redactErr(fn(src, commit))
}
