package fleetca

import (
	"crypto/ecdsa"
	"crypto/hmac"
	"crypto/rand"
	"crypto/subtle"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/berth-dev/berth/internal/secrets"
)

// InitOptions are berth fleet init's.
type InitOptions struct {
	DataDir string
	// Advertise is host:port of the embedded etcd member's client
	// listener, as the other hosts reach it; PeerAdvertise is its peer
	// listener's, default the same host and port+1.
	Advertise, PeerAdvertise string
	// HostID is this host's fleet id; default the one kept in
	// <DataDir>/host-id, made on first use.
	HostID string
	// TokenTTL is the printed join token's lifetime; default TokenLifetime.
	TokenTTL time.Duration
	// SecretKey is berth's secret key material (BERTH_SECRET_KEY), which
	// seals the CA key at rest; empty uses <DataDir>/secret.key, made on
	// first use, as berth serve does.
	SecretKey string
	Now       func() time.Time
}

// InitResult is what berth fleet init prints.
type InitResult struct {
	// Created is false when the data directory already held the fleet
	// (berth fleet init again only makes a new join token).
	Created bool
	// Renewed is true when this host's certificate was one issued before
	// the hop between hosts (ErrOldHostCert) and was renewed, for the same
	// key and names with the host id added, as a server and client
	// certificate, or had less than a third of its lifetime left and was
	// renewed for a new key: berth serve must be restarted to use it.
	Renewed bool
	// MigratedCAKey is true when the CA key was a plaintext one, as berth
	// wrote before sealing it, and is now sealed with the secret key.
	MigratedCAKey bool
	Token         string
	Expires       time.Time
	Pin           string
	Endpoints     []string
}

// Init makes the fleet CA and this host's certificate and fleet.json in
// o.DataDir, or, when they exist, keeps them; either way it adds a new
// join token.
func Init(o InitOptions) (InitResult, error) {
	now := time.Now
	if o.Now != nil {
		now = o.Now
	}
	if o.DataDir == "" {
		return InitResult{}, errors.New("fleetca: a data directory is required")
	}
	res := InitResult{}
	key, err := LoadSecretKey(o.SecretKey, o.DataDir)
	if err != nil {
		return InitResult{}, err
	}
	c, ok, err := LoadConfig(o.DataDir)
	if err != nil {
		return InitResult{}, err
	}
	if ok && c.Member == nil {
		return InitResult{}, fmt.Errorf("fleetca: %s joined a fleet (berth fleet join): it holds no fleet CA; run berth fleet init on the fleet's first host", o.DataDir)
	}
	if !ok {
		if c, err = create(o, key, now()); err != nil {
			return InitResult{}, err
		}
		res.Created = true
	} else if o.Advertise != "" && c.Member.ClientURL != "https://"+o.Advertise {
		return InitResult{}, fmt.Errorf("fleetca: %s already advertises its etcd member at %s; --advertise %s contradicts it", o.DataDir, c.Member.ClientURL, o.Advertise)
	}
	ca, err := readCert(filepath.Join(Dir(o.DataDir), CACert))
	if err != nil {
		return InitResult{}, err
	}
	if !res.Created {
		caKey, migrated, err := LoadCAKey(o.DataDir, key)
		if err != nil {
			return InitResult{}, err
		}
		res.MigratedCAKey = migrated
		if res.Renewed, err = renewOwn(o.DataDir, c, ca, caKey, now()); err != nil {
			return InitResult{}, err
		}
	}
	// The CRL, none revoked, for the embedded etcd member to start with
	// (it reads a later one at each new connection).
	if _, err := EnsureCRL(o.DataDir, key, now()); err != nil {
		return InitResult{}, err
	}
	ttl := o.TokenTTL
	if ttl == 0 {
		ttl = TokenLifetime
	}
	if res.Token, res.Expires, err = AddToken(o.DataDir, key, ttl, now()); err != nil {
		return InitResult{}, err
	}
	res.Pin, res.Endpoints = Fingerprint(ca.Raw), c.Endpoints
	return res, nil
}

// NeedsRenewal reports whether crt has less than a third of its lifetime
// left at now: berth fleet init renews the first host's then, berth fleet
// renew (and berth serve, daily) a joined host's.
func NeedsRenewal(crt *x509.Certificate, now time.Time) bool {
	life := crt.NotAfter.Sub(crt.NotBefore)
	return crt.NotAfter.Sub(now) < life/3
}

