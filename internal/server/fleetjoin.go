package server

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/admin"
	"github.com/berth-dev/berth/internal/fleet/etcdembed"
	"github.com/berth-dev/berth/internal/fleet/fleetca"
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
	return fleetJoiner{dataDir: s.o.DataDir}
}

type fleetJoiner struct{ dataDir string }

func (j fleetJoiner) Join(_ context.Context, req apitype.FleetJoinRequest) (apitype.FleetJoinResponse, error) {
	resp, err := fleetca.Sign(j.dataDir, req, time.Now())
	switch {
	case errors.Is(err, fleetca.ErrTokenInvalid), errors.Is(err, fleetca.ErrTokenUsed), errors.Is(err, fleetca.ErrTokenExpired):
		return resp, fmt.Errorf("%w: %v", admin.ErrJoinRefused, err)
	case errors.Is(err, fleetca.ErrBadRequest):
		return resp, fmt.Errorf("%w: %v", admin.ErrJoinBadRequest, err)
	}
	return resp, err
}
