// Package demo sets up the deployments `berth serve --demo` starts with, so a
// newcomer sees traffic flowing through the gateway on the first command: a
// static deployment in front of a small built-in app, and a site.
package demo

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/berth-dev/berth/apitype"
)

//go:embed site
var siteFiles embed.FS

// App is the built-in demo upstream.
type App struct {
	Addr string
	srv  *http.Server
}

// StartApp serves a tiny HTTP app on a loopback port until Close.
func StartApp() (*App, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	a := &App{Addr: ln.Addr().String()}
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintf(w, "Hello from berth's demo app!\n\npath:            %s\nhost:            %s\nx-forwarded-for: %s\nserved at:       %s\n",
			r.URL.RequestURI(), r.Host, r.Header.Get("X-Forwarded-For"), time.Now().UTC().Format(time.RFC3339))
	})
	a.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go a.srv.Serve(ln)
	return a, nil
}

// Close stops the app.
func (a *App) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return a.srv.Shutdown(ctx)
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

// Specs returns the demo deployments: "hello" (static, every path) in front of
// the app at appAddr, and "docs" (a site under /site/).
func Specs(appAddr, siteRoot string) []apitype.DeploymentSpec {
	t := true
	return []apitype.DeploymentSpec{
		{
			ID:        "hello",
			Routes:    []apitype.RouteRule{{PathPrefix: "/"}},
			Upstreams: []string{appAddr},
		},
		{
			ID:     "docs",
			Routes: []apitype.RouteRule{{PathPrefix: "/site", StripPrefix: &t}},
			Site:   &apitype.SiteSpec{Root: siteRoot},
		},
	}
}