// renewOwn renews the first host's certificate when CheckHostCert finds
// it older than the hop between hosts (for the same key), or when it has
// less than a third of its lifetime left (for a new key), for the same
// names.
func renewOwn(dataDir string, c Config, ca *x509.Certificate, caKey *ecdsa.PrivateKey, now time.Time) (bool, error) {
	crt, err := readCert(Path(dataDir, c.Cert))
	if err != nil {
		return false, err
	}
	id := crt.Subject.CommonName
	old := errors.Is(CheckHostCert(crt, id), ErrOldHostCert)
	expiring := NeedsRenewal(crt, now)
	if !old && !expiring {
		return false, nil
	}
	hosts := []string{id}
	for _, ip := range crt.IPAddresses {
		hosts = append(hosts, ip.String())
	}
	hosts = append(hosts, crt.DNSNames...)
	pub := crt.PublicKey
	var newK *ecdsa.PrivateKey
	if expiring {
		if newK, err = newKey(); err != nil {
			return false, err
		}
		pub = &newK.PublicKey
	}
	der, err := issue(ca, caKey, pub, id, HostUsages, hosts, now)
	if err != nil {
		return false, fmt.Errorf("fleetca: renewing the host certificate: %w", err)
	}
	if newK != nil {
		kb, err := keyPEM(newK)
		if err != nil {
			return false, err
		}
		if err := writeFile(Path(dataDir, c.Key), kb, 0o600); err != nil {
			return false, err
		}
	}
	if err := writeFile(Path(dataDir, c.Cert), certPEM(der), 0o644); err != nil {
		return false, err
	}
	return true, recordIssued(dataDir, der, now)
}

