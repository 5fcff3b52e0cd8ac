package apitype

// FeedIndexEntry is the contract's FeedIndexEntry.
//
// One namespace that has feed events, from `GET /feeds`.
type FeedIndexEntry struct {
	Namespace string `json:"namespace"`
	Events    int    `json:"events"`
}

// FeedEvent is the contract's FeedEvent.
//
// One event from a namespace's feed (`GET /feeds/:ns?format=json`) — the same
// entries the RSS document carries; `id` is the RSS `<guid>`.
type FeedEvent struct {
	ID int64 `json:"id"`
	// When the event first happened (unix seconds).
	Ts int64 `json:"ts"`
	// When it last happened — repeats of the same issue fold into one entry.
	LastTs     int64         `json:"last_ts"`
	Count      int           `json:"count"`
	Namespace  string        `json:"namespace"`
	Deployment string        `json:"deployment"`
	Kind       FeedEventKind `json:"kind"`
	Title      string        `json:"title"`
	Detail     string        `json:"detail"`
}

// FeedEventKind classifies a feed event.
type FeedEventKind string

// The FeedEventKind values the contract names.
const (
	FeedDeployed FeedEventKind = "deployed"
	FeedUpdated  FeedEventKind = "updated"
	FeedRemoved  FeedEventKind = "removed"
	FeedIssue    FeedEventKind = "issue"
)
