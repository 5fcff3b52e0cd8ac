package etcdstore

import (
	"github.com/berth-dev/berth/internal/auth"
	"github.com/berth-dev/berth/internal/grant"
	"github.com/berth-dev/berth/internal/guard"
	"github.com/berth-dev/berth/internal/namespaces"
	"github.com/berth-dev/berth/internal/secrets"
	"github.com/berth-dev/berth/internal/store/storetest"
)

// The interfaces the store's consumers declare, which *store.Store
// satisfies: *Store satisfies them too, with the same signatures.
var (
	_ storetest.Backend = (*Store)(nil)
	_ namespaces.DB     = (*Store)(nil)
	_ auth.TokenStore   = (*Store)(nil)
	_ secrets.DB        = (*Store)(nil)
	_ guard.Store       = (*Store)(nil)
	_ grant.Store       = (*Store)(nil)
)
