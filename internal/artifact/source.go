package artifact

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/berth-dev/berth/internal/netguard"
	"github.com/berth-dev/berth/internal/spec"
)

// Source is a store a job reads artifacts from.
type Source interface {
	// Resolve turns a ref — a tag, or a digest ("<hex>", "sha256:<hex>")
	// — into the digest (hex) it names now.
	Resolve(ctx context.Context, ref string) (string, error)
	// Fetch streams blob digest and its size (-1 when unknown), verifying
	// the bytes as they pass: the reader's last Read (or Close after
	// reading everything) fails with a *DigestMismatchError naming both
	// digests if the store sent other bytes.
	Fetch(ctx context.Context, digest string) (io.ReadCloser, int64, error)
}

// OpenOptions say what Open may reach.
type OpenOptions struct {
	// Local is berth's own store, for "local" and for URLs that name
	// berth's own admin API; nil refuses both.
	Local *Store
	// Self is berth's listeners: a URL reaching one of them is berth's own
	// admin API and is read from Local (through the URL's namespace, which
	// must be the deployment's) rather than over HTTP.
	Self *netguard.Self
	// AllowPrivate lets external stores be reached at loopback, private
	// (RFC 1918, fc00::/7), CGNAT and unspecified addresses. Off by default
	// so that a tenant's spec cannot make berth fetch from the operator's
	// internal network; an operator whose store lives there turns it on
	// (berth serve --artifact-allow-private), as do tests on loopback.
	// Link-local and cloud metadata addresses are refused regardless,
	// unless AllowLinkLocal.
	AllowPrivate   bool
	AllowLinkLocal bool
	// Roots lists the directories an absolute local store root may lie in;
	// empty refuses absolute roots (they read the host's disk, so only the
	// operator may name where).
	Roots []string
	// Timeout bounds each HTTP response head and an idle body; zero is 30 s.
	Timeout time.Duration
	// Transport overrides the guarded HTTP transport (tests).
	Transport http.RoundTripper
}

// Open returns the Source a `store` string names, for a deployment in
// namespace ns, with key the store's API key (a secret's value; "" none):
//
//	local                         this berth's store, through namespace ns
//	http(s)://…/namespaces/N/artifacts
//	                              a berth admin API's namespace route; this
//	                              berth's own is read from Local, and only
//	                              when N is ns
//	http(s)://…                   an external `art serve` store, key as
//	                              Bearer, connections guarded (OpenOptions)
//	/abs/path                     a store root on this host, laid out as
//	                              Store lays out its own, within o.Roots
func Open(store, ns, key string, o OpenOptions) (Source, error) {
	switch {
	case store == "local":
		if o.Local == nil {
			return nil, errors.New("store local: this server has no artifact store")
		}
		return nsSource{s: o.Local, ns: ns}, nil
	case strings.HasPrefix(store, "/"):
		return openRoot(store, o.Roots)
	case strings.HasPrefix(store, "http://") || strings.HasPrefix(store, "https://"):
		return openURL(store, ns, key, o)
	}
	return nil, fmt.Errorf("store %q: not local, an http(s):// URL or an absolute store root", store)
}

// nsSource reads berth's own store through a namespace.
type nsSource struct {
	s  *Store
	ns string
}

func (n nsSource) Resolve(_ context.Context, ref string) (string, error) {
	if hex, ok := ParseDigest(ref); ok {
		if !n.s.Claimed(n.ns, hex) {
			return "", fmt.Errorf("no blob sha256:%s in namespace %q", hex, n.ns)
		}
		return hex, nil
	}
	if why := CheckTag(ref); why != "" {
		return "", fmt.Errorf("ref: %s", why)
	}
	rec, err := n.s.Tag(fullTag(n.ns, ref))
	if errors.Is(err, ErrNotFound) {
		return "", notFound(fmt.Sprintf("no tag %q in namespace %q", ref, n.ns))
	}
	return rec.Digest, err
}

func (n nsSource) Fetch(_ context.Context, digest string) (io.ReadCloser, int64, error) {
	hex, ok := ParseDigest(digest)
	if !ok {
		return nil, 0, fmt.Errorf("%q is not a sha256 digest", digest)
	}
	if !n.s.Claimed(n.ns, hex) {
		return nil, 0, fmt.Errorf("no blob sha256:%s in namespace %q", hex, n.ns)
	}
	f, size, err := n.s.OpenBlob(hex)
	if err != nil {
		return nil, 0, fmt.Errorf("blob sha256:%s: %w", hex, err)
	}
	return verify(f, hex, size), size, nil
}

// rootSource reads a store directory on this host directly.
type rootSource struct{ s *Store }

func openRoot(root string, allowed []string) (Source, error) {
	if why := spec.CheckStore(root); why != "" {
		return nil, errors.New("store " + why)
	}
	ok := false
	for _, a := range allowed {
		if rel, err := filepath.Rel(a, root); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
			ok = true
			break
		}
	}
	if !ok {
		return nil, fmt.Errorf("store %q: not in a directory the operator allows store roots in", root)
	}
	// Not NewStore: reading must not create or empty anything there.
	return rootSource{s: &Store{root: root, max: DefaultMaxBlobBytes, now: time.Now}}, nil
}

