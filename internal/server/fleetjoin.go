package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/admin"
	"github.com/berth-dev/berth/internal/fleet/etcdembed"
	"github.com/berth-dev/berth/internal/fleet/fleetca"
	"github.com/berth-dev/berth/internal/secrets"
)

// FromDataDir fills what f leaves unset from <dataDir>/fleet/fleet.json,
// which berth fleet init and berth fleet join write: the etcd endpoints,
// the CA and this host's certificate and key, and on the fleet's first
// host the embedded etcd member it runs with mutual TLS. Flags given
// override the file; --etcd-dev contradicts it and is refused.
func (f FleetOptions) FromDataDir(dataDir string) (FleetOptions, error) {
	c, ok, err := fleetca.LoadConfig(dataDir)
	if err != nil {
		return f, fmt.Errorf("server: %w", err)
	}
	if !ok {
		return f, nil
	}
	path := filepath.Join(fleetca.Dir(dataDir), fleetca.ConfigFile)
	if f.Dev {
		return f, fmt.Errorf("server: --etcd-dev contradicts %s (berth fleet init or join set this data dir up for a fleet over mutual TLS): drop --etcd-dev, or give another --data-dir", path)
	}
	if (f.CertFile == "") != (f.KeyFile == "") {
		return f, errors.New("server: --etcd-cert and --etcd-key go together")
	}
	if len(f.Endpoints) == 0 {
		f.Endpoints = c.Endpoints
	}
	if f.CAFile == "" {
		f.CAFile = fleetca.Path(dataDir, c.CA)
	}
	if f.CertFile == "" {
		f.CertFile, f.KeyFile = fleetca.Path(dataDir, c.Cert), fleetca.Path(dataDir, c.Key)
	}
	if c.Member != nil {
		f.member = &etcdembed.Config{
			Name: c.Member.Name, Dir: filepath.Join(dataDir, "etcd"),
			ClientURL: c.Member.ClientURL, PeerURL: c.Member.PeerURL, LogLevel: "error",
			TLS: &etcdembed.TLSFiles{
				CertFile: fleetca.Path(dataDir, c.Cert), KeyFile: fleetca.Path(dataDir, c.Key), CAFile: fleetca.Path(dataDir, c.CA),
				// berth fleet revoke's CRL (DER), read at every handshake.
				CRLFile: filepath.Join(fleetca.Dir(dataDir), fleetca.CRLDERFile),
			},
		}
	}
	return f, nil
}

// adminFleetJoin is POST /fleet/join's signer on the host holding the
// fleet CA; nil elsewhere.
func (s *Server) adminFleetJoin() admin.FleetJoiner {
	if !fleetca.IsAuthority(s.o.DataDir) {
		return nil
	}
	return fleetJoiner{dataDir: s.o.DataDir, key: s.sealKey}
}

// openFleetCAKey, on the fleet's first host, opens the fleet CA key with
// the secret key before anything is served (a key that does not open it
// fails the start), and seals a plaintext one an older berth left.
func (s *Server) openFleetCAKey() error {
	if !fleetca.IsAuthority(s.o.DataDir) {
		return nil
	}
	_, migrated, err := fleetca.LoadCAKey(s.o.DataDir, s.sealKey)
	if err != nil {
		return fmt.Errorf("server: %w", err)
	}
	if migrated {
		s.log.Warn("the fleet CA key was plaintext, as berth wrote it before sealing it: it is now sealed with the secret key", "path", filepath.Join(fleetca.Dir(s.o.DataDir), fleetca.CAKey))
	}
	// A fleet made before revocation has no CRL yet: the embedded etcd
	// member starts with one when it starts after this.
	if _, err := fleetca.EnsureCRL(s.o.DataDir, s.sealKey, time.Now()); err != nil {
		return fmt.Errorf("server: %w", err)
	}
	return nil
}

type fleetJoiner struct {
	dataDir string
	key     secrets.Key
}

func (j fleetJoiner) Join(_ context.Context, req apitype.FleetJoinRequest) (apitype.FleetJoinResponse, error) {
	resp, err := fleetca.Sign(j.dataDir, j.key, req, time.Now())
	switch {
	case errors.Is(err, fleetca.ErrTokenInvalid), errors.Is(err, fleetca.ErrTokenUsed), errors.Is(err, fleetca.ErrTokenExpired):
		return resp, fmt.Errorf("%w: %v", admin.ErrJoinRefused, err)
	case errors.Is(err, fleetca.ErrBadRequest):
		return resp, fmt.Errorf("%w: %v", admin.ErrJoinBadRequest, err)
	}
	return resp, err
}

// adminFleetRenew is POST /fleet/renew's signer on the host holding the
// fleet CA; nil elsewhere.
func (s *Server) adminFleetRenew() admin.FleetRenewer {
	if !fleetca.IsAuthority(s.o.DataDir) {
		return nil
	}
	return fleetJoiner{dataDir: s.o.DataDir, key: s.sealKey}
}

func (j fleetJoiner) Renew(_ context.Context, req apitype.FleetRenewRequest) (apitype.FleetCertificate, error) {
	resp, err := fleetca.SignRenewal(j.dataDir, j.key, req, time.Now())
	switch {
	case errors.Is(err, fleetca.ErrRenewRefused):
		return resp, fmt.Errorf("%w: %v", admin.ErrRenewRefused, err)
	case errors.Is(err, fleetca.ErrBadRequest):
		return resp, fmt.Errorf("%w: %v", admin.ErrJoinBadRequest, err)
	}
	return resp, err
}

// fleetRenewEvery is how often berth serve on a joined host checks its
// certificate's expiry.
const fleetRenewEvery = 24 * time.Hour

