// Package fleetca is the fleet's certificate authority and its on-disk
// configuration (berth fleet init, berth fleet join): a fleet CA (ECDSA
// P-256) in <data-dir>/fleet, the init host's etcd server, peer and
// client certificate, one-time join tokens (kept as an id and a sealed
// key, never the token) with an expiry, the
// signing of a joining host's certificate request, and the fleet.json
// berth serve reads to run the embedded etcd member with mutual TLS or to
// reach the fleet's etcd over it.
//
// Layout of <data-dir>/fleet (0700):
//
//	ca.crt, ca.key       the fleet CA (init host only; the key 0600)
//	host.crt, host.key   this host's certificate and key (0600)
//	join-tokens.json     the join tokens' ids and sealed keys, their expiry and use (init host only)
//	issued.json          every host certificate the CA issued and which are revoked (init host only, 0600)
//	crl.pem, crl.der     the CA's revocation list, PEM and DER (init host only; berth fleet revoke)
//	fleet.json           what berth serve reads (Config)
package fleetca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Lifetimes of the certificates this package issues. A host certificate
// with less than a third of its lifetime left is renewed: the first
// host's by berth fleet init, a joined host's by berth fleet renew and
// berth serve (RenewDue, Renew). Nothing renews the CA.
const (
	CALifetime   = 10 * 365 * 24 * time.Hour
	HostLifetime = 365 * 24 * time.Hour
	// TokenLifetime is a join token's default lifetime.
	TokenLifetime = time.Hour
)

// File names in the fleet directory.
const (
	DirName    = "fleet"
	ConfigFile = "fleet.json"
	CACert     = "ca.crt"
	CAKey      = "ca.key"
	HostCert   = "host.crt"
	HostKey    = "host.key"
	TokensFile = "join-tokens.json"
)

// Dir is the fleet directory of a data directory.
func Dir(dataDir string) string { return filepath.Join(dataDir, DirName) }

// Config is fleet.json: how berth serve on this data directory joins the
// fleet. Paths are relative to the fleet directory unless absolute.
type Config struct {
	// Endpoints are the etcd client URLs (https).
	Endpoints []string `json:"endpoints"`
	CA        string   `json:"ca"`
	Cert      string   `json:"cert"`
	Key       string   `json:"key"`
	// Server, on a joined host, is the first host's admin API URL it
	// joined through: berth fleet renew and berth serve renew the host
	// certificate there (POST /fleet/renew).
	Server string `json:"server,omitempty"`
	// Member, on the init host, is the embedded etcd member berth serve
	// runs; nil on a host that joined.
	Member *Member `json:"member,omitempty"`
}

// Member is the embedded etcd member of the init host: it listens on
// ClientURL and PeerURL (https, client certificates of the fleet CA
// required on both).
type Member struct {
	Name      string `json:"name"`
	ClientURL string `json:"client_url"`
	PeerURL   string `json:"peer_url"`
}

// Path resolves a path of c against the fleet directory of dataDir.
func Path(dataDir, p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(Dir(dataDir), p)
}

// LoadConfig reads <dataDir>/fleet/fleet.json; ok is false when there is
// none (this berth was not set up with berth fleet init or join).
func LoadConfig(dataDir string) (c Config, ok bool, err error) {
	path := filepath.Join(Dir(dataDir), ConfigFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return Config{}, false, nil
	}
	if err != nil {
		return Config{}, false, fmt.Errorf("fleetca: %w", err)
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return Config{}, false, fmt.Errorf("fleetca: %s: %w", path, err)
	}
	if len(c.Endpoints) == 0 || c.CA == "" || c.Cert == "" || c.Key == "" {
		return Config{}, false, fmt.Errorf("fleetca: %s: endpoints, ca, cert and key are all required", path)
	}
	return c, true, nil
}

func saveConfig(dataDir string, c Config) error {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	return writeFile(filepath.Join(Dir(dataDir), ConfigFile), append(b, '\n'), 0o600)
}

