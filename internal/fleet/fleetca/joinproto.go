package fleetca

// The join exchange (POST /fleet/join), authenticated and encrypted with
// the one-time join token, which never crosses the wire:
//
//	root     = HKDF-SHA256(token, salt none, "berth fleet join token key v1", 32)
//	token_id = hex(HKDF-SHA256(token, salt none, "berth fleet join token id v1", 16))
//	mac key  = HKDF-SHA256(root, salt none, "berth fleet join request mac v1", 32)
//	mac      = HMAC-SHA256(mac key, "berth fleet join request v1" || lp(token_id) || lp(nonce) || lp(csr))
//	seal key = HKDF-SHA256(root, salt nonce, "berth fleet join response seal v1", 32)
//	sealed   = gcm nonce (12) || AES-256-GCM(seal key, grant JSON,
//	           ad "berth fleet join response v1" || lp(token_id) || lp(nonce) || lp(sha256(csr)))
//
// lp(x) is x's length as 8 bytes big-endian, then x. The first host keeps
// token_id and root (sealed with berth's secret key), never the token.

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/berth-dev/berth/apitype"
)

const (
	infoTokenKey  = "berth fleet join token key v1"
	infoTokenID   = "berth fleet join token id v1"
	infoMAC       = "berth fleet join request mac v1"
	infoSeal      = "berth fleet join response seal v1"
	macLabel      = "berth fleet join request v1"
	sealLabel     = "berth fleet join response v1"
	joinNonceSize = 32
	tokenIDSize   = 16
)

// ErrJoinResponse is what an answer to a join that does not open wraps:
// tampered with, the answer to another request, or from someone without
// the token.
var ErrJoinResponse = errors.New("the answer to the join does not open with the join token: it was altered in transit, answers another request, or comes from someone who does not hold the token; nothing was written")

// tokenRoot is the key a join token's other keys derive from.
func tokenRoot(tok string) []byte {
	k, err := hkdf.Key(sha256.New, []byte(tok), nil, infoTokenKey, 32)
	if err != nil {
		panic(err) // unreachable: 32 bytes is within HKDF-SHA256's limit
	}
	return k
}

// tokenID is a join token's public name.
func tokenID(tok string) string {
	k, err := hkdf.Key(sha256.New, []byte(tok), nil, infoTokenID, tokenIDSize)
	if err != nil {
		panic(err) // unreachable
	}
	return hex.EncodeToString(k)
}

// lp appends x's length (8 bytes, big-endian) and x to b.
func lp(b, x []byte) []byte {
	b = binary.BigEndian.AppendUint64(b, uint64(len(x)))
	return append(b, x...)
}

// requestMAC is the MAC of a join request under root.
func requestMAC(root []byte, id string, nonce []byte, csr string) []byte {
	k, err := hkdf.Key(sha256.New, root, nil, infoMAC, 32)
	if err != nil {
		panic(err) // unreachable
	}
	m := hmac.New(sha256.New, k)
	msg := lp(lp(lp([]byte(macLabel), []byte(id)), nonce), []byte(csr))
	m.Write(msg)
	return m.Sum(nil)
}

// responseAEAD is the cipher and additional data the answer to one join
// request is sealed with.
func responseAEAD(root []byte, id string, nonce []byte, csr string) (cipher.AEAD, []byte) {
	k, err := hkdf.Key(sha256.New, root, nonce, infoSeal, 32)
	if err != nil {
		panic(err) // unreachable
	}
	block, err := aes.NewCipher(k)
	if err != nil {
		panic(err) // unreachable: a 32-byte key
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		panic(err) // unreachable: AES has a 16-byte block
	}
	sum := sha256.Sum256([]byte(csr))
	return aead, lp(lp(lp([]byte(sealLabel), []byte(id)), nonce), sum[:])
}

// joinRequest is a FleetJoinRequest decoded and checked for form.
type joinRequest struct {
	id    string
	nonce []byte
	csr   string
	mac   []byte
}

