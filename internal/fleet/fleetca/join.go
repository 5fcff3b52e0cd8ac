package fleetca

import (
	"context"
	"crypto/ecdsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
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
// checks the request's MAC under the join token it names and only then
// spends the token (ErrTokenInvalid for an unknown token and for a MAC
// that does not verify alike, ErrTokenUsed, ErrTokenExpired), signs
// req.CSR as a host certificate of the fleet CA for the host id the
// request names: client auth (etcd, the hop) and server auth (the hop),
// the host id its common name and its one subject alternative name; and
// seals the answer (the certificate, the CA, the endpoints and the
// fleet's secret key) for this request with the token (joinproto.go).
//
// key is berth's secret key, which the CA key and the tokens' keys are
// sealed with, and which the joining host receives.
func Sign(dataDir string, key secrets.Key, req apitype.FleetJoinRequest, now time.Time) (apitype.FleetJoinResponse, error) {
	var none apitype.FleetJoinResponse
	r, err := decodeJoinRequest(req)
	if err != nil {
		return none, err
	}
	csr, err := parseCSR(r.csr)
	if err != nil {
		return none, err
	}
	id := csr.Subject.CommonName
	c, ok, err := LoadConfig(dataDir)
	if err != nil {
		return none, err
	}
	if !ok || !IsAuthority(dataDir) {
		return none, errors.New("fleetca: this host holds no fleet CA")
	}
	ca, err := readCert(filepath.Join(Dir(dataDir), CACert))
	if err != nil {
		return none, err
	}
	caKey, _, err := LoadCAKey(dataDir, key)
	if err != nil {
		return none, err
	}
	root, err := useToken(dataDir, key, r, id, now)
	if err != nil {
		return none, err
	}
	der, err := issue(ca, caKey, csr.PublicKey, id, HostUsages, []string{id}, now)
	if err != nil {
		return none, fmt.Errorf("fleetca: signing: %w", err)
	}
	if err := recordIssued(dataDir, der, now); err != nil {
		return none, err
	}
	crt, _ := x509.ParseCertificate(der)
	return sealGrant(root, r, apitype.FleetJoinGrant{
		FleetCertificate: apitype.FleetCertificate{
			CA: string(certPEM(ca.Raw)), Certificate: string(certPEM(der)),
			Endpoints: c.Endpoints, HostID: id, NotAfter: crt.NotAfter.Unix(),
		},
		SecretKey: hex.EncodeToString(key[:]),
	})
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
	// holds (a new certificate from a new token), and a secret key other
	// than the fleet's.
	Force bool
	// SecretKey is BERTH_SECRET_KEY's value: when set it must be the
	// fleet's secret key, which the join receives.
	SecretKey string
	// Client makes the request; default one with a 30 s timeout.
	Client *http.Client
}

// JoinResult is what a host that joined received.
type JoinResult struct {
	HostID    string
	Endpoints []string
	NotAfter  time.Time
	// KeyFile is where the fleet's secret key was written
	// (<DataDir>/secret.key); ReplacedKey is true when it replaced another
	// key there (--force).
	KeyFile     string
	ReplacedKey bool
}

// Join makes this host's key, sends a certificate request for it to the
// init host with a MAC under the join token (which itself is not sent),
// opens the sealed answer with the token, checks the CA in it against the
// pin and the certificate against the CA and the key, and writes them
// with fleet.json into o.DataDir, and the fleet's secret key as the data
// dir's secret.key. The private key never leaves the host.
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
	req, open, err := NewJoinRequest(o.Token, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: csrDER})))
	if err != nil {
		return JoinResult{}, fmt.Errorf("fleetca: %w", err)
	}
	body, _ := json.Marshal(req)
	rb, err := post(ctx, o.Client, o.Server, "/fleet/join", body, "join")
	if err != nil {
		return JoinResult{}, err
	}
	var resp apitype.FleetJoinResponse
	if err := json.Unmarshal(rb, &resp); err != nil {
		return JoinResult{}, fmt.Errorf("fleetca: %s's answer: %w", o.Server, err)
	}
	jr, err := open(resp)
	if err != nil {
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
	fleetKey, replaced, err := checkFleetKey(o, jr.SecretKey)
	if err != nil {
		return JoinResult{}, err
	}
	keyB, err := keyPEM(key)
	if err != nil {
		return JoinResult{}, err
	}
	if err := secrets.WriteKeyFile(o.DataDir, fleetKey); err != nil {
		return JoinResult{}, fmt.Errorf("fleetca: the fleet's secret key: %w", err)
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
	return JoinResult{HostID: id, Endpoints: jr.Endpoints, NotAfter: crt.NotAfter, KeyFile: filepath.Join(o.DataDir, secrets.KeyFileName), ReplacedKey: replaced}, nil
}

// checkFleetKey decodes the fleet's secret key a join received and checks
// that this host may take it as its own: BERTH_SECRET_KEY, when set, must
// be it (berth serve would use that instead), and the data dir's
// secret.key, when there is one, must be it or be replaced with --force
// (replaced is then true).
func checkFleetKey(o JoinOptions, hexKey string) (k secrets.Key, replaced bool, err error) {
	raw, err := hex.DecodeString(hexKey)
	if err != nil || len(raw) != len(k) {
		return k, false, errors.New("fleetca: the answer to the join holds no fleet secret key (a first host older than this berth?): nothing was written")
	}
	k = secrets.Key(raw)
	path := filepath.Join(o.DataDir, secrets.KeyFileName)
	if o.SecretKey != "" {
		env, err := secrets.ParseKey(o.SecretKey)
		if err != nil {
			return k, false, fmt.Errorf("fleetca: BERTH_SECRET_KEY: %w", err)
		}
		if env != k {
			return k, false, fmt.Errorf("fleetca: BERTH_SECRET_KEY is set and is not the fleet's secret key, which sealed data on every host of the fleet must share: unset it (this host then uses %s, which the join writes) or set it to the first host's; nothing was written, and the join token is spent: make a new one with berth fleet init", path)
		}
	}
	have, ok, err := secrets.ReadKeyFile(o.DataDir)
	switch {
	case err != nil && !o.Force:
		return k, false, fmt.Errorf("fleetca: %w; give --force to replace it with the fleet's secret key (nothing was written, and the join token is spent: make a new one with berth fleet init)", err)
	case err != nil:
		return k, true, nil
	case ok && have != k && !o.Force:
		return k, false, fmt.Errorf("fleetca: %s holds another secret key than the fleet's: the secrets and keys this data dir sealed with it open with no other; give --force to replace it with the fleet's (what was sealed with the old key then no longer opens), or join from an empty data dir; nothing was written, and the join token is spent: make a new one with berth fleet init", path)
	}
	return k, ok && have != k, nil
}
