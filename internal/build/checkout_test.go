package build

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckout fetches a repository for a caller that only reads it:
// local with AllowLocal (refused without), over HTTP with a token that
// is in no log line or error, and the checkout is gone afterwards.
func TestCheckout(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	repo := t.TempDir()
	gitRun(t, repo, "init", "-q", "-b", "main")
	os.WriteFile(filepath.Join(repo, "w.yml"), []byte("steps: []\n"), 0o644)
	gitRun(t, repo, "add", ".")
	gitRun(t, repo, "commit", "-q", "-m", "one")
	head := gitRun(t, repo, "rev-parse", "HEAD")

	wd := t.TempDir()
	read := func(b *Builder, url string, auth *Credential, log *lines) (string, error) {
		var got string
		err := b.Checkout(t.Context(), url, "main", auth, log.add, func(root, commit string) error {
			bs, err := os.ReadFile(filepath.Join(root, "w.yml"))
			got = commit + " " + string(bs)
			return err
		})
		return got, err
	}
	var log lines
	if _, err := read(&Builder{WorkDir: wd}, repo, nil, &log); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "local repositories are not allowed") {
		t.Fatalf("local without AllowLocal: %v", err)
	}
	got, err := read(&Builder{WorkDir: wd, AllowLocal: true}, repo, nil, &log)
	if err != nil || got != head+" steps: []\n" {
		t.Fatalf("local: %q, %v\n%s", got, err, log.String())
	}
	emptyDir(t, wd)

	const token = "ghp_Zq9xSecretTok3n/+="
	url, authed := gitHTTPServer(t, repo, "bot", token)
	log = lines{}
	got, err = read(&Builder{WorkDir: wd, AllowHTTP: true}, url, &Credential{Username: "bot", Token: token}, &log)
	if err != nil || got != head+" steps: []\n" || authed.Load() == 0 || strings.Contains(log.String(), token) {
		t.Fatalf("http: %q, %v, %d authenticated\n%s", got, err, authed.Load(), log.String())
	}
	_, err = read(&Builder{WorkDir: wd, AllowHTTP: true}, url, &Credential{Username: "bot", Token: "wrong-" + token}, &log)
	if err == nil || strings.Contains(err.Error()+log.String(), token) {
		t.Fatalf("wrong token: %v\n%s", err, log.String())
	}
	emptyDir(t, wd)
}
