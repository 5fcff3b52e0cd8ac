package build

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/berth-dev/berth/internal/netguard"
)

// defaultUsername is the username sent with a token that has none.
const defaultUsername = "x-access-token"

// dnsTimeout bounds resolving the remote's host for the address check.
const dnsTimeout = 10 * time.Second

// askpassScript is the GIT_ASKPASS helper: git runs it with the prompt as
// its argument and reads the answer from its output. It holds no secret:
// it prints the one in the environment of the git process that runs it.
const askpassScript = `#!/bin/sh
case "$1" in
Username*) printf '%s\n' "$BERTH_GIT_USERNAME" ;;
*) printf '%s\n' "$BERTH_GIT_TOKEN" ;;
esac
`

// remote is a checked git remote.
type remote struct {
	url      string // what git is given
	scheme   string // "https", "http" or "file": GIT_ALLOW_PROTOCOL
	resolve  string // http.curloptResolve pinning the checked addresses, or ""
	redacted string // for logs
}

// checkRemote applies the builder's transport and address policy to repo.
func (b *Builder) checkRemote(ctx context.Context, repo string, auth *Credential) (remote, error) {
	refuse := func(format string, a ...any) (remote, error) {
		return remote{}, fmt.Errorf("%w: repository %q: %s", ErrRefused, redactURL(repo), fmt.Sprintf(format, a...))
	}
	if repo == "" || strings.HasPrefix(repo, "-") || strings.ContainsFunc(repo, func(r rune) bool { return unicode.IsControl(r) || unicode.IsSpace(r) }) {
		return refuse("not a URL")
	}
	if strings.HasPrefix(repo, "/") {
		// A local path. Given as a file:// URL, so git fetches it as any
		// remote (a plain path takes git's "local clone" shortcuts, which
		// hard-link objects and ignore --depth).
		if !b.AllowLocal {
			return refuse("local repositories are not allowed")
		}
		if auth != nil {
			return refuse("a credential is only for https remotes")
		}
		u := url.URL{Scheme: "file", Path: filepath.Clean(repo)}
		return remote{url: u.String(), scheme: "file", redacted: u.String()}, nil
	}
	// git's "transport::address" form (ext::, fd::) runs commands or
	// reads descriptors; the scp-like "host:path" form is ssh.
	if i := strings.Index(repo, "::"); i >= 0 && !strings.Contains(repo[:i], "/") {
		return refuse("the %s:: transport is not allowed", repo[:i])
	}
	u, err := url.Parse(repo)
	if err != nil || u.Scheme == "" {
		return refuse("not a URL with a scheme (https://…)")
	}
	switch s := strings.ToLower(u.Scheme); {
	case s == "https":
	case s == "http" && b.AllowHTTP:
	case s == "file" && b.AllowLocal:
		if auth != nil {
			return refuse("a credential is only for https remotes")
		}
		if u.Host != "" && u.Host != "localhost" {
			return refuse("a file:// URL names no host")
		}
		return remote{url: repo, scheme: "file", redacted: repo}, nil
	default:
		return refuse("the %s transport is not allowed (https only)", u.Scheme)
	}
	if u.User != nil {
		// It would be written to the checkout's config and show in
		// process listings; a credential is given as Auth.
		return refuse("credentials in the URL are not allowed: give them as the build's auth")
	}
	host := u.Hostname()
	if host == "" {
		return refuse("no host")
	}
	port := 443
	if strings.EqualFold(u.Scheme, "http") {
		port = 80
	}
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return refuse("bad port %q", p)
		}
		port = n
	}
	var addrs []netip.Addr
	literal := false
	if a, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		addrs, literal = []netip.Addr{a}, true
	} else {
		rctx, cancel := context.WithTimeout(ctx, dnsTimeout)
		addrs, err = net.DefaultResolver.LookupNetIP(rctx, "ip", host)
		cancel()
		if err != nil {
			return remote{}, fmt.Errorf("repository host %s: %w", host, err)
		}
		if len(addrs) == 0 {
			return remote{}, fmt.Errorf("repository host %s: no addresses", host)
		}
	}
	var pins []string
	for _, a := range addrs {
		a = a.Unmap().WithZone("")
		if why := netguard.Refuse(b.Self, b.AllowLinkLocal, netip.AddrPortFrom(a, uint16(port))); why != "" {
			return refuse("host %s address %s: %s", host, a, why)
		}
		if a.Is6() {
			pins = append(pins, "["+a.String()+"]")
		} else {
			pins = append(pins, a.String())
		}
	}
	r := remote{url: repo, scheme: strings.ToLower(u.Scheme), redacted: redactURL(repo)}
	if !literal {
		// git resolves the name again; pin it to what was checked, so a
		// second answer (DNS rebinding) cannot send git elsewhere.
		r.resolve = fmt.Sprintf("%s:%d:%s", host, port, strings.Join(pins, ","))
	}
	return r, nil
}

