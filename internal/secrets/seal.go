package secrets

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"errors"
)

// sealVersion is the first byte of every sealed value.
const sealVersion = 1

// ErrMalformed: a sealed value is too short or of an unknown version.
var ErrMalformed = errors.New("secrets: malformed sealed value")

// Seal encrypts plain with AES-256-GCM under k, bound to ad (additional data
// that must be presented again to open it):
//
//	0x01 || nonce (12 random bytes, fresh per call) || ciphertext || tag
//
// It is the one sealing of berth: the secret store's rows and the
// certificate manager's private keys are both sealed with it.
func (k Key) Seal(plain, ad []byte) []byte {
	aead := k.aead()
	out := make([]byte, 1+aead.NonceSize(), 1+aead.NonceSize()+len(plain)+aead.Overhead())
	out[0] = sealVersion
	rand.Read(out[1:]) // a fresh random nonce for every seal
	return aead.Seal(out, out[1:], plain, ad)
}

// Open decrypts a value sealed by Seal with the same key and ad. A wrong key,
// a different ad or any change to sealed fails.
func (k Key) Open(sealed, ad []byte) ([]byte, error) {
	aead := k.aead()
	n := aead.NonceSize()
	if len(sealed) < 1+n+aead.Overhead() || sealed[0] != sealVersion {
		return nil, ErrMalformed
	}
	return aead.Open(nil, sealed[1:1+n], sealed[1+n:], ad)
}

func (k Key) aead() cipher.AEAD {
	block, err := aes.NewCipher(k[:])
	if err != nil {
		panic(err) // unreachable: a Key is always 32 bytes
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		panic(err) // unreachable: AES has a 16-byte block
	}
	return aead
}
