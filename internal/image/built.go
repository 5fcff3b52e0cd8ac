package image

import (
	"context"
	"encoding/json"
	"fmt"
)

// ConfigCatalog is where the run defaults of built images live
// (*store.Store is one). A Catalog without it keeps no config for
// imported images: ImportBuilt then fails.
type ConfigCatalog interface {
	ImageConfigs(ctx context.Context) (map[string]string, error)
	PutImageConfig(ctx context.Context, name, config string) error
}

// ImportBuilt imports the tree src under name as Import does and records
// c as the image's run defaults, so that Config answers for it as for a
// pulled image: a deployment of name with no start_command runs its
// Entrypoint+Cmd, with its Env, WorkDir and Port. For images berth built
// (package build); a plain Import of the name later forgets c.
func (s *Store) ImportBuilt(ctx context.Context, name, src string, c Config) (Image, error) {
	cc, ok := s.cat.(ConfigCatalog)
	if !ok {
		return Image{}, fmt.Errorf("image: import %q: this image store cannot record image configs", name)
	}
	im, err := s.importPlain(ctx, name, src)
	if err != nil {
		return Image{}, err
	}
	b, _ := json.Marshal(c)
	if err := cc.PutImageConfig(ctx, name, string(b)); err != nil {
		return Image{}, fmt.Errorf("image: import %q: %w", name, err)
	}
	s.mu.Lock()
	s.built[name] = c
	s.mu.Unlock()
	return im, nil
}

// loadBuilt reads the built images' configs into memory.
func (s *Store) loadBuilt(ctx context.Context) error {
	cc, ok := s.cat.(ConfigCatalog)
	if !ok {
		return nil
	}
	m, err := cc.ImageConfigs(ctx)
	if err != nil {
		return fmt.Errorf("image: %w", err)
	}
	for n, raw := range m {
		var c Config
		if err := json.Unmarshal([]byte(raw), &c); err != nil {
			s.log.Warn("image: unreadable config of a built image; build it again", "image", n, "err", err)
			continue
		}
		s.built[n] = c
	}
	return nil
}

// forgetBuilt drops name's run defaults: its content was replaced by a
// plain import, or it was deleted.
func (s *Store) forgetBuilt(ctx context.Context, name string) {
	s.mu.Lock()
	_, ok := s.built[name]
	delete(s.built, name)
	s.mu.Unlock()
	if !ok {
		return
	}
	if cc, isCC := s.cat.(ConfigCatalog); isCC {
		if err := cc.PutImageConfig(ctx, name, ""); err != nil {
			s.log.Warn("image: cannot forget a built image's config", "image", name, "err", err)
		}
	}
}