func (rs rootSource) Resolve(_ context.Context, ref string) (string, error) {
	if hex, ok := ParseDigest(ref); ok {
		return hex, nil
	}
	if why := CheckTag(ref); why != "" {
		return "", fmt.Errorf("ref: %s", why)
	}
	rec, err := rs.s.Tag(ref)
	if errors.Is(err, ErrNotFound) {
		return "", notFound(fmt.Sprintf("no tag %q in store %s", ref, rs.s.root))
	}
	return rec.Digest, err
}

func (rs rootSource) Fetch(_ context.Context, digest string) (io.ReadCloser, int64, error) {
	hex, ok := ParseDigest(digest)
	if !ok {
		return nil, 0, fmt.Errorf("%q is not a sha256 digest", digest)
	}
	f, size, err := rs.s.OpenBlob(hex)
	if err != nil {
		return nil, 0, fmt.Errorf("blob sha256:%s in store %s: %w", hex, rs.s.root, err)
	}
	return verify(f, hex, size), size, nil
}

// httpSource speaks the protocol to base (…/blobs, …/tags).
type httpSource struct {
	base    string // no trailing slash
	key     string
	client  *http.Client
	timeout time.Duration
}

func openURL(store, ns, key string, o OpenOptions) (Source, error) {
	if why := spec.CheckStore(store); why != "" {
		return nil, errors.New("store " + why)
	}
	u, _ := url.Parse(store)
	if o.Timeout <= 0 {
		o.Timeout = 30 * time.Second
	}
	base := strings.TrimSuffix(store, "/")
	// berth's own admin API: read the store itself, held to the
	// deployment's namespace whatever key the spec carries.
	if urlNS, ok := adminNamespace(u.Path); ok && o.Self != nil && reachesSelf(o.Self, u) {
		if urlNS != ns {
			return nil, foreignNamespace(store, urlNS, ns)
		}
		if o.Local == nil {
			return nil, errors.New("store names this server, which has no artifact store")
		}
		return nsSource{s: o.Local, ns: ns}, nil
	}
	rt := o.Transport
	if rt == nil {
		rt = guardedTransport(o)
	}
	return &httpSource{base: base, key: key, timeout: o.Timeout, client: &http.Client{Transport: rt,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}, nil
}

// CheckNamespace refuses a store that names this server's own artifact
// route (its admin URL form, …/namespaces/N/artifacts, at one of its
// listeners) for a namespace N other than ns: a deployment reads and
// writes only its own namespace's artifacts. Open refuses the same store
// when it is used; this lets a spec write be refused before it is stored.
// It makes no request (host names are resolved, as reachesSelf does).
func CheckNamespace(store, ns string, self *netguard.Self) error {
	if self == nil || !(strings.HasPrefix(store, "http://") || strings.HasPrefix(store, "https://")) {
		return nil
	}
	u, err := url.Parse(store)
	if err != nil {
		return nil // the form is spec.CheckStore's to judge
	}
	if urlNS, ok := adminNamespace(u.Path); ok && urlNS != ns && reachesSelf(self, u) {
		return foreignNamespace(store, urlNS, ns)
	}
	return nil
}

func foreignNamespace(store, urlNS, ns string) error {
	return fmt.Errorf("store %q names namespace %q's artifacts; a deployment in %q reads and writes only its own", store, urlNS, ns)
}

// adminNamespace reports whether p is a berth admin API's namespace
// artifact route, and which namespace.
func adminNamespace(p string) (string, bool) {
	p = strings.TrimSuffix(p, "/")
	rest, ok := strings.CutSuffix(p, "/artifacts")
	if !ok {
		return "", false
	}
	i := strings.LastIndex(rest, "/namespaces/")
	if i < 0 || strings.Contains(rest[i+len("/namespaces/"):], "/") {
		return "", false
	}
	return rest[i+len("/namespaces/"):], true
}

// reachesSelf reports whether u's host and port resolve to one of berth's
// listeners.
func reachesSelf(self *netguard.Self, u *url.URL) bool {
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	p, err := netip.ParseAddrPort(net.JoinHostPort("0.0.0.0", port))
	if err != nil {
		return false
	}
	host := u.Hostname()
	addrs := []netip.Addr{}
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = append(addrs, a)
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ips, _ := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		addrs = append(addrs, ips...)
	}
	for _, a := range addrs {
		if self.Contains(netip.AddrPortFrom(a, p.Port())) {
			return true
		}
	}
	return false
}

