package notify

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/netguard"
	"github.com/berth-dev/berth/internal/web"
)

// The headers of a delivery.
const (
	HeaderEvent     = "X-Berth-Event"
	HeaderDelivery  = "X-Berth-Delivery"
	HeaderTimestamp = "X-Berth-Timestamp"
	HeaderSignature = "X-Berth-Signature"
	// EventSecurityAlert is the X-Berth-Event of every delivery.
	EventSecurityAlert = "security.alert"
)

// send is h's sender: it delivers h's queue in order until h is deleted or
// the notifier closed, then dead-letters what is left.
func (n *Notifier) send(h *hook) {
	for {
		select {
		case j := <-h.q:
			n.deliver(h, j)
			n.done()
			continue
		case <-h.ctx.Done():
		}
		for left := 0; ; left++ {
			select {
			case <-h.q:
				n.deadLetter(h)
				n.done()
				continue
			default:
			}
			if left > 0 {
				n.o.Log.Warn("webhook stopped with alerts still queued: dead-lettered", "webhook", h.id, "alerts", left)
			}
			return
		}
	}
}

// deliver sends j to h, retrying, and counts the outcome.
func (n *Notifier) deliver(h *hook, j job) {
	for attempt := 1; ; attempt++ {
		err := n.post(h, j)
		if err == nil {
			n.delivered(h, n.o.Now())
			return
		}
		if h.ctx.Err() != nil { // stopped mid-request: not the receiver's failure
			n.deadLetter(h)
			return
		}
		msg := err.Error()
		n.failedAttempt(h, msg)
		if attempt >= n.o.Attempts {
			n.deadLetter(h)
			n.o.Log.Warn("webhook delivery dead-lettered: every attempt failed", "webhook", h.id,
				"delivery", j.delivery, "attempts", attempt, "rule", j.alert.Rule, "severity", j.alert.Severity, "err", msg)
			return
		}
		if n.o.Sleep(h.ctx, n.backoff(attempt)) != nil {
			n.deadLetter(h)
			return
		}
	}
}

// backoff is the wait after failed attempt n (1-based): Backoff.
func (n *Notifier) backoff(attempt int) time.Duration {
	return Backoff(n.o.Backoff, n.o.MaxBackoff, attempt)
}

// Backoff is a delivery's wait after failed attempt n (1-based): base
// doubling per attempt up to max, drawn uniformly from its upper half, so
// the senders of many berths a receiver's outage failed do not retry in
// step.
func Backoff(base, max time.Duration, attempt int) time.Duration {
	d := base
	for i := 1; i < attempt && d < max; i++ {
		d *= 2
	}
	d = min(d, max)
	half := d / 2
	return half + rand.N(d-half+1)
}

// post makes one attempt.
func (n *Notifier) post(h *hook, j job) error {
	now := n.o.Now()
	body, err := json.Marshal(apitype.WebhookDelivery{SentAt: now.UnixMilli(), Test: j.test, Alert: j.alert})
	if err != nil {
		return fmt.Errorf("could not encode the alert: %v", err)
	}
	ts := strconv.FormatInt(now.Unix(), 10)
	return Post(h.ctx, n.client, h.url, "berth-webhooks/1", body, func(hd http.Header) {
		hd.Set(HeaderEvent, EventSecurityAlert)
		hd.Set(HeaderDelivery, j.delivery)
		hd.Set(HeaderTimestamp, ts)
		hd.Set(HeaderSignature, Sign(h.secret, ts, body))
	})
}

// Post makes one delivery attempt: body, JSON, POSTed to url as agent with
// the headers header sets (X-Berth-Event and the like), the answer drained
// so that the connection is reused; an answer outside 2xx is an error. No
// error carries the URL (Scrub): it may be a credential.
func Post(ctx context.Context, client *http.Client, url, agent string, body []byte, header func(http.Header)) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("bad webhook URL: %v", Scrub(err))
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", agent)
	header(req.Header)
	resp, err := client.Do(req)
	if err != nil {
		return Scrub(err)
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("the receiver answered %s", resp.Status)
	}
	return nil
}

// Scrub drops the URL from a client error: the URL may be a credential,
// and the error is shown and stored as last_error.
func Scrub(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		if ue.Timeout() {
			return errors.New("no answer within the request timeout")
		}
		return ue.Err
	}
	return err
}

// Sign returns the X-Berth-Signature of body sent at timestamp (unix seconds,
// as in X-Berth-Timestamp) under secret: "sha256=" and the hex HMAC-SHA256
// of "<timestamp>.<body>".
func Sign(secret []byte, timestamp string, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(timestamp))
	m.Write([]byte{'.'})
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// ErrBadSignature: a delivery's signature does not match.
var ErrBadSignature = errors.New("notify: the signature does not match")

