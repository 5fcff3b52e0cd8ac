package fleetca

import (
	"context"
	"crypto/ecdsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/secrets"
)

// ErrBadRequest wraps a join request that is malformed (as opposed to
// one whose token is refused).
var ErrBadRequest = errors.New("fleetca: bad join request")

// Sign answers a joining host (POST /fleet/join on the init host): it
// spends req.Token (ErrTokenInvalid, ErrTokenUsed, ErrTokenExpired) and
// signs req.CSR as a host certificate of the fleet CA for the host id the
// request names: client auth (etcd, the hop) and server auth (the hop),
// the host id its common name and its one subject alternative name.
//
// key is berth's secret key, which the CA key is sealed with.
func Sign(dataDir string, key secrets.Key, req apitype.FleetJoinRequest, now time.Time) (apitype.FleetJoinResponse, error) {
	csr, err := parseCSR(req.CSR)
	if err != nil {
		return apitype.FleetJoinResponse{}, err
	}
	id := csr.Subject.CommonName
	c, ok, err := LoadConfig(dataDir)
	if err != nil {
		return apitype.FleetJoinResponse{}, err
	}
	if !ok || !IsAuthority(dataDir) {
		return apitype.FleetJoinResponse{}, errors.New("fleetca: this host holds no fleet CA")
	}
	ca, err := readCert(filepath.Join(Dir(dataDir), CACert))
	if err != nil {
		return apitype.FleetJoinResponse{}, err
	}
	caKey, _, err := LoadCAKey(dataDir, key)
	if err != nil {
		return apitype.FleetJoinResponse{}, err
	}
	if err := useToken(dataDir, req.Token, id, now); err != nil {
		return apitype.FleetJoinResponse{}, err
	}
	der, err := issue(ca, caKey, csr.PublicKey, id, HostUsages, []string{id}, now)
	if err != nil {
		return apitype.FleetJoinResponse{}, fmt.Errorf("fleetca: signing: %w", err)
	}
	crt, _ := x509.ParseCertificate(der)
	return apitype.FleetJoinResponse{
		CA: string(certPEM(ca.Raw)), Certificate: string(certPEM(der)),
		Endpoints: c.Endpoints, HostID: id, NotAfter: crt.NotAfter.Unix(),
	}, nil
}

// JoinOptions are berth fleet join's.
type JoinOptions struct {
	DataDir string
	// Server is the init host's admin API URL.
	Server string
	Token  string
	// Pin is the fleet CA's fingerprint (sha256:HEX) berth fleet init
	// printed: the CA the server returns must match it.
	Pin string
	// HostID is this host's fleet id; default the one kept in
	// <DataDir>/host-id, made on first use.
	HostID string
	// Force replaces a fleet configuration the data directory already
	// holds (a new certificate from a new token).
	Force bool
	// Client makes the request; default one with a 30 s timeout.
	Client *http.Client
}

// JoinResult is what a host that joined received.
type JoinResult struct {
	HostID    string
	Endpoints []string
	NotAfter  time.Time
}

