package grant

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// KeyFileName is the signing key's file in the data directory.
const KeyFileName = "grant.key"

// LoadKey returns the grant signing key kept in dir/grant.key, generating
// a random 256-bit key there (mode 0600) on first use. A key file readable
// by anyone but its owner is refused: whoever reads it can mint grants.
//
// The key is a file of its own rather than one derived from the secret
// store's key so that rotating either never silently invalidates, or
// keeps alive, the other's credentials. Replacing the file invalidates
// every grant issued under the old key.
func LoadKey(dir string) ([]byte, error) {
	path := filepath.Join(dir, KeyFileName)
	k, err := readKey(path)
	if errors.Is(err, fs.ErrNotExist) {
		k, err = createKey(path)
		if errors.Is(err, fs.ErrExist) { // another process won the race
			k, err = readKey(path)
		}
	}
	return k, err
}

func readKey(path string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("grant: key file %s has mode %04o; it must be readable by its owner only (chmod 600 %s)", path, fi.Mode().Perm(), path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("grant: read key file: %w", err)
	}
	k, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(k) != 32 {
		return nil, fmt.Errorf("grant: key file %s must hold 64 hex characters", path)
	}
	return k, nil
}

func createKey(path string) ([]byte, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("grant: create data directory: %w", err)
	}
	k := make([]byte, 32)
	rand.Read(k)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	_, werr := f.WriteString(hex.EncodeToString(k) + "\n")
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		os.Remove(path)
		return nil, fmt.Errorf("grant: write key file: %w", werr)
	}
	return k, nil
}
