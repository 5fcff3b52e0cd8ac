package secrets

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// KeyFileName is the key file in the data directory, used when
// BERTH_SECRET_KEY is unset.
const KeyFileName = "secret.key"

// Key is an AES-256 key.
type Key [32]byte

// ParseKey turns key material into a key: exactly 64 hex characters
// (after trimming space) are decoded, anything else is hashed with
// SHA-256, as app-lb does.
func ParseKey(material string) (Key, error) {
	var k Key
	m := strings.TrimSpace(material)
	if m == "" {
		return k, errors.New("secrets: the secret key is empty")
	}
	if len(m) == 64 {
		if b, err := hex.DecodeString(m); err == nil {
			copy(k[:], b)
			return k, nil
		}
	}
	return Key(sha256.Sum256([]byte(m))), nil
}

// LoadKey returns the secret key: from material when it is not empty (the
// value of BERTH_SECRET_KEY), otherwise from dir's key file, generating a
// random one there on first use. source says where the key came from, for
// the log.
func LoadKey(material, dir string) (k Key, source string, err error) {
	if material != "" {
		k, err = ParseKey(material)
		return k, "BERTH_SECRET_KEY", err
	}
	path := filepath.Join(dir, KeyFileName)
	k, err = readKeyFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		k, err = createKeyFile(path)
		if errors.Is(err, fs.ErrExist) { // another process won the race
			k, err = readKeyFile(path)
		}
	}
	return k, path, err
}

func readKeyFile(path string) (Key, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return Key{}, err
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return Key{}, fmt.Errorf("secrets: key file %s has mode %04o; it must be readable by its owner only (chmod 600 %s)", path, fi.Mode().Perm(), path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return Key{}, fmt.Errorf("secrets: read key file: %w", err)
	}
	s := strings.TrimSpace(string(b))
	raw, err := hex.DecodeString(s)
	if err != nil || len(raw) != len(Key{}) {
		return Key{}, fmt.Errorf("secrets: key file %s must hold 64 hex characters", path)
	}
	return Key(raw), nil
}

func createKeyFile(path string) (Key, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return Key{}, fmt.Errorf("secrets: create data directory: %w", err)
	}
	var k Key
	rand.Read(k[:])
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return Key{}, err
	}
	_, werr := f.WriteString(hex.EncodeToString(k[:]) + "\n")
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		os.Remove(path)
		return Key{}, fmt.Errorf("secrets: write key file: %w", werr)
	}
	return k, nil
}

// ReadKeyFile reads dir's key file, as LoadKey does, without making one:
// ok is false when there is none.
func ReadKeyFile(dir string) (k Key, ok bool, err error) {
	k, err = readKeyFile(filepath.Join(dir, KeyFileName))
	if errors.Is(err, fs.ErrNotExist) {
		return Key{}, false, nil
	}
	return k, err == nil, err
}

// WriteKeyFile makes k dir's key file (replacing one there), in the
// format and mode (0600) LoadKey makes it with; the file is written
// whole under a temporary name and renamed into place.
func WriteKeyFile(dir string, k Key) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("secrets: create data directory: %w", err)
	}
	path := filepath.Join(dir, KeyFileName)
	tmp := path + ".tmp"
	os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("secrets: write key file: %w", err)
	}
	_, werr := f.WriteString(hex.EncodeToString(k[:]) + "\n")
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp, path)
	}
	if werr != nil {
		os.Remove(tmp)
		return fmt.Errorf("secrets: write key file: %w", werr)
	}
	return nil
}
