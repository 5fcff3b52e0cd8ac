package certs

import (
	"context"
	"fmt"
	"strings"

	"github.com/caddyserver/certmagic"

	"github.com/berth-dev/berth/internal/secrets"
)

// sealedStorage seals, with the secret key, every value whose key ends in
// ".key": certmagic's private keys (certificates' and the ACME account's).
// The AAD is the storage key, so a sealed key cannot be moved to another
// name. Everything else, and the locks, pass through.
type sealedStorage struct {
	certmagic.Storage
	key secrets.Key
}

func sealed(key string) bool { return strings.HasSuffix(key, ".key") }

func sealAAD(key string) []byte { return []byte("berth-certs-v1\x00" + key) }

func (s *sealedStorage) Store(ctx context.Context, key string, value []byte) error {
	if sealed(key) {
		value = s.key.Seal(value, sealAAD(key))
	}
	return s.Storage.Store(ctx, key, value)
}

func (s *sealedStorage) Load(ctx context.Context, key string) ([]byte, error) {
	v, err := s.Storage.Load(ctx, key)
	if err != nil || !sealed(key) {
		return v, err
	}
	plain, err := s.key.Open(v, sealAAD(key))
	if err != nil {
		return nil, fmt.Errorf("certs: %s does not open with the secret key (%v): it was sealed with another key, or written by something other than berth", key, err)
	}
	return plain, nil
}

func (s *sealedStorage) String() string { return fmt.Sprintf("sealed(%v)", s.Storage) }