// VerifySignature checks a delivery as its receiver would: header is the
// X-Berth-Signature, timestamp the X-Berth-Timestamp and body the raw body
// received; secret is the webhook's secret as berth showed it (`whsec_…`).
// It compares in constant time. It does not judge the timestamp's age: a
// receiver should also refuse one more than a few minutes from its clock,
// so that a captured delivery cannot be replayed.
func VerifySignature(secret, timestamp string, body []byte, header string) error {
	hexSig, ok := strings.CutPrefix(header, "sha256=")
	if !ok {
		return fmt.Errorf("%w: expected sha256=<hex>", ErrBadSignature)
	}
	got, err := hex.DecodeString(hexSig)
	if err != nil {
		return fmt.Errorf("%w: not hex", ErrBadSignature)
	}
	want, _ := hex.DecodeString(strings.TrimPrefix(Sign([]byte(secret), timestamp, body), "sha256="))
	if !hmac.Equal(got, want) {
		return ErrBadSignature
	}
	return nil
}

// guardedClient is the client webhooks are sent with. The URL is the
// operator's, but what a name resolves to is not: like an upstream or an
// identity provider, a webhook may not reach berth's own listeners (the
// admin API would answer berth itself) nor, unless allowed, link-local and
// metadata addresses — checked at dial time, after resolution, on every
// connection. No proxy from the environment (it would dial for us); no
// redirects followed; timeouts on every step.
func guardedClient(self *netguard.Self, allowLinkLocal bool, timeout time.Duration) *http.Client {
	return netguard.Client(self, allowLinkLocal, "webhook", timeout)
}

// refuse says why a webhook may not connect to ap, or nil.
func refuse(ap netip.AddrPort, self *netguard.Self, allowLinkLocal bool) error {
	if why := netguard.Refuse(self, allowLinkLocal, ap); why != "" {
		return fmt.Errorf("webhook address %s refused: %s", ap, why)
	}
	return nil
}

// Limits of a WebhookSpec.
const (
	maxURLLen  = 2048
	maxNoteLen = 1024
)

// checkSpec validates spec and fills in its defaults.
func checkSpec(spec *apitype.WebhookSpec, self *netguard.Self, allowLinkLocal bool) error {
	if spec.MinSeverity == "" {
		spec.MinSeverity = DefaultMinSeverity
	}
	if rank(spec.MinSeverity) > rank(apitype.SeverityCritical) {
		return &web.FieldError{Field: "min_severity", Msg: fmt.Sprintf("%q is not a severity (info, low, medium, high, critical)", spec.MinSeverity)}
	}
	if len(spec.Note) > maxNoteLen {
		return &web.FieldError{Field: "note", Msg: fmt.Sprintf("longer than %d bytes", maxNoteLen)}
	}
	if spec.URL == "" {
		return &web.FieldError{Field: "url", Msg: "required"}
	}
	if err := CheckURL(spec.URL, self, allowLinkLocal, true); err != nil {
		return &web.FieldError{Field: "url", Msg: err.Error()}
	}
	return nil
}

// CheckURL says why raw may not be a webhook URL, or nil: it must be an
// https URL (or, with httpLoopback, plain http to a loopback host) naming
// a host, without user info or a fragment, and a literal address must not
// be one Refuse refuses (berth's own listeners; link-local and metadata
// addresses unless allowLinkLocal). Names are checked again at dial time
// by the guarded client. Package obs checks its alerts' webhooks with it.
func CheckURL(raw string, self *netguard.Self, allowLinkLocal, httpLoopback bool) error {
	if len(raw) > maxURLLen {
		return fmt.Errorf("longer than %d bytes", maxURLLen)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return errors.New("not a URL")
	}
	want := "must be an https:// URL"
	if httpLoopback {
		want = "must be an https:// URL (or http:// to a loopback host)"
	}
	switch {
	case u.Scheme != "https" && (u.Scheme != "http" || !httpLoopback):
		return errors.New(want)
	case u.Host == "" || u.Hostname() == "":
		return errors.New("names no host")
	case u.User != nil:
		return errors.New("must not carry user info")
	case u.Fragment != "" || strings.Contains(raw, "#"):
		return errors.New("must not carry a fragment")
	}
	host := u.Hostname()
	addr, literal := netip.ParseAddr(host)
	loopback := strings.EqualFold(host, "localhost") || literal == nil && addr.IsLoopback()
	if u.Scheme == "http" && !loopback {
		return errors.New("must be https (plain http only to a loopback host): the alerts would cross the network in the clear")
	}
	port := uint16(443)
	if u.Scheme == "http" {
		port = 80
	}
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("port %q is not a port", p)
		}
		port = uint16(n)
	}
	if literal == nil {
		if err := refuse(netip.AddrPortFrom(addr, port), self, allowLinkLocal); err != nil {
			return err
		}
	}
	return nil
}
