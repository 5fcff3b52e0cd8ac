package fleetca

import (
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berth-dev/berth/internal/secrets"
)

// Files of the revocation record (init host only).
const (
	// IssuedFile records every host certificate the CA issued (host id,
	// serial, expiry) and which are revoked: 0600, rewritten atomically
	// at every signing and revocation.
	IssuedFile = "issued.json"
	// CRLFile is the fleet CA's certificate revocation list, PEM.
	CRLFile = "crl.pem"
	// CRLDERFile is the same list in DER, the form etcd's
	// --client-crl-file and --peer-crl-file read.
	CRLDERFile = "crl.der"
)

// IssuedCert is one certificate of IssuedFile.
type IssuedCert struct {
	Host string `json:"host"`
	// Serial is the certificate's serial number, in decimal.
	Serial   string    `json:"serial"`
	IssuedAt time.Time `json:"issued_at"`
	NotAfter time.Time `json:"not_after"`
	// RevokedAt is set once the certificate is revoked.
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
	Reason    string     `json:"reason,omitempty"`
}

// issuedFile is IssuedFile's content.
type issuedFile struct {
	// CRLNumber is the number of the last CRL written.
	CRLNumber int64        `json:"crl_number"`
	Certs     []IssuedCert `json:"certs"`
}

var issuedMu sync.Mutex

// withIssued runs fn on the record under this process's lock and a flock
// on IssuedFile.lock (berth fleet revoke while berth serve signs), and
// writes what fn changed (write true, no error) atomically.
func withIssued(dataDir string, fn func(*issuedFile) (write bool, err error)) error {
	return withJSONFile(dataDir, IssuedFile, &issuedMu, func(f *issuedFile) (bool, error) {
		write, err := fn(f)
		return write && err == nil, err
	})
}

// recordIssued appends the certificate der to IssuedFile.
func recordIssued(dataDir string, der []byte, now time.Time) error {
	crt, err := x509.ParseCertificate(der)
	if err != nil {
		return fmt.Errorf("fleetca: %w", err)
	}
	return withIssued(dataDir, func(f *issuedFile) (bool, error) {
		f.Certs = append(f.Certs, IssuedCert{Host: crt.Subject.CommonName, Serial: crt.SerialNumber.String(), IssuedAt: now.UTC(), NotAfter: crt.NotAfter.UTC()})
		return true, nil
	})
}

// Issued lists the certificates IssuedFile records.
func Issued(dataDir string) ([]IssuedCert, error) {
	var out []IssuedCert
	err := withIssued(dataDir, func(f *issuedFile) (bool, error) {
		out = append(out, f.Certs...)
		return false, nil
	})
	return out, err
}

// IsRevoked reports whether the CA revoked the certificate with serial sn.
func IsRevoked(dataDir string, sn *big.Int) (bool, error) {
	var revoked bool
	err := withIssued(dataDir, func(f *issuedFile) (bool, error) {
		for _, c := range f.Certs {
			if c.RevokedAt != nil && c.Serial == sn.String() {
				revoked = true
			}
		}
		return false, nil
	})
	return revoked, err
}

// ErrUnknownHost is what Revoke wraps for a host id the CA issued no
// certificate to (as far as IssuedFile, kept since berth recorded them,
// knows).
var ErrUnknownHost = errors.New("fleetca: the fleet CA issued no certificate to this host")

// ErrRevokeSelf is what Revoke wraps for the CA host's own id.
var ErrRevokeSelf = errors.New("fleetca: the fleet's first host holds the CA and the etcd member: it cannot revoke its own certificate")

// RevokeResult is what Revoke did.
type RevokeResult struct {
	Host string
	// Serials are the host's certificates now revoked (decimal), the
	// ones revoked before included; Newly counts those revoked by this
	// call (0 when run again).
	Serials []string
	Newly   int
	// CRL is the CRL written (DER), CRLFile and CRLDERFile.
	CRL []byte
}

// Revoke revokes every certificate the fleet CA issued to host id (as
// IssuedFile records them) and writes the CRL, signed by the CA, to
// CRLFile (PEM) and CRLDERFile (DER). Revoking a host again changes
// nothing but the CRL's dates. A later join with the same id (with a new
// token) gets a new, unrevoked certificate.
func Revoke(dataDir string, key secrets.Key, id, reason string, now time.Time) (RevokeResult, error) {
	if err := ValidHostID(id); err != nil {
		return RevokeResult{}, fmt.Errorf("fleetca: %w", err)
	}
	if !IsAuthority(dataDir) {
		return RevokeResult{}, fmt.Errorf("fleetca: %s holds no fleet CA: revoke on the fleet's first host", dataDir)
	}
	if own, err := readCert(filepath.Join(Dir(dataDir), HostCert)); err == nil && own.Subject.CommonName == id {
		return RevokeResult{}, fmt.Errorf("%w (host %s)", ErrRevokeSelf, id)
	}
	caKey, _, err := LoadCAKey(dataDir, key)
	if err != nil {
		return RevokeResult{}, err
	}
	ca, err := readCert(filepath.Join(Dir(dataDir), CACert))
	if err != nil {
		return RevokeResult{}, err
	}
	res := RevokeResult{Host: id}
	err = withIssued(dataDir, func(f *issuedFile) (bool, error) {
		found := false
		for i := range f.Certs {
			c := &f.Certs[i]
			if c.Host != id {
				continue
			}
			found = true
			if c.RevokedAt == nil {
				t := now.UTC()
				c.RevokedAt, c.Reason = &t, reason
				res.Newly++
			}
			res.Serials = append(res.Serials, c.Serial)
		}
		if !found {
			return false, fmt.Errorf("%w: host %q", ErrUnknownHost, id)
		}
		f.CRLNumber++
		der, err := makeCRL(f, ca, caKey, now)
		if err != nil {
			return false, err
		}
		res.CRL = der
		return true, nil
	})
	if err != nil {
		return RevokeResult{}, err
	}
	return res, writeCRL(dataDir, res.CRL)
}

