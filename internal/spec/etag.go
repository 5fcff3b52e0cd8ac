package spec

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"

	"github.com/berth-dev/berth/apitype"
)

// Canonical returns the compact JSON of s with every object key sorted, at
// every depth and including the Extra keys. Numbers keep their literal
// text and HTML characters are not escaped, so the bytes depend only on the
// spec's content and not on the key order a client happened to send.
func Canonical(s *apitype.DeploymentSpec) ([]byte, error) {
	raw, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	// Decoding into any and re-encoding sorts the keys: encoding/json
	// writes map keys in sorted order. UseNumber keeps 1.0 as 1.0.
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// ETag returns `"` + lowercase hex SHA-256 of [Canonical] + `"`, the strong
// validator app-lb sends with a deployment and checks If-Match against.
func ETag(s *apitype.DeploymentSpec) (string, error) {
	b, err := Canonical(s)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return `"` + hex.EncodeToString(sum[:]) + `"`, nil
}

// errIfMatch is the message app-lb answers a malformed If-Match with.
const errIfMatch = `If-Match must be one strong ETag (a quoted 64-hex SHA-256 as sent in ETag)`

// ParseIfMatch checks an If-Match header and returns the tag in the form
// [ETag] produces (quoted, lowercase hex), ready to compare. Only one strong
// tag is accepted: no "*", no W/ weak tags, no lists — a conditional edit
// must name the exact revision it read.
func ParseIfMatch(h string) (string, error) {
	t := strings.Trim(h, " \t")
	switch {
	case t == "":
		return "", errors.New(errIfMatch + ": the header is empty")
	case strings.HasPrefix(t, "W/"):
		return "", errors.New(errIfMatch + ": weak tags are not accepted")
	case strings.Contains(t, ","):
		return "", errors.New(errIfMatch + ": a list of tags is not accepted")
	case t == "*":
		return "", errors.New(errIfMatch + `: "*" is not accepted`)
	}
	if len(t) != 66 || t[0] != '"' || t[65] != '"' {
		return "", errors.New(errIfMatch)
	}
	hexPart := t[1:65]
	for i := 0; i < len(hexPart); i++ {
		c := hexPart[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return "", errors.New(errIfMatch)
		}
	}
	return `"` + strings.ToLower(hexPart) + `"`, nil
}
