// Package demo sets up the deployments `berth serve --demo` starts with, so a
// newcomer sees traffic flowing through the gateway on the first command: a
// static deployment in front of a small built-in app, and a site.
package demo

import (
	"context"
	"embed"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/berth-dev/berth/apitype"
)

//go:embed site
var siteFiles embed.FS

// RunApp serves the demo app on $PORT until ctx ends: what the demo vm
// deployment's replicas run (`berth demo-app`). It answers with the replica
// it runs in, so a newcomer can watch the pool scale.
func RunApp(ctx context.Context, stderr io.Writer) int {
	port := os.Getenv("PORT")
	if port == "" {
		fmt.Fprintln(stderr, "berth demo-app: PORT is not set")
		return 2
	}
	ln, err := net.Listen("tcp", "127.0.0.1:"+port)
	if err != nil {
		fmt.Fprintln(stderr, "berth demo-app:", err)
		return 1
	}
	started := time.Now()
	host, _ := os.Hostname()
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintf(w, "Hello from berth's demo app!\n\nreplica:         %s (pid %d, up %s)\npath:            %s\nx-forwarded-for: %s\n",
			host, os.Getpid(), time.Since(started).Round(time.Second), r.URL.RequestURI(), r.Header.Get("X-Forwarded-For"))
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	fmt.Fprintf(stderr, "demo app listening on %s\n", ln.Addr())
	if err := srv.Serve(ln); err != nil && err != http.ErrServerClosed {
		fmt.Fprintln(stderr, "berth demo-app:", err)
		return 1
	}
	return 0
}

// WriteSite copies the demo site's files into dir (created if missing) and
// returns dir.
func WriteSite(dir string) (string, error) {
	sub, err := fs.Sub(siteFiles, "site")
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	err = fs.WalkDir(sub, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			if d != nil && d.IsDir() && p != "." {
				return os.MkdirAll(filepath.Join(dir, p), 0o755)
			}
			return err
		}
		b, err := fs.ReadFile(sub, p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, p), b, 0o644)
	})
	return dir, err
}

// SiteRoot is where the "docs" site's files go under a server's sites
// directory: its managed root, <sitesDir>/default/docs.
func SiteRoot(sitesDir string) string { return filepath.Join(sitesDir, "default", "docs") }

// Specs returns the demo deployments: "hello", a vm deployment on the
// process driver that scales from zero on the first request and back to zero
// after a minute idle, running `<berth> demo-app`; and "docs", a site under
// /site/ with the managed root (see [SiteRoot]).
func Specs(berth string) []apitype.DeploymentSpec {
	t := true
	zero, maxR, idle := 0, 3, 60
	return []apitype.DeploymentSpec{
		{
			ID:     "hello",
			Routes: []apitype.RouteRule{{PathPrefix: "/"}},
			VM: &apitype.VmSpec{
				Driver:       apitype.DriverProcess,
				Port:         8080,
				StartCommand: "exec " + shellQuote(berth) + " demo-app",
			},
			Scaling: &apitype.ScalingPolicy{MinReplicas: &zero, MaxReplicas: &maxR, ScaleToZeroAfterSecs: &idle},
		},
		{
			ID:     "docs",
			Routes: []apitype.RouteRule{{PathPrefix: "/site", StripPrefix: &t}},
			Site:   &apitype.SiteSpec{},
		},
	}
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
