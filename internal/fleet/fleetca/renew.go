package fleetca

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/secrets"
)

// Renewal's freshness window: a request's timestamp older than
// RenewMaxAge, or more than RenewClockSkew ahead of the first host's
// clock, is refused.
const (
	RenewMaxAge    = 5 * time.Minute
	RenewClockSkew = 30 * time.Second
)

// prevSuffix names the old host key while a renewal replaces it.
const prevSuffix = ".prev"

// matches reports whether k is crt's key.
func matches(crt *x509.Certificate, k *ecdsa.PrivateKey) bool {
	pub, ok := crt.PublicKey.(*ecdsa.PublicKey)
	return ok && k != nil && pub.Equal(&k.PublicKey)
}

// ErrRenewRefused wraps a renewal whose proof does not hold: a
// certificate not of the fleet CA or expired, a request for another host,
// a bad signature or a stale timestamp. The error's text says which.
var ErrRenewRefused = errors.New("fleetca: renewal refused")

// renewMessage is what a renewal's signature covers.
func renewMessage(csrDER []byte, ts int64) []byte {
	return append([]byte("berth fleet renew v1\n"+strconv.FormatInt(ts, 10)+"\n"), csrDER...)
}

func refuse(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrRenewRefused, fmt.Sprintf(format, a...))
}

// SignRenewal answers a joined host renewing its certificate (POST
// /fleet/renew on the first host): the presented certificate must chain
// to the fleet CA and be valid at now, its common name must be the
// request's, the signature by its key over the request and timestamp must
// verify, and the timestamp must be fresh (RenewMaxAge, RenewClockSkew).
// The new certificate is issued as Sign issues one, for the request's
// key. key is berth's secret key, which the CA key is sealed with.
func SignRenewal(dataDir string, key secrets.Key, req apitype.FleetRenewRequest, now time.Time) (apitype.FleetCertificate, error) {
	var none apitype.FleetCertificate
	csr, err := parseCSR(req.CSR)
	if err != nil {
		return none, err
	}
	var certs []*x509.Certificate
	rest := []byte(req.Chain)
	for {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			return none, fmt.Errorf("%w: chain: a PEM %q, want CERTIFICATE", ErrBadRequest, blk.Type)
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return none, fmt.Errorf("%w: chain: %v", ErrBadRequest, err)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return none, fmt.Errorf("%w: chain: want the current host certificate (PEM)", ErrBadRequest)
	}
	sig, err := base64.StdEncoding.DecodeString(req.Signature)
	if err != nil || len(sig) == 0 {
		return none, fmt.Errorf("%w: signature: want base64", ErrBadRequest)
	}
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
	// Freshness first: it costs nothing.
	ts := time.Unix(req.Timestamp, 0)
	if now.Sub(ts) > RenewMaxAge {
		return none, refuse("timestamp: %s is more than %s old", ts.UTC().Format(time.RFC3339), RenewMaxAge)
	}
	if ts.Sub(now) > RenewClockSkew {
		return none, refuse("timestamp: %s is in the future", ts.UTC().Format(time.RFC3339))
	}
	leaf := certs[0]
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return none, refuse("the presented certificate is not a valid one of this fleet's CA: %v", err)
	}
	id := csr.Subject.CommonName
	if leaf.Subject.CommonName != id {
		return none, refuse("the certificate request is for %q, the presented certificate for %q", id, leaf.Subject.CommonName)
	}
	if err := leaf.CheckSignature(x509.ECDSAWithSHA256, renewMessage(csr.Raw, req.Timestamp), sig); err != nil {
		return none, refuse("signature: not by the presented certificate's key over this request and timestamp: %v", err)
	}
	if revoked, err := IsRevoked(dataDir, leaf.SerialNumber); err != nil {
		return none, err
	} else if revoked {
		return none, refuse("the presented certificate of host %s is revoked (berth fleet revoke): re-join with a new token (berth fleet join --force)", id)
	}
	caKey, _, err := LoadCAKey(dataDir, key)
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
	return apitype.FleetCertificate{
		CA: string(certPEM(ca.Raw)), Certificate: string(certPEM(der)),
		Endpoints: c.Endpoints, HostID: id, NotAfter: crt.NotAfter.Unix(),
	}, nil
}

