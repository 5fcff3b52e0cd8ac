package server

import (
	"context"
	"log/slog"
	"path/filepath"

	"github.com/berth-dev/berth/internal/hostnet"
	"github.com/berth-dev/berth/internal/image"
	"github.com/berth-dev/berth/internal/store"
)

// openImages opens the local image store in <data-dir>/images. What uses
// an image is asked of the registry (deployments whose vm.image it is)
// once it exists.
func (s *Server) openImages(ctx context.Context, st *store.Store) (*image.Store, error) {
	return image.New(ctx, image.Options{
		Dir: filepath.Join(s.o.DataDir, "images"), Catalog: st, Log: s.log,
		InUse: s.imageUsers,
	})
}

// imageUsers lists the deployments whose vm.image is name.
func (s *Server) imageUsers(name string) []image.Reference {
	if s.registry == nil {
		return nil
	}
	var refs []image.Reference
	for _, e := range s.registry.List() {
		if e.Spec.VM != nil && e.Spec.VM.Image == name {
			refs = append(refs, image.Reference{Kind: "deployment", ID: e.Spec.ID})
		}
	}
	return refs
}

// guestNetwork returns the host's guest network (hostnet) for the isolating
// drivers, as cfg configures it (Options.GuestNetwork), or nil with the
// reason logged when the host is not prepared: the server does not change
// the host's interfaces or rules; `berth host setup` does, and berth serve
// as root before New (hostcheck.ServeSetup).
func guestNetwork(ctx context.Context, cfg hostnet.Config, log *slog.Logger) *hostnet.Network {
	if err := hostnet.Check(ctx, cfg); err != nil {
		log.Info("guest network unavailable; run berth host setup", "why", err)
		return nil
	}
	n, err := hostnet.New(cfg)
	if err != nil {
		log.Warn("guest network disabled", "err", err)
		return nil
	}
	return n
}
