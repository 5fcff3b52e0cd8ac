package fleetca

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
)

// HostUsages are the extended key usages of a host certificate: client
// auth towards etcd and a peer's hop listener, server auth for this
// host's etcd member (the first host) and its hop listener.
var HostUsages = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}

// ErrOldHostCert is what CheckHostCert wraps for a host certificate
// issued before the hop between hosts: client auth only, or no subject
// alternative name for the host id.
var ErrOldHostCert = errors.New("renew it (berth fleet renew --server URL on a joined host; on the fleet's first host, berth fleet init again renews its own) or re-join (berth fleet join --force with a new token from berth fleet init)")

// CheckHostCert reports whether crt serves host id on the hop between
// hosts: both server and client auth, and id among its subject
// alternative names (the name a peer dials it as, so that host X's
// certificate cannot pass for host Y's).
func CheckHostCert(crt *x509.Certificate, id string) error {
	if crt == nil {
		return errors.New("fleetca: no host certificate")
	}
	if crt.Subject.CommonName != id {
		return fmt.Errorf("fleetca: the host certificate is for %q, not host %q", crt.Subject.CommonName, id)
	}
	for _, u := range HostUsages {
		if !slices.Contains(crt.ExtKeyUsage, u) && !slices.Contains(crt.ExtKeyUsage, x509.ExtKeyUsageAny) {
			return fmt.Errorf("fleetca: the host certificate of %s was issued for client auth only, before the hop between hosts: %w", id, ErrOldHostCert)
		}
	}
	if err := crt.VerifyHostname(id); err != nil {
		return fmt.Errorf("fleetca: the host certificate of %s names no subject alternative name %s, as those issued before the hop between hosts: %w", id, id, ErrOldHostCert)
	}
	return nil
}

// LoadHostCert reads a host's certificate and key (PEM files) and checks
// them with CheckHostCert for host id; id "" takes the certificate's
// common name. It returns the pair and the id.
func LoadHostCert(certFile, keyFile, id string) (tls.Certificate, string, error) {
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return tls.Certificate{}, "", fmt.Errorf("fleetca: host certificate: %w", err)
	}
	crt, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return tls.Certificate{}, "", fmt.Errorf("fleetca: host certificate %s: %w", certFile, err)
	}
	if id == "" {
		id = crt.Subject.CommonName
	}
	if err := CheckHostCert(crt, id); err != nil {
		return tls.Certificate{}, "", fmt.Errorf("%w (%s)", err, certFile)
	}
	pair.Leaf = crt
	return pair, id, nil
}

// LoadCAPool reads the fleet CA's certificate (PEM) into a pool.
func LoadCAPool(caFile string) (*x509.CertPool, error) {
	crt, err := readCert(caFile)
	if err != nil {
		return nil, fmt.Errorf("%w (the fleet CA, %s)", err, caFile)
	}
	p := x509.NewCertPool()
	p.AddCert(crt)
	return p, nil
}

// LoadCACert reads the fleet CA's certificate (PEM): what a CRL's
// signature is checked against (Revocations.Set).
func LoadCACert(caFile string) (*x509.Certificate, error) {
	crt, err := readCert(caFile)
	if err != nil {
		return nil, fmt.Errorf("%w (the fleet CA, %s)", err, caFile)
	}
	return crt, nil
}
