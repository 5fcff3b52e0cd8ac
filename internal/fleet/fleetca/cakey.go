package fleetca

import (
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/berth-dev/berth/internal/secrets"
)

// sealedKeyType is ca.key's PEM block type: the CA's DER private key
// sealed with berth's secret key (secrets.Key.Seal, bound to caKeyAD).
const sealedKeyType = "BERTH SEALED FLEET CA KEY"

// caKeyAD binds a sealed CA key to its use, so a value sealed for
// something else under the same key does not open as the CA key.
var caKeyAD = []byte("berth fleet ca.key v1")

// ErrCAKeyWrongKey is what opening ca.key with another secret key than
// the one it was sealed with wraps.
var ErrCAKeyWrongKey = errors.New("the fleet CA key does not open with this data dir's secret key: start berth with the BERTH_SECRET_KEY (or the <data-dir>/secret.key) it was made with")

// sealCAKey is ca.key's content for k: a PEM block of the sealed DER.
func sealCAKey(k *ecdsa.PrivateKey, key secrets.Key) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: sealedKeyType, Bytes: key.Seal(der, caKeyAD)}), nil
}

// LoadCAKey opens dataDir's fleet CA key with berth's secret key. A
// plaintext key, as berth wrote before sealing it, is read and re-written
// sealed: migrated is then true, for the caller to say so.
func LoadCAKey(dataDir string, key secrets.Key) (k *ecdsa.PrivateKey, migrated bool, err error) {
	path := filepath.Join(Dir(dataDir), CAKey)
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, false, fmt.Errorf("fleetca: %w", err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, false, fmt.Errorf("fleetca: %s holds no PEM key", path)
	}
	switch blk.Type {
	case sealedKeyType:
		der, err := key.Open(blk.Bytes, caKeyAD)
		if err != nil {
			return nil, false, fmt.Errorf("fleetca: %s: %w", path, ErrCAKeyWrongKey)
		}
		k, err := x509.ParseECPrivateKey(der)
		if err != nil {
			return nil, false, fmt.Errorf("fleetca: %s: %w", path, err)
		}
		return k, false, nil
	case "EC PRIVATE KEY":
		k, err := x509.ParseECPrivateKey(blk.Bytes)
		if err != nil {
			return nil, false, fmt.Errorf("fleetca: %s: %w", path, err)
		}
		sealed, err := sealCAKey(k, key)
		if err != nil {
			return nil, false, err
		}
		if err := writeFile(path, sealed, 0o600); err != nil {
			return nil, false, fmt.Errorf("fleetca: sealing the plaintext %s: %w", path, err)
		}
		return k, true, nil
	}
	return nil, false, fmt.Errorf("fleetca: %s holds a PEM %q, not the fleet CA key", path, blk.Type)
}

// LoadSecretKey loads berth's secret key for dataDir as berth serve does
// (secrets.LoadKey): from material (BERTH_SECRET_KEY) when it is set,
// otherwise from <dataDir>/secret.key, made on first use.
func LoadSecretKey(material, dataDir string) (secrets.Key, error) {
	k, _, err := secrets.LoadKey(material, dataDir)
	if err != nil {
		return secrets.Key{}, fmt.Errorf("fleetca: berth's secret key: %w", err)
	}
	return k, nil
}
