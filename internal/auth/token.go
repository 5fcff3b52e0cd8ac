package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"strings"
)

// TokenPrefix starts every berth app-token, so a leaked one is easy to
// recognise (and to scan for).
const TokenPrefix = "berth_"

// Lengths of a token's parts.
const (
	tokenIDLen     = 12 // hex of 6 random bytes
	tokenSecretLen = 43 // unpadded base64url of 32 random bytes
	tokenLen       = len(TokenPrefix) + tokenIDLen + 1 + tokenSecretLen
)

// ErrMalformedToken is returned by ParseToken for a string that is not a
// berth app-token.
var ErrMalformedToken = errors.New("auth: not a berth app-token (want berth_<12 hex>_<43 base64url>)")

// ParseToken splits a token into its id and secret parts. It checks the
// shape only; whether the token exists is [Tokens.Verify]'s business.
func ParseToken(s string) (id, secret string, err error) {
	if len(s) != tokenLen || !strings.HasPrefix(s, TokenPrefix) {
		return "", "", ErrMalformedToken
	}
	rest := s[len(TokenPrefix):]
	id, secret = rest[:tokenIDLen], rest[tokenIDLen+1:]
	if rest[tokenIDLen] != '_' || !isLowerHex(id) {
		return "", "", ErrMalformedToken
	}
	// Decoding (rather than only checking the alphabet) also refuses a
	// last character with non-zero padding bits, so each 32-byte secret
	// has exactly one spelling.
	if b, err := base64.RawURLEncoding.Strict().DecodeString(secret); err != nil || len(b) != 32 {
		return "", "", ErrMalformedToken
	}
	return id, secret, nil
}

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// newToken returns a fresh token string, its id and the hash of its secret.
func newToken() (token, id, secretHash string) {
	var idb [6]byte
	var sec [32]byte
	rand.Read(idb[:]) // crypto/rand.Read never fails (Go 1.24+)
	rand.Read(sec[:])
	id = hex.EncodeToString(idb[:])
	secret := base64.RawURLEncoding.EncodeToString(sec[:])
	return TokenPrefix + id + "_" + secret, id, hashSecret(secret)
}

// hashSecret is what is stored of a token: the hex SHA-256 of its secret
// part. A 256-bit random secret needs no salt or stretching.
func hashSecret(secret string) string {
	h := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(h[:])
}
