// Package client is a Go client for berth's admin API, which is
// wire-compatible with app-lb's: the same paths, the same JSON (the types in
// package apitype) and the same error envelope.
//
// A [Client] is safe for concurrent use. Every method takes a context, which
// bounds the request together with the HTTP client's own timeout. Errors the
// server reports come back as [*Error], so callers can branch on the status
// with [IsNotFound] and friends, or read [Error.Code].
//
// The package imports only the standard library and apitype, so that a
// program can drive berth without linking the server.
package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// DefaultTimeout bounds a whole request, response body included, when the
// caller does not supply its own *http.Client. Admin calls are short; a
// server that takes longer than this is stuck, and a CLI should say so
// rather than hang.
const DefaultTimeout = 30 * time.Second

// MaxResponseBytes is the most the client reads of one response body. A
// /metrics reply for a large fleet is a few MiB; anything past this is a
// misbehaving server or not berth at all, and must not exhaust memory.
const MaxResponseBytes = 64 << 20

// maxResponseBytes is the limit in force; tests lower it so they need not
// send 64 MiB.
var maxResponseBytes int64 = MaxResponseBytes

// maxErrorBytes is the most read of an error body: the envelope is one
// sentence, and the rest of an HTML error page helps no one.
const maxErrorBytes = 64 << 10

// Client talks to one berth admin API. Create it with [New].
type Client struct {
	base      string // scheme://host[/path], no trailing slash
	hc        *http.Client
	auth      string // Authorization header value; empty sends none
	userAgent string
	tlsConf   *tls.Config // WithTLSConfig's, applied to hc at the end of New
}

// Option configures a [Client] in [New].
type Option func(*Client) error

// WithHTTPClient makes the client send its requests through hc, for custom
// transports, TLS settings or timeouts. hc's Timeout applies as is; zero
// means no timeout beyond the request's context.
func WithHTTPClient(hc *http.Client) Option {
	return func(c *Client) error {
		if hc == nil {
			return errors.New("client: WithHTTPClient: nil *http.Client")
		}
		c.hc = hc
		return nil
	}
}

// WithTLSConfig makes the client verify the server (and present client
// certificates) with conf, for an admin API served over HTTPS with a
// private CA (RootCAs) or, for testing, without verification
// (InsecureSkipVerify). It applies to the HTTP client in use when [New]
// returns: the default one, or one from [WithHTTPClient] whose Transport
// is an *http.Transport (or nil), which is copied rather than modified.
func WithTLSConfig(conf *tls.Config) Option {
	return func(c *Client) error {
		if conf == nil {
			return errors.New("client: WithTLSConfig: nil *tls.Config")
		}
		c.tlsConf = conf
		return nil
	}
}

// WithToken authenticates every request with `Authorization: Bearer token`,
// as an app token (berth_…) or a federated credential. It replaces any
// earlier [WithBasicAuth].
func WithToken(token string) Option {
	return func(c *Client) error {
		if token == "" {
			return errors.New("client: WithToken: empty token")
		}
		if !validHeaderValue(token) || strings.ContainsAny(token, " \t") {
			return errors.New("client: WithToken: token contains whitespace or control characters")
		}
		c.auth = "Bearer " + token
		return nil
	}
}

// WithBasicAuth authenticates every request as the operator, with
// `Authorization: Basic …`. The server compares the encoded header byte for
// byte, so it is built here exactly as app-lb expects: standard base64 of
// "user:password", with padding. It replaces any earlier [WithToken].
func WithBasicAuth(user, password string) Option {
	return func(c *Client) error {
		if strings.Contains(user, ":") {
			return errors.New("client: WithBasicAuth: user must not contain ':'")
		}
		c.auth = "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+password))
		return nil
	}
}

// WithUserAgent sets the User-Agent header, so server logs can tell callers
// apart. The default is "berth-client".
func WithUserAgent(ua string) Option {
	return func(c *Client) error {
		if !validHeaderValue(ua) {
			return errors.New("client: WithUserAgent: invalid header value")
		}
		c.userAgent = ua
		return nil
	}
}

