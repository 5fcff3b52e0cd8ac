package hop

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/fleet/fleetca"
	"github.com/berth-dev/berth/internal/secrets"
)

// testFleet is a fleet CA made by fleetca.Init, its first host ids[0], and
// the others' certificates signed as POST /fleet/join signs them.
type testFleet struct {
	cfg map[string]Config
	pem map[string][2][]byte // the joined hosts' certificate and key
	dir string
}

func newFleet(tb testing.TB, ids ...string) *testFleet {
	tb.Helper()
	return newFleetAt(tb, tb.TempDir(), ids...)
}

// newFleetAt is newFleet with the first host's data directory d.
func newFleetAt(tb testing.TB, d string, ids ...string) *testFleet {
	tb.Helper()
	r, err := fleetca.Init(fleetca.InitOptions{DataDir: d, Advertise: "127.0.0.1:23790", HostID: ids[0]})
	if err != nil {
		tb.Fatal(err)
	}
	fd := fleetca.Dir(d)
	first, err := ConfigFromFiles(filepath.Join(fd, fleetca.CACert), filepath.Join(fd, fleetca.HostCert), filepath.Join(fd, fleetca.HostKey), "")
	if err != nil {
		tb.Fatal(err)
	}
	f := &testFleet{cfg: map[string]Config{ids[0]: first}, pem: map[string][2][]byte{}, dir: d}
	tok := r.Token
	for i, id := range ids[1:] {
		if i > 0 {
			r, err := fleetca.Init(fleetca.InitOptions{DataDir: d})
			if err != nil {
				tb.Fatal(err)
			}
			tok = r.Token
		}
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			tb.Fatal(err)
		}
		csr, err := x509.CreateCertificateRequest(nil, &x509.CertificateRequest{Subject: pkix.Name{CommonName: id}}, key)
		if err != nil {
			tb.Fatal(err)
		}
		req, open, err := fleetca.NewJoinRequest(tok, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: csr})))
		if err != nil {
			tb.Fatal(err)
		}
		sealed, err := fleetca.Sign(d, mustSecretKey(tb, d), req, time.Now())
		if err != nil {
			tb.Fatal(err)
		}
		resp, err := open(sealed)
		if err != nil {
			tb.Fatal(err)
		}
		kder, _ := x509.MarshalECPrivateKey(key)
		pair, err := tls.X509KeyPair([]byte(resp.Certificate), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}))
		if err != nil {
			tb.Fatal(err)
		}
		f.cfg[id] = Config{HostID: id, Cert: pair, CAs: first.CAs}
		f.pem[id] = [2][]byte{[]byte(resp.Certificate), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})}
	}
	return f
}

// serve runs a hop server for host id of f in front of h on a loopback
// port and returns its address.
func (f *testFleet) serve(tb testing.TB, id string, h http.Handler, mod func(*Config)) string {
	tb.Helper()
	c := f.cfg[id]
	if mod != nil {
		mod(&c)
	}
	s, err := NewServer(ServerConfig{Config: c, Handler: h})
	if err != nil {
		tb.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(l) }()
	tb.Cleanup(func() {
		s.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			tb.Errorf("hop server: %v", err)
		}
	})
	return l.Addr().String()
}

func (f *testFleet) transport(tb testing.TB, id string, mod func(*Config)) *Transport {
	tb.Helper()
	c := f.cfg[id]
	if mod != nil {
		mod(&c)
	}
	t, err := NewTransport(c)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(t.CloseIdleConnections)
	return t
}

// mustSecretKey is the secret key of data dir d (its secret.key), which
// seals its fleet CA key.
func mustSecretKey(tb testing.TB, d string) secrets.Key {
	tb.Helper()
	k, _, err := secrets.LoadKey("", d)
	if err != nil {
		tb.Fatal(err)
	}
	return k
}