// decodeJoinRequest checks req's fields for form, naming the one that is
// not (ErrBadRequest).
func decodeJoinRequest(req apitype.FleetJoinRequest) (joinRequest, error) {
	var missing []string
	for _, f := range []struct{ name, v string }{{"token_id", req.TokenID}, {"nonce", req.Nonce}, {"csr", req.CSR}, {"mac", req.MAC}} {
		if f.v == "" {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		return joinRequest{}, fmt.Errorf("%w: %s required", ErrBadRequest, strings.Join(missing, ", "))
	}
	if b, err := hex.DecodeString(req.TokenID); err != nil || len(b) != tokenIDSize {
		return joinRequest{}, fmt.Errorf("%w: token_id: want %d hex digits", ErrBadRequest, 2*tokenIDSize)
	}
	nonce, err := base64.StdEncoding.DecodeString(req.Nonce)
	if err != nil || len(nonce) != joinNonceSize {
		return joinRequest{}, fmt.Errorf("%w: nonce: want base64 of %d bytes", ErrBadRequest, joinNonceSize)
	}
	mac, err := base64.StdEncoding.DecodeString(req.MAC)
	if err != nil || len(mac) != sha256.Size {
		return joinRequest{}, fmt.Errorf("%w: mac: want base64 of %d bytes", ErrBadRequest, sha256.Size)
	}
	return joinRequest{id: req.TokenID, nonce: nonce, csr: req.CSR, mac: mac}, nil
}

// sealGrant is the answer to r, which root (its token's) authenticated.
func sealGrant(root []byte, r joinRequest, g apitype.FleetJoinGrant) (apitype.FleetJoinResponse, error) {
	plain, err := json.Marshal(g)
	if err != nil {
		return apitype.FleetJoinResponse{}, err
	}
	aead, ad := responseAEAD(root, r.id, r.nonce, r.csr)
	out := make([]byte, aead.NonceSize(), aead.NonceSize()+len(plain)+aead.Overhead())
	if _, err := rand.Read(out); err != nil {
		return apitype.FleetJoinResponse{}, err
	}
	out = aead.Seal(out, out, plain, ad)
	clear(plain)
	return apitype.FleetJoinResponse{Sealed: base64.StdEncoding.EncodeToString(out)}, nil
}

// JoinOpener opens the answer to the join request it was made with.
type JoinOpener func(apitype.FleetJoinResponse) (apitype.FleetJoinGrant, error)

// NewJoinRequest is the request berth fleet join sends for a PEM
// certificate request with a join token, and what opens its answer
// (ErrJoinResponse for one that does not open).
func NewJoinRequest(token, csrPEM string) (apitype.FleetJoinRequest, JoinOpener, error) {
	nonce := make([]byte, joinNonceSize)
	if _, err := rand.Read(nonce); err != nil {
		return apitype.FleetJoinRequest{}, nil, err
	}
	root, id := tokenRoot(token), tokenID(token)
	req := apitype.FleetJoinRequest{
		TokenID: id, Nonce: base64.StdEncoding.EncodeToString(nonce), CSR: csrPEM,
		MAC: base64.StdEncoding.EncodeToString(requestMAC(root, id, nonce, csrPEM)),
	}
	open := func(resp apitype.FleetJoinResponse) (apitype.FleetJoinGrant, error) {
		b, err := base64.StdEncoding.DecodeString(resp.Sealed)
		aead, ad := responseAEAD(root, id, nonce, csrPEM)
		if err != nil || len(b) < aead.NonceSize()+aead.Overhead() {
			return apitype.FleetJoinGrant{}, fmt.Errorf("fleetca: sealed: %w", ErrJoinResponse)
		}
		plain, err := aead.Open(nil, b[:aead.NonceSize()], b[aead.NonceSize():], ad)
		if err != nil {
			return apitype.FleetJoinGrant{}, fmt.Errorf("fleetca: %w", ErrJoinResponse)
		}
		defer clear(plain)
		var g apitype.FleetJoinGrant
		if err := json.Unmarshal(plain, &g); err != nil {
			return apitype.FleetJoinGrant{}, fmt.Errorf("fleetca: the opened answer to the join: %w", err)
		}
		return g, nil
	}
	return req, open, nil
}
