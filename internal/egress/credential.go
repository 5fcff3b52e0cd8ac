package egress

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"strings"
)

// credContext is prefixed to the MAC'd text, so no other MAC under the
// same key passes as a proxy credential.
const credContext = "berth-egress-proxy-v1\x00"

// Subject is whose authority a process in a Computer works under at the
// proxy: a grant (by id), or, for work an admin credential started, that
// caller's provenance.
type Subject struct {
	// GrantID is the grant the work was started under; "" for an admin
	// caller.
	GrantID string
	// Provenance is the admin caller's (unused with a grant, whose own
	// provenance is read when a request comes).
	Provenance Provenance
}

// Provenance is who caused an egress request (the contract's
// computerProvenanceSchema).
type Provenance struct {
	Actor string `json:"actor"`
	Via   string `json:"via,omitempty"`
}

// encode returns the subject's part of a credential: "g" and the grant
// id, or "p" and the provenance's JSON in base64url.
func (s Subject) encode() string {
	if s.GrantID != "" {
		return "g" + s.GrantID
	}
	b, _ := json.Marshal(s.Provenance)
	return "p" + base64.RawURLEncoding.EncodeToString(b)
}

func decodeSubject(s string) (Subject, bool) {
	switch {
	case len(s) > 1 && s[0] == 'g':
		return Subject{GrantID: s[1:]}, true
	case len(s) > 1 && s[0] == 'p':
		b, err := base64.RawURLEncoding.DecodeString(s[1:])
		var p Provenance
		if err != nil || json.Unmarshal(b, &p) != nil || p.Actor == "" {
			return Subject{}, false
		}
		return Subject{Provenance: p}, true
	}
	return Subject{}, false
}

// secret returns the proxy password of computerID and subject:
// "<subject>.<mac>", all URL-safe characters.
func (p *Proxy) secret(computerID string, s Subject) string {
	enc := s.encode()
	return enc + "." + base64.RawURLEncoding.EncodeToString(p.mac(computerID, enc))
}

func (p *Proxy) mac(computerID, encodedSubject string) []byte {
	m := hmac.New(sha256.New, p.o.Key)
	m.Write([]byte(credContext))
	m.Write([]byte(computerID))
	m.Write([]byte{0})
	m.Write([]byte(encodedSubject))
	return m.Sum(nil)
}

// verify checks a proxy user and password and returns the Computer and
// subject they name. The MAC is compared in constant time and checked
// before the subject is decoded.
func (p *Proxy) verify(user, pass string) (string, Subject, bool) {
	if user == "" || len(user) > 64 || len(pass) > 1024 {
		return "", Subject{}, false
	}
	enc, sig, ok := strings.Cut(pass, ".")
	if !ok {
		return "", Subject{}, false
	}
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || subtle.ConstantTimeCompare(got, p.mac(user, enc)) != 1 {
		return "", Subject{}, false
	}
	s, ok := decodeSubject(enc)
	return user, s, ok
}