// Fingerprint is the CA pin: the SHA-256 of a certificate's DER, as
// "sha256:" and lower-case hex.
func Fingerprint(der []byte) string {
	sum := sha256.Sum256(der)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// normPin accepts a pin with or without its sha256: prefix, any case and
// colons between bytes.
func normPin(p string) string {
	p = strings.ToLower(strings.TrimSpace(p))
	p = strings.TrimPrefix(p, "sha256:")
	return "sha256:" + strings.ReplaceAll(p, ":", "")
}

// CertInfo describes a certificate for berth fleet status.
type CertInfo struct {
	Path     string
	Subject  string
	NotAfter time.Time
}

// Status reads the certificates of dataDir's fleet directory.
func Status(dataDir string) (Config, []CertInfo, error) {
	c, ok, err := LoadConfig(dataDir)
	if err != nil {
		return Config{}, nil, err
	}
	if !ok {
		return Config{}, nil, fmt.Errorf("fleetca: %s holds no fleet configuration: run berth fleet init or berth fleet join", dataDir)
	}
	var out []CertInfo
	for _, p := range []string{c.CA, c.Cert} {
		crt, err := readCert(Path(dataDir, p))
		if err != nil {
			return Config{}, nil, err
		}
		out = append(out, CertInfo{Path: Path(dataDir, p), Subject: crt.Subject.CommonName, NotAfter: crt.NotAfter})
	}
	return c, out, nil
}

// --- key and certificate helpers

func newKey() (*ecdsa.PrivateKey, error) { return ecdsa.GenerateKey(elliptic.P256(), rand.Reader) }

func serial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

func keyPEM(k *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

func certPEM(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func readCert(path string) (*x509.Certificate, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("fleetca: %w", err)
	}
	return parseCertPEM(b)
}

func parseCertPEM(b []byte) (*x509.Certificate, error) {
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "CERTIFICATE" {
		return nil, errors.New("fleetca: no PEM certificate")
	}
	return x509.ParseCertificate(blk.Bytes)
}

func readKey(path string) (*ecdsa.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("fleetca: %w", err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, fmt.Errorf("fleetca: %s holds no PEM key", path)
	}
	return x509.ParseECPrivateKey(blk.Bytes)
}

// writeFile writes atomically with mode perm (the temporary file is made
// with it, so a key is never readable by others, not even briefly).
func writeFile(path string, b []byte, perm os.FileMode) error {
	tmp := path + ".tmp"
	os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return fmt.Errorf("fleetca: %w", err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		os.Remove(tmp)
		return fmt.Errorf("fleetca: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(tmp)
		return fmt.Errorf("fleetca: %w", err)
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("fleetca: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("fleetca: %w", err)
	}
	return nil
}

func mkdir(dataDir string) error {
	if err := os.MkdirAll(Dir(dataDir), 0o700); err != nil {
		return fmt.Errorf("fleetca: %w", err)
	}
	return os.Chmod(Dir(dataDir), 0o700)
}

// sans splits hosts into the IP and DNS subject alternative names.
func sans(hosts []string) (ips []net.IP, dns []string) {
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			ips = append(ips, ip)
		} else if h != "" {
			dns = append(dns, h)
		}
	}
	return ips, dns
}

// ValidHostID mirrors etcdfleet's rule for host ids (1 to 63 of
// [A-Za-z0-9._-], starting with a letter or digit), which a certificate's
// common name carries.
func ValidHostID(id string) error {
	if id == "" || len(id) > 63 {
		return fmt.Errorf("host id %q: want 1 to 63 characters", id)
	}
	for i, r := range id {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || i > 0 && (r == '-' || r == '_' || r == '.')
		if !ok {
			return fmt.Errorf("host id %q: want letters, digits, '-', '_' and '.', starting with a letter or digit", id)
		}
	}
	return nil
}

// hostIDFile is where berth serve keeps this host's fleet id.
const hostIDFile = "host-id"

// loadOrMakeHostID reads <dataDir>/host-id or, when there is none, writes
// id (or one made from the host name) there.
func loadOrMakeHostID(dataDir, id string) (string, error) {
	path := filepath.Join(dataDir, hostIDFile)
	if b, err := os.ReadFile(path); err == nil {
		have := strings.TrimSpace(string(b))
		if id != "" && id != have {
			return "", fmt.Errorf("fleetca: --host-id %s contradicts the id %s kept in %s", id, have, path)
		}
		return have, ValidHostID(have)
	}
	if id == "" {
		name, _ := os.Hostname()
		name = strings.Map(func(r rune) rune {
			if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.' {
				return r
			}
			return '-'
		}, name)
		if len(name) > 40 {
			name = name[:40]
		}
		if name == "" || ValidHostID(name) != nil {
			name = "host"
		}
		var rnd [4]byte
		rand.Read(rnd[:])
		id = name + "-" + hex.EncodeToString(rnd[:])
	}
	if err := ValidHostID(id); err != nil {
		return "", fmt.Errorf("fleetca: %w", err)
	}
	return id, writeFile(path, []byte(id+"\n"), 0o600)
}

// issue signs a certificate for pub with the CA.
func issue(ca *x509.Certificate, caKey *ecdsa.PrivateKey, pub any, cn string, usage []x509.ExtKeyUsage, hosts []string, now time.Time) ([]byte, error) {
	sn, err := serial()
	if err != nil {
		return nil, err
	}
	ips, dns := sans(hosts)
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		Subject:      pkix.Name{CommonName: cn, Organization: []string{"berth fleet"}},
		NotBefore:    now.Add(-5 * time.Minute), NotAfter: now.Add(HostLifetime),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: usage, IPAddresses: ips, DNSNames: dns,
	}
	if tmpl.NotAfter.After(ca.NotAfter) {
		tmpl.NotAfter = ca.NotAfter
	}
	return x509.CreateCertificate(rand.Reader, tmpl, ca, pub, caKey)
}