func create(o InitOptions, key secrets.Key, now time.Time) (Config, error) {
	if o.Advertise == "" {
		return Config{}, errors.New("fleetca: --advertise HOST:PORT is required: the address the other hosts reach this host's etcd member at")
	}
	host, port, err := net.SplitHostPort(o.Advertise)
	if err != nil || host == "" {
		return Config{}, fmt.Errorf("fleetca: --advertise %q: want HOST:PORT", o.Advertise)
	}
	peer := o.PeerAdvertise
	if peer == "" {
		p, err := strconv.Atoi(port)
		if err != nil || p <= 0 || p >= 65535 {
			return Config{}, fmt.Errorf("fleetca: --advertise %q: bad port", o.Advertise)
		}
		peer = net.JoinHostPort(host, strconv.Itoa(p+1))
	}
	phost, _, err := net.SplitHostPort(peer)
	if err != nil || phost == "" {
		return Config{}, fmt.Errorf("fleetca: --peer-advertise %q: want HOST:PORT", peer)
	}
	if err := mkdir(o.DataDir); err != nil {
		return Config{}, err
	}
	id, err := loadOrMakeHostID(o.DataDir, o.HostID)
	if err != nil {
		return Config{}, err
	}
	// The CA.
	caKey, err := newKey()
	if err != nil {
		return Config{}, err
	}
	sn, err := serial()
	if err != nil {
		return Config{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: sn, Subject: pkix.Name{CommonName: "berth fleet CA", Organization: []string{"berth fleet"}},
		NotBefore: now.Add(-5 * time.Minute), NotAfter: now.Add(CALifetime),
		IsCA: true, BasicConstraintsValid: true, MaxPathLenZero: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return Config{}, fmt.Errorf("fleetca: CA: %w", err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	// This host's certificate: the etcd member's server and peer
	// certificate, the client certificate berth presents to it, and the
	// hop's (server and client, a subject alternative name of the host id).
	hostKey, err := newKey()
	if err != nil {
		return Config{}, err
	}
	hostDER, err := issue(ca, caKey, &hostKey.PublicKey, id,
		HostUsages,
		[]string{id, host, phost, "127.0.0.1", "::1", "localhost"}, now)
	if err != nil {
		return Config{}, fmt.Errorf("fleetca: host certificate: %w", err)
	}
	caKeyPEM, err := sealCAKey(caKey, key)
	if err != nil {
		return Config{}, err
	}
	hostKeyPEM, err := keyPEM(hostKey)
	if err != nil {
		return Config{}, err
	}
	d := Dir(o.DataDir)
	for _, f := range []struct {
		name string
		b    []byte
		perm os.FileMode
	}{
		{CAKey, caKeyPEM, 0o600}, {CACert, certPEM(caDER), 0o644},
		{HostKey, hostKeyPEM, 0o600}, {HostCert, certPEM(hostDER), 0o644},
	} {
		if err := writeFile(filepath.Join(d, f.name), f.b, f.perm); err != nil {
			return Config{}, err
		}
	}
	if err := recordIssued(o.DataDir, hostDER, now); err != nil {
		return Config{}, err
	}
	c := Config{
		Endpoints: []string{"https://" + o.Advertise}, CA: CACert, Cert: HostCert, Key: HostKey,
		Member: &Member{Name: id, ClientURL: "https://" + o.Advertise, PeerURL: "https://" + peer},
	}
	return c, saveConfig(o.DataDir, c)
}

// --- join tokens

// tokenRecord is a join token as the first host keeps it: its public id
// and its root key (tokenRoot) sealed with berth's secret key, never the
// token. Hash is the SHA-256 an older berth kept instead, which no
// request names any more: such a token is refused as unknown.
type tokenRecord struct {
	ID      string    `json:"id,omitempty"`
	Key     []byte    `json:"sealed_key,omitempty"`
	Hash    string    `json:"sha256,omitempty"`
	Expires time.Time `json:"expires"`
	Used    time.Time `json:"used,omitzero"`
	UsedBy  string    `json:"used_by,omitempty"`
}

// tokenKeyAD binds a token's sealed root key to its id.
func tokenKeyAD(id string) []byte { return []byte("berth fleet join token root v1\x00" + id) }

// Errors of a join token.
var (
	ErrTokenInvalid = errors.New("the join token is not one this fleet issued")
	ErrTokenUsed    = errors.New("the join token was already used (each is good for one host): make a new one with berth fleet init on the fleet's first host")
	ErrTokenExpired = errors.New("the join token has expired: make a new one with berth fleet init on the fleet's first host")
)

// mu serializes this process's token file changes; withJSONFile's flock
// serializes them with other processes (berth fleet init while berth
// serve runs).
var mu sync.Mutex

func withTokens(dataDir string, fn func([]tokenRecord) ([]tokenRecord, error)) error {
	return withJSONFile(dataDir, TokensFile, &mu, func(recs *[]tokenRecord) (bool, error) {
		out, err := fn(*recs)
		if out == nil {
			return false, err
		}
		*recs = out
		return true, err
	})
}

// withJSONFile runs fn on the JSON value of the fleet directory's file
// name (its zero value when there is none) under mu and a flock on
// name.lock, so that other processes (berth fleet init or revoke while
// berth serve runs) wait, and writes it back atomically (0600) when fn
// says so, returning fn's error after.
func withJSONFile[T any](dataDir, name string, mu *sync.Mutex, fn func(*T) (write bool, err error)) error {
	mu.Lock()
	defer mu.Unlock()
	d := Dir(dataDir)
	lf, err := os.OpenFile(filepath.Join(d, name+".lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("fleetca: %w", err)
	}
	defer lf.Close()
	if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("fleetca: %w", err)
	}
	defer syscall.Flock(int(lf.Fd()), syscall.LOCK_UN)
	path := filepath.Join(d, name)
	var v T
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		if err := json.Unmarshal(b, &v); err != nil {
			return fmt.Errorf("fleetca: %s: %w", path, err)
		}
	case !errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("fleetca: %w", err)
	}
	write, ferr := fn(&v)
	if !write {
		return ferr
	}
	b, err = json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if err := writeFile(path, append(b, '\n'), 0o600); err != nil {
		return err
	}
	return ferr
}

// AddToken makes a join token good for ttl from now and keeps its id and
// its root key, sealed with key (berth's secret key).
func AddToken(dataDir string, key secrets.Key, ttl time.Duration, now time.Time) (string, time.Time, error) {
	var rnd [32]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return "", time.Time{}, err
	}
	tok := "bfj_" + hex.EncodeToString(rnd[:])
	exp := now.Add(ttl).UTC().Truncate(time.Second)
	id := tokenID(tok)
	err := withTokens(dataDir, func(recs []tokenRecord) ([]tokenRecord, error) {
		// Forget tokens a day past their expiry.
		keep := recs[:0]
		for _, r := range recs {
			if now.Before(r.Expires.Add(24 * time.Hour)) {
				keep = append(keep, r)
			}
		}
		return append(keep, tokenRecord{ID: id, Key: key.Seal(tokenRoot(tok), tokenKeyAD(id)), Expires: exp}), nil
	})
	return tok, exp, err
}

// useToken spends the join token r names for host once r's MAC verifies
// under it, and returns its root key. An unknown id and a MAC that does
// not verify are the same ErrTokenInvalid, after the same work; a token
// is good once.
func useToken(dataDir string, key secrets.Key, r joinRequest, host string, now time.Time) ([]byte, error) {
	var root []byte
	err := withTokens(dataDir, func(recs []tokenRecord) ([]tokenRecord, error) {
		found := -1
		for i, rec := range recs {
			if rec.ID != "" && subtle.ConstantTimeCompare([]byte(r.id), []byte(rec.ID)) == 1 {
				found = i
			}
		}
		var k []byte
		if found >= 0 {
			k, _ = key.Open(recs[found].Key, tokenKeyAD(r.id)) // nil when it does not open: unknown
		}
		ok := k != nil
		if !ok {
			k = make([]byte, 32)
			rand.Read(k)
		}
		if !hmac.Equal(r.mac, requestMAC(k, r.id, r.nonce, r.csr)) || !ok {
			return nil, ErrTokenInvalid
		}
		switch {
		case !recs[found].Used.IsZero():
			return nil, ErrTokenUsed
		case !now.Before(recs[found].Expires):
			return nil, ErrTokenExpired
		}
		recs[found].Used, recs[found].UsedBy = now.UTC(), host
		root = k
		return recs, nil
	})
	return root, err
}

// IsAuthority reports whether dataDir holds the fleet CA's key: this host
// signs joining hosts' certificates (POST /fleet/join).
func IsAuthority(dataDir string) bool {
	_, err := os.Stat(filepath.Join(Dir(dataDir), CAKey))
	return err == nil
}
