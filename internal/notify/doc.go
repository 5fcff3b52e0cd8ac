// Package notify sends berth's security alerts to webhooks: an operator
// configures a URL and a least severity (`/security/webhooks`, berth's own
// API, not app-lb's), and every alert of at least that severity is POSTed
// there, signed, with retries.
//
// # Delivery
//
// The body is an apitype.WebhookDelivery, {"sent_at": ms, "alert": {...}}
// (and "test": true for the synthetic alert of Notifier.Test), with the
// headers
//
//	Content-Type: application/json
//	X-Berth-Event: security.alert
//	X-Berth-Delivery: dlv_<hex>          the same on every retry of one alert
//	X-Berth-Timestamp: <unix seconds>    of this attempt
//	X-Berth-Signature: sha256=<hex HMAC-SHA256 of "<timestamp>.<body>">
//
// under the webhook's secret, which berth generates and shows once, when the
// webhook is created (the HMAC key is the secret string's bytes, `whsec_…`
// included). A receiver checks the signature with VerifySignature and should
// refuse a timestamp more than a few minutes old, so a captured request
// cannot be replayed; it may drop a delivery id it has seen.
//
// A 2xx answer delivers the alert. Anything else — another status (redirects
// are not followed), a network error, no answer within the request timeout
// (10 s) — is a failed attempt, retried after an exponential backoff with
// jitter (1 s doubling, at most 5 min, each wait drawn from its upper half),
// up to 8 attempts; then the alert is dead-lettered: counted, its last error
// kept, and logged. Each webhook has its own bounded queue and one sender,
// so alerts reach a receiver in the order they were raised, and a slow or
// failing receiver delays only its own; Notifier.Alert never blocks — an
// alert that finds its webhook's queue full is dead-lettered at once.
//
// # Guard
//
// A webhook URL is https, or http to a loopback host. The notifier's client
// refuses, at dial time after name resolution, berth's own listeners
// (Options.Self: the admin API would answer berth itself) and, unless
// Options.AllowLinkLocal, link-local and cloud metadata addresses
// (netguard); literal addresses are also refused when the webhook is
// created. There is no option to hand in another client: it would be a way
// around the guard.
//
// # At rest
//
// A webhook's URL (which can itself be a credential: chat services put a
// token in the path) and its secret are stored only sealed with the secret
// key (secrets.Key, AES-256-GCM, bound to the webhook's id). The counts are
// kept in memory and added to the store in batches; the Prometheus counter
// berth_webhook_deliveries_total{webhook, outcome} (outcome delivered,
// failed or dead_lettered) reports the same cumulative numbers.
package notify