// Join makes this host's key, sends a certificate request for it with
// the join token to the init host, checks the CA it returns against the
// pin and the certificate against the CA and the key, and writes them
// with fleet.json into o.DataDir. The private key never leaves the host.
func Join(ctx context.Context, o JoinOptions) (JoinResult, error) {
	switch {
	case o.DataDir == "":
		return JoinResult{}, errors.New("fleetca: a data directory is required")
	case o.Server == "":
		return JoinResult{}, errors.New("fleetca: --server URL (the first host's admin API) is required")
	case o.Token == "":
		return JoinResult{}, errors.New("fleetca: --token is required")
	case o.Pin == "":
		return JoinResult{}, errors.New("fleetca: --ca-sha256 is required: the fleet CA's fingerprint berth fleet init printed")
	}
	pin := normPin(o.Pin)
	if len(pin) != len("sha256:")+64 {
		return JoinResult{}, fmt.Errorf("fleetca: --ca-sha256 %q: want sha256: and 64 hex digits", o.Pin)
	}
	if _, ok, err := LoadConfig(o.DataDir); err != nil && !o.Force {
		return JoinResult{}, err
	} else if ok && !o.Force {
		return JoinResult{}, fmt.Errorf("fleetca: %s already holds a fleet configuration (%s); give --force to replace it", o.DataDir, filepath.Join(Dir(o.DataDir), ConfigFile))
	}
	if IsAuthority(o.DataDir) {
		return JoinResult{}, fmt.Errorf("fleetca: %s holds the fleet CA (berth fleet init): it is the fleet's first host and joins nothing", o.DataDir)
	}
	if err := mkdir(o.DataDir); err != nil {
		return JoinResult{}, err
	}
	id, err := loadOrMakeHostID(o.DataDir, o.HostID)
	if err != nil {
		return JoinResult{}, err
	}
	key, err := newKey()
	if err != nil {
		return JoinResult{}, err
	}
	csrDER, err := x509.CreateCertificateRequest(nil, &x509.CertificateRequest{Subject: pkix.Name{CommonName: id}}, key)
	if err != nil {
		return JoinResult{}, fmt.Errorf("fleetca: %w", err)
	}
	body, _ := json.Marshal(apitype.FleetJoinRequest{Token: o.Token, CSR: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: csrDER}))})
	rb, err := post(ctx, o.Client, o.Server, "/fleet/join", body, "join")
	if err != nil {
		return JoinResult{}, err
	}
	var jr apitype.FleetJoinResponse
	if err := json.Unmarshal(rb, &jr); err != nil {
		return JoinResult{}, fmt.Errorf("fleetca: %s's answer: %w", o.Server, err)
	}
	// Trust nothing of the answer before the CA matches the pin.
	ca, err := parseCertPEM([]byte(jr.CA))
	if err != nil {
		return JoinResult{}, fmt.Errorf("fleetca: the CA %s returned: %w", o.Server, err)
	}
	if got := Fingerprint(ca.Raw); got != pin {
		return JoinResult{}, fmt.Errorf("fleetca: the fleet CA %s returned has fingerprint %s, not the pinned %s: refusing to join (a different fleet, or someone in between)", o.Server, got, pin)
	}
	crt, err := parseCertPEM([]byte(jr.Certificate))
	if err != nil {
		return JoinResult{}, fmt.Errorf("fleetca: the certificate %s returned: %w", o.Server, err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	if _, err := crt.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return JoinResult{}, fmt.Errorf("fleetca: the certificate %s returned is not the fleet CA's: %w", o.Server, err)
	}
	if pub, ok := crt.PublicKey.(*ecdsa.PublicKey); !ok || !pub.Equal(&key.PublicKey) {
		return JoinResult{}, fmt.Errorf("fleetca: the certificate %s returned is not for this host's key", o.Server)
	}
	if len(jr.Endpoints) == 0 {
		return JoinResult{}, fmt.Errorf("fleetca: %s returned no etcd endpoints", o.Server)
	}
	for _, e := range jr.Endpoints {
		if !strings.HasPrefix(e, "https://") {
			return JoinResult{}, fmt.Errorf("fleetca: %s returned etcd endpoint %q: want https://", o.Server, e)
		}
	}
	keyB, err := keyPEM(key)
	if err != nil {
		return JoinResult{}, err
	}
	d := Dir(o.DataDir)
	if err := writeFile(filepath.Join(d, HostKey), keyB, 0o600); err != nil {
		return JoinResult{}, err
	}
	if err := writeFile(filepath.Join(d, HostCert), certPEM(crt.Raw), 0o644); err != nil {
		return JoinResult{}, err
	}
	if err := writeFile(filepath.Join(d, CACert), certPEM(ca.Raw), 0o644); err != nil {
		return JoinResult{}, err
	}
	if err := saveConfig(o.DataDir, Config{Endpoints: jr.Endpoints, CA: CACert, Cert: HostCert, Key: HostKey, Server: strings.TrimRight(o.Server, "/")}); err != nil {
		return JoinResult{}, err
	}
	return JoinResult{HostID: id, Endpoints: jr.Endpoints, NotAfter: crt.NotAfter}, nil
}
