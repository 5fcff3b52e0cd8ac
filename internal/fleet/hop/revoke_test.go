package hop

import (
	"context"
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
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET: %s", resp.Status)
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
	rv := new(fleetca.Revocations)
	eachProtocol(t, func(t *testing.T, mod func(*Config), proto string) {
		withRV := func(c *Config) { mod(c); c.Revoked = rv }
		alphaAddr := f.serve(t, "alpha", echo, withRV)
		betaAddr := f.serve(t, "beta", echo, mod)
		gammaAddr := f.serve(t, "gamma", echo, withRV)
		if rv.Len() == 0 {
			// Before the revocation, beta passes both ways.
			if err := get(t, f.transport(t, "beta", mod), "alpha", alphaAddr); err != nil {
				t.Fatalf("beta to alpha before the revocation: %v", err)
			}
			if err := get(t, f.transport(t, "alpha", withRV), "beta", betaAddr); err != nil {
				t.Fatalf("alpha to beta before the revocation: %v", err)
			}
			r, err := fleetca.Revoke(f.dir, mustSecretKey(t, f.dir), "beta", "test", time.Now())
			if err != nil {
				t.Fatal(err)
			}
			if err := rv.Set(r.CRL, ca); err != nil {
				t.Fatal(err)
			}
		}
		// The server refuses the revoked client.
		err := get(t, f.transport(t, "beta", mod), "alpha", alphaAddr)
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
