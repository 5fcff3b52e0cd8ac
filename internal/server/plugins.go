package server

import (
	"context"

	"github.com/berth-dev/berth/internal/plugin"
	"github.com/berth-dev/berth/internal/plugin/obsplugin"
	"github.com/berth-dev/berth/internal/store"
)

// openPlugins is the host of berth's compiled-in plugins, their records in
// the store. obs has no telemetry API connected yet: it answers 409 "the
// obs plugin is not configured" (obsplugin.NotConfigured) until one is
// passed to obsplugin.New.
func openPlugins(ctx context.Context, st *store.Store) (*plugin.Host, error) {
	return plugin.New(ctx, plugin.Options{Records: st, Plugins: []plugin.Plugin{obsplugin.New(nil)}})
}