// New returns a client for the admin API at baseURL, such as
// "http://127.0.0.1:9090". The URL may carry a path prefix when berth sits
// behind a proxy; it must not carry a query or fragment.
func New(baseURL string, opts ...Option) (*Client, error) {
	if !strings.Contains(baseURL, "://") {
		// Caught here because url.Parse's complaint about "host:port"
		// (a colon in the first path segment) names the wrong problem.
		return nil, fmt.Errorf("client: server URL %q must start with http:// or https://", baseURL)
	}
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("client: invalid server URL %q: %w", baseURL, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("client: server URL %q must start with http:// or https://", baseURL)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("client: server URL %q has no host", baseURL)
	}
	if u.RawQuery != "" || u.Fragment != "" || u.ForceQuery {
		return nil, fmt.Errorf("client: server URL %q must not have a query or fragment", baseURL)
	}
	c := &Client{
		base:      strings.TrimRight(u.String(), "/"),
		hc:        &http.Client{Timeout: DefaultTimeout},
		userAgent: "berth-client",
	}
	for _, opt := range opts {
		if err := opt(c); err != nil {
			return nil, err
		}
	}
	if c.tlsConf != nil {
		var t *http.Transport
		switch rt := c.hc.Transport.(type) {
		case nil:
			t = http.DefaultTransport.(*http.Transport).Clone()
		case *http.Transport:
			t = rt.Clone()
		default:
			return nil, fmt.Errorf("client: WithTLSConfig: the HTTP client's Transport is a %T, not an *http.Transport", rt)
		}
		t.TLSClientConfig = c.tlsConf.Clone()
		hc := *c.hc
		hc.Transport = t
		c.hc = &hc
	}
	return c, nil
}

// BaseURL returns the server URL the client sends to, without a trailing
// slash.
func (c *Client) BaseURL() string { return c.base }

// Do sends one request to the admin API and decodes the reply. It is what
// the typed methods are built on, exported for routes they do not cover and
// for callers that need the reply exactly as sent.
//
// path is already escaped (use [url.PathEscape] for each segment) and may
// carry a query. body, when not nil, is sent as JSON: a [json.RawMessage] or
// []byte goes out as is (it must be valid JSON), anything else is encoded
// with encoding/json. out, when not nil, receives the reply: a
// *json.RawMessage gets the body's bytes unchanged, anything else is
// decoded into. A status outside 2xx is returned as [*Error]. Do returns
// the response header, for ETag and the like.
func (c *Client) Do(ctx context.Context, method, path string, body, out any) (http.Header, error) {
	return c.send(ctx, method, path, nil, body, out)
}

// send is [Client.Do] with extra request headers.
func (c *Client) send(ctx context.Context, method, path string, header http.Header, body, out any) (http.Header, error) {
	if !strings.HasPrefix(path, "/") {
		return nil, fmt.Errorf("client: path %q must start with /", path)
	}
	var rd io.Reader
	if body != nil {
		b, err := encodeBody(body)
		if err != nil {
			return nil, fmt.Errorf("client: %s %s: %w", method, path, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, fmt.Errorf("client: %s %s: %w", method, path, err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	c.setHeaders(req.Header)

	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err // *url.Error already names the method and URL
	}
	defer resp.Body.Close()

	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBytes))
		return resp.Header, newError(resp.StatusCode, b)
	}
	if out == nil {
		// Drain what is left (bounded) so the connection can be reused.
		io.Copy(io.Discard, io.LimitReader(resp.Body, maxResponseBytes))
		return resp.Header, nil
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	if err != nil {
		return resp.Header, fmt.Errorf("client: %s %s: reading response: %w", method, path, err)
	}
	if int64(len(b)) > maxResponseBytes {
		return resp.Header, fmt.Errorf("client: %s %s: response body exceeds %d bytes", method, path, maxResponseBytes)
	}
	if err := decodeBody(b, out); err != nil {
		return resp.Header, fmt.Errorf("client: %s %s: decoding %d response: %w", method, path, resp.StatusCode, err)
	}
	return resp.Header, nil
}

// setHeaders sets the headers every request carries: the credential and
// the User-Agent. Requests built outside send (the shell's websocket dial,
// exec, logs) call it too, so they authenticate exactly as the rest do.
func (c *Client) setHeaders(h http.Header) {
	h.Set("User-Agent", c.userAgent)
	if c.auth != "" {
		h.Set("Authorization", c.auth)
	}
}

// encodeBody turns a request body into JSON bytes.
func encodeBody(body any) ([]byte, error) {
	var b []byte
	switch v := body.(type) {
	case json.RawMessage:
		b = v
	case []byte:
		b = v
	default:
		return json.Marshal(body)
	}
	if !json.Valid(b) {
		return nil, errors.New("request body is not valid JSON")
	}
	return b, nil
}

// decodeBody stores a reply in out.
func decodeBody(b []byte, out any) error {
	if len(bytes.TrimSpace(b)) == 0 {
		return errors.New("empty body")
	}
	if raw, ok := out.(*json.RawMessage); ok {
		if !json.Valid(b) {
			return errors.New("body is not valid JSON")
		}
		*raw = append((*raw)[:0], b...)
		return nil
	}
	return json.Unmarshal(b, out)
}

// validHeaderValue reports whether s can be sent in a header without being
// rejected by net/http or splitting the header.
func validHeaderValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}
