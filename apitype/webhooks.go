package apitype

// The security alert webhooks are berth's own (`/security/webhooks`):
// app-lb keeps only an in-memory list of alerts and has no webhooks, so none
// of the types below is part of app-lb's contract, and none is declared in
// it or in internal/contracttest's documented.d.ts. Timestamps are unix
// seconds, except `sent_at` of a delivery, which is epoch millis like an
// alert's `ts`.

// WebhookSpec is berth's own body of `POST /security/webhooks`: where to
// send the security alerts of at least a severity. The body is closed: a key
// not named here is refused.
//
// There is no secret in it: berth generates each webhook's signing key and
// shows it once, in the reply to the POST ([WebhookView.Secret]).
type WebhookSpec struct {
	// `https://…`; plain `http://` only to a loopback host (127.0.0.0/8,
	// ::1, `localhost`). No user info in it.
	URL string `json:"url"`
	// The least severity sent. Defaults to `high`.
	MinSeverity Severity `json:"min_severity,omitempty"`
	Note        string   `json:"note,omitempty"`
}

// WebhookView is berth's own: one webhook of `GET /security/webhooks` (an
// array of them, oldest first), and the reply to `POST /security/webhooks`.
// The counts are cumulative since the webhook was created, and survive
// restarts (they are persisted in batches, so a crash may lose the last
// few).
type WebhookView struct {
	ID          string   `json:"id"`
	URL         string   `json:"url"`
	MinSeverity Severity `json:"min_severity"`
	Note        string   `json:"note,omitempty"`
	CreatedAt   int64    `json:"created_at"`
	// Alerts the receiver accepted (answered 2xx).
	Delivered int64 `json:"delivered"`
	// Attempts that failed (a status other than 2xx, or no answer); each is
	// retried until the attempts run out.
	Failed int64 `json:"failed"`
	// Alerts given up on: every attempt failed, or the webhook's queue was
	// full when the alert was raised.
	DeadLettered int64 `json:"dead_lettered"`
	// Why the last failed attempt failed; cleared by the next delivery.
	LastError string `json:"last_error,omitempty"`
	// When an alert was last delivered.
	LastDeliveryAt *int64 `json:"last_delivery_at,omitempty"`
	// The HMAC-SHA256 signing key, present only in the reply to the POST that
	// created the webhook: berth keeps it sealed and never shows it again.
	// Receivers check `X-Berth-Signature` with it (see package notify's
	// VerifySignature).
	Secret string `json:"secret,omitempty"`
}

// WebhookDelivery is berth's own: the body POSTed to a webhook. It is signed:
// `X-Berth-Signature: sha256=<hex HMAC-SHA256 of "<X-Berth-Timestamp>.<body>">`
// under the webhook's secret. `X-Berth-Delivery` names the delivery and is
// the same on every retry of it, so a receiver can drop duplicates.
type WebhookDelivery struct {
	// When this attempt was sent, epoch millis (a retry sends a later one).
	SentAt int64 `json:"sent_at"`
	// A synthetic alert sent by `POST /security/webhooks/:id/test`.
	Test  bool          `json:"test,omitempty"`
	Alert SecurityAlert `json:"alert"`
}

// WebhookTest is berth's own reply (202) to
// `POST /security/webhooks/:id/test`: the delivery queued, as its
// `X-Berth-Delivery` header will name it. The outcome shows in the
// webhook's counts.
type WebhookTest struct {
	Delivery string `json:"delivery"`
}