// checkRef refuses refs git could read as options or refspecs.
func checkRef(ref string) error {
	if ref == "" {
		return nil
	}
	if len(ref) > 256 || strings.HasPrefix(ref, "-") || strings.Contains(ref, "..") ||
		strings.ContainsAny(ref, ":^~?*[\\") ||
		strings.ContainsFunc(ref, func(r rune) bool { return unicode.IsControl(r) || unicode.IsSpace(r) }) {
		return fmt.Errorf("%w: ref %q is not a branch, tag or commit name", ErrRefused, ref)
	}
	return nil
}

// isHexPrefix reports whether ref could be an (abbreviated) commit hash.
func isHexPrefix(ref string) bool {
	if len(ref) < 4 || len(ref) > 64 {
		return false
	}
	for _, c := range ref {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// fetchGit checks out req's commit into src and returns its hash and the
// URL git fetched from (a local path as file://). It
// fetches only that commit (--depth 1) when the remote allows, and all
// branches when an abbreviated hash needs them.
func (b *Builder) fetchGit(ctx context.Context, dir, src string, req Request, lg *logger) (commit, repo string, err error) {
	if err := checkRef(req.Ref); err != nil {
		return "", "", err
	}
	if req.Auth != nil && req.Auth.Token == "" {
		return "", "", errors.New("the credential has no token")
	}
	rem, err := b.checkRemote(ctx, req.Repo, req.Auth)
	if err != nil {
		return "", "", err
	}
	gitBin, err := b.program(b.Git, "git")
	if err != nil {
		return "", "", err
	}
	home := filepath.Join(dir, "home")
	if err := os.Mkdir(home, 0o700); err != nil {
		return "", "", err
	}
	// Configuration through the environment (GIT_CONFIG_COUNT), not argv
	// or a file: no credential helper stores what askpass answers; no
	// redirects (they could lead to an address the check refused); a
	// stalled remote ends the fetch.
	cfg := [][2]string{
		{"credential.helper", ""},
		{"http.followRedirects", "false"},
		{"http.lowSpeedLimit", "1000"},
		{"http.lowSpeedTime", "60"},
		{"core.hooksPath", "/dev/null"},
		{"advice.detachedHead", "false"},
		{"init.defaultBranch", "main"},
	}
	if rem.resolve != "" {
		cfg = append(cfg, [2]string{"http.curloptResolve", rem.resolve})
	}
	env := []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + home, "LC_ALL=C",
		"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_TERMINAL_PROMPT=0",
		// Only the remote's own transport, for the fetch and anything it
		// leads to (submodules are not fetched at all).
		"GIT_ALLOW_PROTOCOL=" + rem.scheme,
		"GIT_CONFIG_COUNT=" + strconv.Itoa(len(cfg)),
	}
	for i, kv := range cfg {
		env = append(env, fmt.Sprintf("GIT_CONFIG_KEY_%d=%s", i, kv[0]), fmt.Sprintf("GIT_CONFIG_VALUE_%d=%s", i, kv[1]))
	}
	if req.Auth != nil {
		askpass := filepath.Join(dir, "askpass")
		if err := os.WriteFile(askpass, []byte(askpassScript), 0o700); err != nil {
			return "", "", err
		}
		user := req.Auth.Username
		if user == "" {
			user = defaultUsername
		}
		env = append(env, "GIT_ASKPASS="+askpass, "BERTH_GIT_USERNAME="+user, "BERTH_GIT_TOKEN="+req.Auth.Token)
	}
	git := func(args ...string) error {
		return run(ctx, lg, gitBin, args, env, "")
	}
	gitOut := func(args ...string) (string, error) {
		out, err := output(ctx, lg, gitBin, args, env, src)
		return strings.TrimSpace(out), err
	}

	if err := git("init", "-q", src); err != nil {
		return "", "", err
	}
	want := req.Ref
	if want == "" {
		want = "HEAD"
	}
	lg.line(fmt.Sprintf("fetching %s %s", rem.redacted, want))
	// The URL is given to fetch rather than added as a remote: nothing of
	// it is kept in the checkout's configuration.
	err = git("-C", src, "fetch", "--depth", "1", "--no-tags", "--", rem.url, want)
	if err == nil {
		if commit, err = gitOut("rev-parse", "--verify", "--end-of-options", "FETCH_HEAD^{commit}"); err == nil {
			return commit, rem.url, checkout(git, src, commit)
		}
	}
	if !isHexPrefix(req.Ref) {
		return "", "", err
	}
	// An abbreviated hash (or a remote that refuses to send a commit by
	// hash): fetch the branches and tags and look for it among them.
	lg.line("fetching all branches to find commit " + req.Ref)
	if err := git("-C", src, "fetch", "--no-tags", "--", rem.url, "+refs/heads/*:refs/remotes/origin/*", "+refs/tags/*:refs/tags/*"); err != nil {
		return "", "", err
	}
	commit, err = gitOut("rev-parse", "--verify", "--end-of-options", req.Ref+"^{commit}")
	if err != nil {
		return "", "", fmt.Errorf("commit %s is not on the remote's branches or tags: %w", req.Ref, err)
	}
	return commit, rem.url, checkout(git, src, commit)
}

func checkout(git func(...string) error, src, commit string) error {
	return git("-C", src, "checkout", "-q", "--detach", commit)
}

// dockerfileNames are looked for, in order, when a build names no
// Dockerfile: Docker's default, then Podman's and buildah's, then the
// lower-case spelling some repositories use.
var dockerfileNames = []string{"Dockerfile", "Containerfile", "dockerfile"}

// FindDockerfile resolves a build's context directory and Dockerfile in the
// checkout at root: contextDir and dockerfile are paths in the repository
// ("" for the root, and for discovery). A named Dockerfile is relative to
// the repository's root (as app-lb's build.dockerfile is); without one,
// the context directory and then the repository's root are searched for
// dockerfileNames. Both must stay inside the checkout, symbolic links
// followed. It returns host paths and the Dockerfile's repository path.
func FindDockerfile(root, contextDir, dockerfile string) (ctxPath, dfPath, dfRel string, err error) {
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return "", "", "", err
	}
	inside := func(what, rel string, wantDir bool) (string, error) {
		rel = filepath.FromSlash(strings.TrimPrefix(rel, "/"))
		if rel == "" {
			rel = "."
		}
		if !filepath.IsLocal(rel) {
			return "", fmt.Errorf("%w: %s %q leaves the repository", ErrRefused, what, rel)
		}
		p, err := filepath.EvalSymlinks(filepath.Join(realRoot, rel))
		if err != nil {
			return "", fmt.Errorf("%s %q: %w", what, filepath.ToSlash(rel), err)
		}
		if r, err := filepath.Rel(realRoot, p); err != nil || !filepath.IsLocal(r) && r != "." {
			return "", fmt.Errorf("%w: %s %q leads out of the repository", ErrRefused, what, filepath.ToSlash(rel))
		}
		fi, err := os.Stat(p)
		if err != nil {
			return "", err
		}
		if fi.IsDir() != wantDir {
			if wantDir {
				return "", fmt.Errorf("%s %q is not a directory", what, filepath.ToSlash(rel))
			}
			return "", fmt.Errorf("%s %q is not a file", what, filepath.ToSlash(rel))
		}
		return p, nil
	}
	ctxPath, err = inside("context", contextDir, true)
	if err != nil {
		return "", "", "", err
	}
	if dockerfile != "" {
		dfPath, err = inside("dockerfile", dockerfile, false)
		if err != nil {
			return "", "", "", err
		}
		return ctxPath, dfPath, filepath.ToSlash(filepath.Clean(strings.TrimPrefix(dockerfile, "/"))), nil
	}
	dirs := []string{contextDir}
	if c := filepath.Clean(strings.TrimPrefix(contextDir, "/")); c != "." && c != "" {
		dirs = append(dirs, "")
	}
	for _, d := range dirs {
		for _, n := range dockerfileNames {
			rel := filepath.Join(strings.TrimPrefix(d, "/"), n)
			if p, err := inside("dockerfile", rel, false); err == nil {
				return ctxPath, p, filepath.ToSlash(rel), nil
			} else if errors.Is(err, ErrRefused) {
				return "", "", "", err
			}
		}
	}
	return "", "", "", fmt.Errorf("no Dockerfile: none of %s in %q or the repository's root", strings.Join(dockerfileNames, ", "), contextDir)
}