// makeCRL signs the CRL of f's revoked certificates.
func makeCRL(f *issuedFile, ca *x509.Certificate, caKey *ecdsa.PrivateKey, now time.Time) ([]byte, error) {
	tmpl := &x509.RevocationList{
		Number:     big.NewInt(f.CRLNumber),
		ThisUpdate: now.Add(-5 * time.Minute),
		// Revocation is permanent and the CRL is rewritten at each one:
		// it is good as long as the CA.
		NextUpdate: ca.NotAfter,
	}
	for _, c := range f.Certs {
		if c.RevokedAt == nil {
			continue
		}
		sn, ok := new(big.Int).SetString(c.Serial, 10)
		if !ok {
			return nil, fmt.Errorf("fleetca: %s: serial %q of host %s is not a number", IssuedFile, c.Serial, c.Host)
		}
		tmpl.RevokedCertificateEntries = append(tmpl.RevokedCertificateEntries, x509.RevocationListEntry{SerialNumber: sn, RevocationTime: *c.RevokedAt})
	}
	der, err := x509.CreateRevocationList(rand.Reader, tmpl, ca, caKey)
	if err != nil {
		return nil, fmt.Errorf("fleetca: signing the CRL: %w", err)
	}
	return der, nil
}

func writeCRL(dataDir string, der []byte) error {
	if err := writeFile(filepath.Join(Dir(dataDir), CRLDERFile), der, 0o644); err != nil {
		return err
	}
	return writeFile(filepath.Join(Dir(dataDir), CRLFile), pem.EncodeToMemory(&pem.Block{Type: "X509 CRL", Bytes: der}), 0o644)
}

// EnsureCRL, on the fleet's first host, writes the CRL (none revoked)
// when there is none yet, so that the embedded etcd member can be started
// with it and reads a later one at each new connection. It returns the
// DER file's path.
func EnsureCRL(dataDir string, key secrets.Key, now time.Time) (string, error) {
	path := filepath.Join(Dir(dataDir), CRLDERFile)
	if !IsAuthority(dataDir) {
		return "", errors.New("fleetca: this host holds no fleet CA")
	}
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	caKey, _, err := LoadCAKey(dataDir, key)
	if err != nil {
		return "", err
	}
	ca, err := readCert(filepath.Join(Dir(dataDir), CACert))
	if err != nil {
		return "", err
	}
	var der []byte
	err = withIssued(dataDir, func(f *issuedFile) (bool, error) {
		f.CRLNumber++
		var err error
		der, err = makeCRL(f, ca, caKey, now)
		return err == nil, err
	})
	if err != nil {
		return "", err
	}
	return path, writeCRL(dataDir, der)
}

// ReadCRL reads the CRL (DER) of dataDir's fleet directory; nil when
// there is none.
func ReadCRL(dataDir string) ([]byte, error) {
	b, err := os.ReadFile(filepath.Join(Dir(dataDir), CRLDERFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("fleetca: %w", err)
	}
	return b, nil
}

// Revocations is the set of revoked serials a host's hop consults on
// every handshake, replaced as a whole (Set) when a new CRL arrives. The
// zero value revokes nothing; it is safe for concurrent use.
type Revocations struct {
	set    atomic.Pointer[map[string]struct{}]
	number atomic.Pointer[big.Int]
}

// Set replaces the revoked serials with those of crl (DER or PEM), after
// checking its signature by the fleet CA ca. A CRL numbered lower than
// the one in use is refused (an old CRL replayed).
func (r *Revocations) Set(crl []byte, ca *x509.Certificate) error {
	if blk, _ := pem.Decode(crl); blk != nil {
		if blk.Type != "X509 CRL" {
			return fmt.Errorf("fleetca: CRL: a PEM %q, want X509 CRL", blk.Type)
		}
		crl = blk.Bytes
	}
	l, err := x509.ParseRevocationList(crl)
	if err != nil {
		return fmt.Errorf("fleetca: CRL: %w", err)
	}
	if err := l.CheckSignatureFrom(ca); err != nil {
		return fmt.Errorf("fleetca: CRL: not signed by the fleet CA: %w", err)
	}
	if cur := r.number.Load(); cur != nil && l.Number != nil && l.Number.Cmp(cur) < 0 {
		return fmt.Errorf("fleetca: CRL: number %s is older than the one in use (%s)", l.Number, cur)
	}
	m := make(map[string]struct{}, len(l.RevokedCertificateEntries))
	for _, e := range l.RevokedCertificateEntries {
		m[e.SerialNumber.String()] = struct{}{}
	}
	r.set.Store(&m)
	if l.Number != nil {
		r.number.Store(l.Number)
	}
	return nil
}

// Revoked reports whether crt's serial is revoked; a nil r revokes
// nothing.
func (r *Revocations) Revoked(crt *x509.Certificate) bool {
	if r == nil || crt == nil {
		return false
	}
	m := r.set.Load()
	if m == nil {
		return false
	}
	_, ok := (*m)[crt.SerialNumber.String()]
	return ok
}

// Len is the number of revoked serials.
func (r *Revocations) Len() int {
	if m := r.set.Load(); m != nil {
		return len(*m)
	}
	return 0
}