// runFleetRenew, on a host that joined a fleet (berth fleet join), checks
// at start and then once a day whether the host certificate has less
// than a third of its lifetime left, and if so renews it through the
// first host (fleetca.Renew, as berth fleet renew does) and logs the
// outcome. The running berth keeps the certificate it started with: the
// new one is used from the next start.
func (s *Server) runFleetRenew(ctx context.Context) error {
	c, ok, err := fleetca.LoadConfig(s.o.DataDir)
	if err != nil || !ok || c.Member != nil {
		return nil
	}
	for {
		s.renewFleetCert(ctx, time.Now())
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(fleetRenewEvery):
		}
	}
}

// renewFleetCert renews the host certificate when it is due at now (the
// renewal itself runs at the wall clock).
func (s *Server) renewFleetCert(ctx context.Context, now time.Time) {
	due, notAfter, err := fleetca.RenewDue(s.o.DataDir, now)
	if err != nil {
		s.log.Error("fleet certificate renewal: reading the host certificate", "err", err)
		return
	}
	if !due {
		return
	}
	r, err := fleetca.Renew(ctx, fleetca.RenewOptions{DataDir: s.o.DataDir})
	if err != nil {
		s.log.Error("fleet certificate renewal failed; berth fleet renew retries by hand", "expires", notAfter, "err", err)
		return
	}
	s.log.Info("fleet certificate renewed: restart berth serve to use it", "host", r.HostID, "expires", r.NotAfter, "was", notAfter)
}

// adminFleetRevoke is POST /fleet/hosts/{id}/revoke's revoker on the host
// holding the fleet CA; nil elsewhere.
func (s *Server) adminFleetRevoke() admin.FleetRevoker {
	if !fleetca.IsAuthority(s.o.DataDir) {
		return nil
	}
	return fleetRevoker{s}
}

type fleetRevoker struct{ s *Server }

// Revoke revokes as berth fleet revoke does, then applies the CRL to
// this host's hop and publishes it in etcd at once (runFleetCRL would
// within crlPollEvery).
func (f fleetRevoker) Revoke(ctx context.Context, id, reason string) (apitype.FleetRevocation, error) {
	s := f.s
	if err := fleetca.ValidHostID(id); err != nil {
		return apitype.FleetRevocation{}, fmt.Errorf("%w: %v", admin.ErrRevokeRefused, err)
	}
	r, err := fleetca.Revoke(s.o.DataDir, s.sealKey, id, reason, time.Now())
	switch {
	case errors.Is(err, fleetca.ErrUnknownHost):
		return apitype.FleetRevocation{}, fmt.Errorf("%w: %v", admin.ErrNoFleetHost, err)
	case errors.Is(err, fleetca.ErrRevokeSelf):
		return apitype.FleetRevocation{}, fmt.Errorf("%w: %v", admin.ErrRevokeRefused, err)
	case err != nil:
		return apitype.FleetRevocation{}, err
	}
	s.log.Warn("fleet: host revoked", "host", id, "serials", r.Serials, "reason", reason)
	out := apitype.FleetRevocation{Host: r.Host, Serials: r.Serials, Newly: r.Newly}
	s.applyCRL(r.CRL)
	if fm := s.fleetHost; fm != nil {
		if err := fm.m.PutCRL(ctx, r.CRL); err != nil {
			s.log.Error("fleet: publishing the CRL in etcd; retried", "err", err)
		} else {
			out.Published = true
		}
	}
	return out, nil
}

// crlPollEvery is how often the CA host reads <data-dir>/fleet/crl.der
// for a CRL berth fleet revoke wrote, to apply and publish it.
const crlPollEvery = 5 * time.Second

// applyCRL sets the hop's revoked serials from der, checked against the
// fleet CA; a CRL that does not check is logged and ignored.
func (s *Server) applyCRL(der []byte) {
	f, err := s.o.Fleet.FromDataDir(s.o.DataDir)
	if err != nil || f.CAFile == "" {
		return
	}
	ca, err := fleetca.LoadCACert(f.CAFile)
	if err != nil {
		s.log.Warn("fleet: the CRL cannot be checked without the fleet CA", "err", err)
		return
	}
	before := s.revoked.Len()
	if err := s.revoked.Set(der, ca); err != nil {
		s.log.Warn("fleet: a CRL refused", "err", err)
		return
	}
	if n := s.revoked.Len(); n != before {
		s.log.Info("fleet: revoked host certificates", "count", n)
	}
}

// runFleetCRL follows the fleet's CRL: every host applies the one in etcd
// to its hop (WatchCRL); the CA host also reads its crl.der (berth fleet
// revoke writes it) and publishes it when it changed.
func (s *Server) runFleetCRL(ctx context.Context) error {
	fm := s.fleetHost
	if fm == nil {
		return nil
	}
	f, err := s.o.Fleet.FromDataDir(s.o.DataDir)
	if err != nil || f.CAFile == "" {
		return nil
	}
	if fleetca.IsAuthority(s.o.DataDir) {
		go func() {
			var published []byte
			for {
				if der, err := fleetca.ReadCRL(s.o.DataDir); err != nil {
					s.log.Warn("fleet: reading the CRL", "err", err)
				} else if der != nil && !bytes.Equal(der, published) {
					s.applyCRL(der)
					if err := fm.m.PutCRL(ctx, der); err != nil {
						if ctx.Err() == nil {
							s.log.Warn("fleet: publishing the CRL in etcd; retrying", "err", err)
						}
					} else {
						published = der
					}
				}
				select {
				case <-ctx.Done():
					return
				case <-time.After(crlPollEvery):
				}
			}
		}()
	}
	fm.m.WatchCRL(ctx, s.applyCRL)
	return nil
}
