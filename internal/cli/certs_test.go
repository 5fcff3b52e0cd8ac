package cli

import (
	"encoding/pem"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestGetCertsOverTLS: `get certs` lists the certificates and, after them,
// the routed hosts without one; against an https server it verifies the
// certificate: refused without the CA, accepted with --ca-file or --insecure-skip-tls-verify; a --ca-file that is not
// there is a usage error naming the flag.
func TestGetCertsOverTLS(t *testing.T) {
	t.Setenv("BERTH_CONFIG", filepath.Join(t.TempDir(), "config.json"))
	mux := http.NewServeMux()
	mux.HandleFunc("GET /certs", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, `[{"host":"a.example","not_after":"2027-03-01T00:00:00Z","issuer":"Pebble Intermediate CA","needs_renewal":false}]`)
	})
	mux.HandleFunc("GET /certs/pending", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, `[{"host":"b.example","state":"backoff","retry_at":1767323045,"failures":2,"last_error":"connection refused"}]`)
	})
	ts := httptest.NewUnstartedServer(mux)
	ts.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes
	ts.StartTLS()
	defer ts.Close()
	srv := &fakeServer{Server: ts, t: t}
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}

	if r := run(t, srv, "", "get", "certs"); r.code != exitFailed || !strings.Contains(r.stderr, "certificate") {
		t.Errorf("get certs against an unknown CA = %d, %q; want a failure about the certificate", r.code, r.stderr)
	}
	r := run(t, srv, "", "get", "certs", "--ca-file", ca)
	if r.code != exitOK {
		t.Fatalf("get certs --ca-file = %d: %s", r.code, r.stderr)
	}
	for _, want := range []string{"HOST", "a.example", "2027-03-01T00:00:00Z", "Pebble Intermediate CA", "WITHOUT-CERT", "b.example", "backoff", "connection refused"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("get certs output lacks %q:\n%s", want, r.stdout)
		}
	}
	if r := run(t, srv, "", "--ca-file", ca, "get", "cert", "b.example"); r.code != exitOK || strings.Contains(r.stdout, "a.example") || !strings.Contains(r.stdout, "b.example") {
		t.Errorf("get cert b.example = %d, %q, %q", r.code, r.stdout, r.stderr)
	}
	if r := run(t, srv, "", "--insecure-skip-tls-verify", "get", "certs", "-o", "json"); r.code != exitOK || !strings.Contains(r.stdout, `"needs_renewal": false`) {
		t.Errorf("get certs --insecure-skip-tls-verify -o json = %d, %q, %q", r.code, r.stdout, r.stderr)
	}
	if r := run(t, srv, "", "get", "certs", "--ca-file", filepath.Join(t.TempDir(), "missing.pem")); r.code != exitUsage || !strings.Contains(r.stderr, "--ca-file") {
		t.Errorf("get certs with a missing --ca-file = %d, %q; want a usage error naming --ca-file", r.code, r.stderr)
	}
}
