package hop

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/fleet/fleetca"
)

// get sends GET / to peer id at addr over tr.
func get(t *testing.T, tr *Transport, id, addr string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(WithPeer(context.Background(), id), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "https://"+addr+"/", nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, resp.Body) // the connection is kept for the next
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET: %s", resp.Status)
	}
	return nil
}

// TestHopRefusesRevoked: once the CRL revoking beta is set (after the
// servers started: it applies to the next connections), alpha's hop
// server refuses beta's client certificate and alpha's client refuses
// beta's server certificate, over real TLS on loopback; gamma, unrevoked,
// still hops both ways.
func TestHopRefusesRevoked(t *testing.T) {
	f := newFleet(t, "alpha", "beta", "gamma")
	ca, err := fleetca.LoadCACert(filepath.Join(fleetca.Dir(f.dir), fleetca.CACert))
	if err != nil {
		t.Fatal(err)
	}
	eachProtocol(t, func(t *testing.T, mod func(*Config), proto string) {
		rv := new(fleetca.Revocations)
		withRV := func(c *Config) { mod(c); c.Revoked = rv }
		alphaAddr := f.serve(t, "alpha", echo, withRV)
		betaAddr := f.serve(t, "beta", echo, mod)
		gammaAddr := f.serve(t, "gamma", echo, withRV)
		// Connections made before the revocation, kept alive.
		betaOld, alphaOld := f.transport(t, "beta", mod), f.transport(t, "alpha", withRV)
		if err := get(t, betaOld, "alpha", alphaAddr); err != nil {
			t.Fatalf("beta to alpha before the revocation: %v", err)
		}
		if err := get(t, alphaOld, "beta", betaAddr); err != nil {
			t.Fatalf("alpha to beta before the revocation: %v", err)
		}
		// Revoked (again, for the second protocol: idempotent).
		r, err := fleetca.Revoke(f.dir, mustSecretKey(t, f.dir), "beta", "test", time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if err := rv.Set(r.CRL, ca); err != nil {
			t.Fatal(err)
		}
		// Even on a connection made before, no further request passes.
		if err := get(t, betaOld, "alpha", alphaAddr); err == nil || !strings.Contains(err.Error(), "403") {
			t.Errorf("revoked beta's kept connection to alpha: %v, want 403", err)
		}
		if err := get(t, alphaOld, "beta", betaAddr); err == nil || !strings.Contains(err.Error(), "revoked") {
			t.Errorf("alpha's kept connection to revoked beta: %v, want refused as revoked", err)
		}
		// The server refuses the revoked client.
		err = get(t, f.transport(t, "beta", mod), "alpha", alphaAddr)
		if err == nil {
			t.Error("alpha's hop server accepted beta's revoked client certificate")
		}
		// The client refuses the revoked server.
		err = get(t, f.transport(t, "alpha", withRV), "beta", betaAddr)
		if err == nil || !strings.Contains(err.Error(), "revoked") {
			t.Errorf("alpha's client to revoked beta: %v, want refused as revoked", err)
		}
		// Unrevoked hosts still hop, both ways.
		if err := get(t, f.transport(t, "gamma", withRV), "alpha", alphaAddr); err != nil {
			t.Errorf("gamma to alpha: %v", err)
		}
		if err := get(t, f.transport(t, "alpha", withRV), "gamma", gammaAddr); err != nil {
			t.Errorf("alpha to gamma: %v", err)
		}
	})
}