// guardedTransport dials only addresses OpenOptions allow, checked after
// name resolution (netguard.Refuse plus the private ranges), with no
// proxy from the environment.
func guardedTransport(o OpenOptions) http.RoundTripper {
	d := &net.Dialer{Timeout: 10 * time.Second, Control: func(_, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("artifact store address %q: not an IP address and port", address)
		}
		if why := netguard.Refuse(o.Self, o.AllowLinkLocal, ap); why != "" {
			return fmt.Errorf("artifact store address %s refused: %s", ap, why)
		}
		if a := ap.Addr().Unmap(); !o.AllowPrivate && (a.IsLoopback() || a.IsPrivate() || a.IsUnspecified() || cgnat.Contains(a)) {
			return fmt.Errorf("artifact store address %s refused: it is a loopback or private address (the operator may allow them)", ap)
		}
		return nil
	}}
	return &http.Transport{
		Proxy: nil, DialContext: d.DialContext, TLSHandshakeTimeout: 10 * time.Second,
		ResponseHeaderTimeout: o.Timeout, IdleConnTimeout: 90 * time.Second, ForceAttemptHTTP2: true,
	}
}

var cgnat = netip.MustParsePrefix("100.64.0.0/10")

func (h *httpSource) get(ctx context.Context, p string) (*http.Response, context.CancelFunc, error) {
	ctx, cancel := context.WithCancel(ctx)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.base+p, nil)
	if err != nil {
		cancel()
		return nil, nil, err
	}
	if h.key != "" {
		req.Header.Set("Authorization", "Bearer "+h.key)
	}
	resp, err := h.client.Do(req)
	if err != nil {
		cancel()
		return nil, nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		defer cancel()
		var env struct {
			Error string `json:"error"`
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		msg := strings.TrimSpace(string(b))
		if json.Unmarshal(b, &env) == nil && env.Error != "" {
			msg = env.Error
		}
		if resp.StatusCode == http.StatusNotFound {
			return nil, nil, fmt.Errorf("%w: %s", ErrNotFound, msg)
		}
		return nil, nil, fmt.Errorf("artifact store answered %s: %s", resp.Status, msg)
	}
	return resp, cancel, nil
}

func (h *httpSource) Resolve(ctx context.Context, ref string) (string, error) {
	if hex, ok := ParseDigest(ref); ok {
		return hex, nil
	}
	if why := CheckTag(ref); why != "" {
		return "", fmt.Errorf("ref: %s", why)
	}
	resp, cancel, err := h.get(ctx, "/tags/"+ref)
	if err != nil {
		return "", fmt.Errorf("tag %q: %w", ref, err)
	}
	defer cancel()
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return "", fmt.Errorf("tag %q: %w", ref, err)
	}
	// berth answers a TagView; a plain `art` store may answer the bare
	// digest.
	var v TagView
	d := strings.TrimSpace(string(b))
	if json.Unmarshal(b, &v) == nil && v.Digest != "" {
		d = v.Digest
	}
	hex, ok := ParseDigest(d)
	if !ok {
		return "", fmt.Errorf("tag %q: the store answered no digest", ref)
	}
	return hex, nil
}

func (h *httpSource) Fetch(ctx context.Context, digest string) (io.ReadCloser, int64, error) {
	hex, ok := ParseDigest(digest)
	if !ok {
		return nil, 0, fmt.Errorf("%q is not a sha256 digest", digest)
	}
	resp, cancel, err := h.get(ctx, "/blobs/"+hex)
	if err != nil {
		return nil, 0, fmt.Errorf("blob sha256:%s: %w", hex, err)
	}
	body := &idleBody{rc: resp.Body, cancel: cancel, idle: h.timeout}
	body.arm()
	return verify(body, hex, resp.ContentLength), resp.ContentLength, nil
}

// idleBody cancels a response whose body goes idle longer than idle.
type idleBody struct {
	rc     io.ReadCloser
	cancel context.CancelFunc
	idle   time.Duration
	t      *time.Timer
}

func (b *idleBody) arm() { b.t = time.AfterFunc(b.idle, b.cancel) }

func (b *idleBody) Read(p []byte) (int, error) {
	b.t.Reset(b.idle)
	return b.rc.Read(p)
}

func (b *idleBody) Close() error {
	b.t.Stop()
	err := b.rc.Close()
	b.cancel()
	return err
}

// verify wraps rc so that reading to its end checks the bytes against hex
// (and size, when known).
func verify(rc io.ReadCloser, hex string, size int64) io.ReadCloser {
	return &verifier{rc: rc, h: sha256.New(), want: hex, size: size}
}

type verifier struct {
	rc   io.ReadCloser
	h    hash.Hash
	want string
	size int64
	n    int64
	err  error
}

func (v *verifier) Read(p []byte) (int, error) {
	if v.err != nil {
		return 0, v.err
	}
	n, err := v.rc.Read(p)
	v.h.Write(p[:n])
	v.n += int64(n)
	if err == io.EOF {
		if got := hexOf(v.h.Sum(nil)); got != v.want {
			err = &DigestMismatchError{Want: v.want, Got: got}
		} else if v.size >= 0 && v.n != v.size {
			err = fmt.Errorf("blob sha256:%s: %d bytes, not the %d announced", v.want, v.n, v.size)
		}
	}
	if err != nil {
		v.err = err
	}
	return n, err
}

func (v *verifier) Close() error { return v.rc.Close() }