// parseCSR reads and checks a PEM certificate request whose common name
// is a host id.
func parseCSR(p string) (*x509.CertificateRequest, error) {
	blk, _ := pem.Decode([]byte(p))
	if blk == nil || blk.Type != "CERTIFICATE REQUEST" {
		return nil, fmt.Errorf("%w: csr: want a PEM CERTIFICATE REQUEST", ErrBadRequest)
	}
	csr, err := x509.ParseCertificateRequest(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: csr: %v", ErrBadRequest, err)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, fmt.Errorf("%w: csr: %v", ErrBadRequest, err)
	}
	if err := ValidHostID(csr.Subject.CommonName); err != nil {
		return nil, fmt.Errorf("%w: csr: %v", ErrBadRequest, err)
	}
	return csr, nil
}

// RenewOptions are berth fleet renew's.
type RenewOptions struct {
	DataDir string
	// Server is the first host's admin API URL; default the one the host
	// joined through (fleet.json's server). Given, it is kept there.
	Server string
	// Client makes the request; default one with a 30 s timeout.
	Client *http.Client
	Now    func() time.Time
}

// RenewResult is what a renewal received.
type RenewResult struct {
	HostID   string
	NotAfter time.Time
}

// Renew renews a joined host's certificate before it expires, with no
// join token: it makes a new key and a request for it, signs the request
// with the current certificate's key, and sends both with the current
// certificate to the first host (POST /fleet/renew). The answer must be a
// certificate of the CA this host already holds, for the new key and the
// same host id; the new key and certificate then replace the old ones
// (berth serve uses them on its next start).
func Renew(ctx context.Context, o RenewOptions) (RenewResult, error) {
	now := time.Now
	if o.Now != nil {
		now = o.Now
	}
	if o.DataDir == "" {
		return RenewResult{}, errors.New("fleetca: a data directory is required")
	}
	c, ok, err := LoadConfig(o.DataDir)
	if err != nil {
		return RenewResult{}, err
	}
	if !ok {
		return RenewResult{}, fmt.Errorf("fleetca: %s holds no fleet configuration: run berth fleet join first", o.DataDir)
	}
	if c.Member != nil {
		return RenewResult{}, fmt.Errorf("fleetca: %s is the fleet's first host: berth fleet init renews its certificate", o.DataDir)
	}
	server := o.Server
	if server == "" {
		server = c.Server
	}
	if server == "" {
		return RenewResult{}, fmt.Errorf("fleetca: --server URL (the first host's admin API) is required: %s names none (joined before berth kept it)", filepath.Join(Dir(o.DataDir), ConfigFile))
	}
	certFile, keyFile := Path(o.DataDir, c.Cert), Path(o.DataDir, c.Key)
	cur, err := readCert(certFile)
	if err != nil {
		return RenewResult{}, err
	}
	curKey, err := readKey(keyFile)
	if err != nil {
		return RenewResult{}, err
	}
	if !matches(cur, curKey) {
		// A renewal stopped between writing the new key and the new
		// certificate: the old key, kept aside, still matches.
		prev, perr := readKey(keyFile + prevSuffix)
		if perr != nil || !matches(cur, prev) {
			return RenewResult{}, fmt.Errorf("fleetca: %s is not for the key in %s: re-join with a new token (berth fleet join --force)", certFile, keyFile)
		}
		curKey = prev
	}
	if t := now(); t.After(cur.NotAfter) {
		return RenewResult{}, fmt.Errorf("fleetca: the host certificate %s expired at %s: it cannot renew itself; re-join with a new token (berth fleet join --force)", certFile, cur.NotAfter.UTC().Format(time.RFC3339))
	}
	ca, err := readCert(Path(o.DataDir, c.CA))
	if err != nil {
		return RenewResult{}, err
	}
	id := cur.Subject.CommonName
	key, err := newKey()
	if err != nil {
		return RenewResult{}, err
	}
	csrDER, err := x509.CreateCertificateRequest(nil, &x509.CertificateRequest{Subject: pkix.Name{CommonName: id}}, key)
	if err != nil {
		return RenewResult{}, fmt.Errorf("fleetca: %w", err)
	}
	ts := now().Unix()
	sum := sha256.Sum256(renewMessage(csrDER, ts))
	sig, err := ecdsa.SignASN1(rand.Reader, curKey, sum[:])
	if err != nil {
		return RenewResult{}, fmt.Errorf("fleetca: signing the renewal: %w", err)
	}
	body, _ := json.Marshal(apitype.FleetRenewRequest{
		Chain: string(certPEM(cur.Raw)), CSR: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: csrDER})),
		Timestamp: ts, Signature: base64.StdEncoding.EncodeToString(sig),
	})
	rb, err := post(ctx, o.Client, server, "/fleet/renew", body, "renewal")
	if err != nil {
		return RenewResult{}, err
	}
	var jr apitype.FleetCertificate
	if err := json.Unmarshal(rb, &jr); err != nil {
		return RenewResult{}, fmt.Errorf("fleetca: %s's answer: %w", server, err)
	}
	// The CA must be the one this host holds already.
	got, err := parseCertPEM([]byte(jr.CA))
	if err != nil || !bytes.Equal(got.Raw, ca.Raw) {
		return RenewResult{}, fmt.Errorf("fleetca: %s answered with another CA than this host's %s: refusing the renewal (a different fleet, or someone in between)", server, Path(o.DataDir, c.CA))
	}
	crt, err := parseCertPEM([]byte(jr.Certificate))
	if err != nil {
		return RenewResult{}, fmt.Errorf("fleetca: the certificate %s returned: %w", server, err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	if _, err := crt.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: now(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return RenewResult{}, fmt.Errorf("fleetca: the certificate %s returned is not the fleet CA's: %w", server, err)
	}
	if pub, ok := crt.PublicKey.(*ecdsa.PublicKey); !ok || !pub.Equal(&key.PublicKey) {
		return RenewResult{}, fmt.Errorf("fleetca: the certificate %s returned is not for the new key", server)
	}
	if err := CheckHostCert(crt, id); err != nil {
		return RenewResult{}, fmt.Errorf("fleetca: the certificate %s returned: %w", server, err)
	}
	keyB, err := keyPEM(key)
	if err != nil {
		return RenewResult{}, err
	}
	// The old key is kept aside until the new certificate is written, so
	// that a renewal stopped in between can be run again (above).
	oldB, err := keyPEM(curKey)
	if err != nil {
		return RenewResult{}, err
	}
	if err := writeFile(keyFile+prevSuffix, oldB, 0o600); err != nil {
		return RenewResult{}, err
	}
	if err := writeFile(keyFile, keyB, 0o600); err != nil {
		return RenewResult{}, err
	}
	if err := writeFile(certFile, certPEM(crt.Raw), 0o644); err != nil {
		return RenewResult{}, err
	}
	os.Remove(keyFile + prevSuffix)
	if srv := strings.TrimRight(o.Server, "/"); srv != "" && srv != c.Server {
		c.Server = srv
		if err := saveConfig(o.DataDir, c); err != nil {
			return RenewResult{}, err
		}
	}
	return RenewResult{HostID: id, NotAfter: crt.NotAfter}, nil
}

// RenewDue reports whether dataDir is a joined host whose certificate has
// less than a third of its lifetime left at now (berth serve then renews
// it), with the certificate's expiry.
func RenewDue(dataDir string, now time.Time) (bool, time.Time, error) {
	c, ok, err := LoadConfig(dataDir)
	if err != nil || !ok || c.Member != nil {
		return false, time.Time{}, err
	}
	crt, err := readCert(Path(dataDir, c.Cert))
	if err != nil {
		return false, time.Time{}, err
	}
	return NeedsRenewal(crt, now), crt.NotAfter, nil
}

// post sends body to server's path and returns the answer of a 200, or
// the error the server gave.
func post(ctx context.Context, hc *http.Client, server, path string, body []byte, what string) ([]byte, error) {
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, "POST", strings.TrimRight(server, "/")+path, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("fleetca: --server: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fleetca: reaching %s: %w", server, err)
	}
	defer resp.Body.Close()
	rb, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("fleetca: reading %s's answer: %w", server, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Message string `json:"message"`
			Error   string `json:"error"`
		}
		json.Unmarshal(rb, &e)
		msg := e.Message
		if msg == "" {
			msg = e.Error
		}
		if msg == "" {
			msg = strings.TrimSpace(string(rb))
		}
		return nil, fmt.Errorf("fleetca: %s refused the %s (%d): %s", server, what, resp.StatusCode, msg)
	}
	return rb, nil
}
