package cli

import (
	"archive/tar"
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// imageServer answers the image routes like berth does, recording the
// names of the files in uploaded tarballs.
func imageServer(t *testing.T) (*fakeServer, *[]string) {
	var mu sync.Mutex
	var files []string
	view := `{"name":"tiny","source":"upload","tier":"local","digest":"sha256:0123456789abcdef0123","store":"","ref":"","bytes":2048,"last_used":1767323045,"pinned":%s,"present":true,"references":[]}`
	mux := http.NewServeMux()
	mux.HandleFunc("POST /images", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("name") != "tiny" {
			writeJSON(w, 400, errJSON("name the image with ?name="))
			return
		}
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			writeJSON(w, 400, errJSON(err.Error()))
			return
		}
		tr := tar.NewReader(zr)
		for {
			h, err := tr.Next()
			if err != nil {
				break
			}
			mu.Lock()
			files = append(files, h.Name)
			mu.Unlock()
		}
		writeJSON(w, 201, strings.Replace(view, "%s", "false", 1))
	})
	mux.HandleFunc("GET /images", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, `{"generated_at":1767323045,"complete":true,"delete_supported":true,"offload":false,"disk_used_pct":1,"pressure_pct":0,"local_bytes":2048,"images":[`+
			strings.Replace(strings.Replace(view, "%s", "true", 1), `"references":[]`, `"references":[{"kind":"deployment","id":"web"}]`, 1)+`]}`)
	})
	mux.HandleFunc("PATCH /images/{name...}", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		writeJSON(w, 200, strings.Replace(view, "%s", strings.TrimSuffix(strings.TrimPrefix(string(b), `{"pinned":`), "}"), 1))
	})
	mux.HandleFunc("DELETE /images/{name...}", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("name") == "heyo/alpine:3.24" {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		writeJSON(w, 409, errJSON(`image "tiny" is in use by deployment web`))
	})
	srv := &fakeServer{Server: httptest.NewServer(mux), t: t}
	t.Cleanup(srv.Close)
	return srv, &files
}

func TestImageCommands(t *testing.T) {
	srv, files := imageServer(t)
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "bin"), 0o755)
	os.WriteFile(filepath.Join(dir, "bin", "app"), []byte("#!/bin/sh\n"), 0o755)
	os.Symlink("app", filepath.Join(dir, "bin", "sh"))

	r := run(t, srv, "", "image", "import", "tiny", dir)
	if r.code != 0 || !strings.Contains(r.stdout, "image/tiny imported (0123456789ab, 2.0 KiB)") {
		t.Errorf("import: %d %q %q", r.code, r.stdout, r.stderr)
	}
	if got := strings.Join(*files, " "); got != "bin/ bin/app bin/sh" {
		t.Errorf("uploaded tarball holds %q, want bin/ bin/app bin/sh", got)
	}

	r = run(t, srv, "", "image", "list")
	if r.code != 0 || !strings.Contains(r.stdout, "NAME") || !strings.Contains(r.stdout, "deployment/web") || !strings.Contains(r.stdout, "true") || !strings.Contains(r.stdout, "2026-01-02T03:04:05Z") {
		t.Errorf("list: %d %q %q", r.code, r.stdout, r.stderr)
	}
	r = run(t, srv, "", "image", "list", "-o", "json")
	if r.code != 0 || !strings.Contains(r.stdout, `"delete_supported": true`) {
		t.Errorf("list -o json: %d %q", r.code, r.stdout)
	}
	if r = run(t, srv, "", "image", "pin", "tiny"); r.code != 0 || r.stdout != "image/tiny pinned\n" {
		t.Errorf("pin: %d %q %q", r.code, r.stdout, r.stderr)
	}
	if r = run(t, srv, "", "image", "delete", "heyo/alpine:3.24"); r.code != 0 || r.stdout != "image/heyo/alpine:3.24 deleted\n" {
		t.Errorf("delete: %d %q %q", r.code, r.stdout, r.stderr)
	}
	if r = run(t, srv, "", "image", "delete", "tiny"); r.code != exitFailed || !strings.Contains(r.stderr, "in use by deployment web") {
		t.Errorf("delete in use: %d %q", r.code, r.stderr)
	}
	for _, args := range [][]string{{"image"}, {"image", "import", "tiny"}, {"image", "frob"}, {"image", "pin"}} {
		if r = run(t, srv, "", args...); r.code != exitUsage {
			t.Errorf("%v: exit %d, want %d", args, r.code, exitUsage)
		}
	}
	if r = run(t, srv, "", "image", "import", "tiny", filepath.Join(dir, "missing")); r.code != exitFailed {
		t.Errorf("import of a missing path: exit %d, want %d", r.code, exitFailed)
	}
}
