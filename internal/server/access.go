package server

import (
	"context"
	"net"
	"net/netip"
	"strings"

	"github.com/berth-dev/berth/internal/auth"
	"github.com/berth-dev/berth/internal/secrets"
)

// openAccess loads the app-tokens and opens the secret store. A secret key
// that does not open the stored secrets fails here, before anything is
// served or written.
func openAccess(ctx context.Context, st Store, o Options) (*auth.Tokens, *secrets.Store, secrets.Key, error) {
	tokens, err := auth.NewTokens(ctx, auth.TokensConfig{Store: st, TenantMaxTTL: o.TenantTokenMaxTTL, Open: o.AdminPassword == "", Log: o.Log})
	if err != nil {
		return nil, nil, secrets.Key{}, err
	}
	key, source, err := secrets.LoadKey(o.SecretKey, o.DataDir)
	if err != nil {
		return nil, nil, secrets.Key{}, err
	}
	sec, err := secrets.Open(ctx, st, key)
	if err != nil {
		return nil, nil, secrets.Key{}, err
	}
	o.Log.Info("secret store open", "key", source, "operator_password", o.AdminPassword != "")
	return tokens, sec, key, nil
}

// loopback reports whether a listen address is on the loopback interface
// only: 127.0.0.0/8, ::1 or "localhost". An empty host or 0.0.0.0 listens
// everywhere, and another name may resolve anywhere, so neither counts.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}
