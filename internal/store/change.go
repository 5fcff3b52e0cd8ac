package store

// Kinds of the records every host of a fleet shares when its hosts share
// one store (berth serve --store etcd:// on several hosts): the fleet's
// configuration. A change of one on any host reaches the others as a
// Change, and each host brings what it holds in memory up to date. Every
// other kind of record (Computers, replicas, jobs, rollouts, workspaces,
// images and pulls, disks, feeds, alerts) belongs to the host that wrote
// it, and no other host sees it.
const (
	KindDeployments         = "deployments"
	KindUpstreamDrains      = "upstreamdrains"
	KindNamespaces          = "namespaces"
	KindAuthProviders       = "authproviders"
	KindTokens              = "tokens"
	KindSecrets             = "secrets"
	KindRegistryCredentials = "registrycredentials"
	KindGuardRules          = "guardrules"
	KindRateLimits          = "ratelimits"
	KindSessions            = "sessions"
	KindSessionHashes       = "sessionhashes"
	KindWebhooks            = "webhooks"
	KindObsAlerts           = "obsalerts"
)

// SharedKinds lists the kinds above.
var SharedKinds = []string{
	KindDeployments, KindUpstreamDrains, KindNamespaces, KindAuthProviders,
	KindTokens, KindSecrets, KindRegistryCredentials, KindGuardRules,
	KindRateLimits, KindSessions, KindSessionHashes, KindWebhooks, KindObsAlerts,
}

// Change is one shared record written or deleted on a store several hosts
// share, by any of them (the host that hears it included).
//
// A Change with Kind "" says changes may have been missed (the watch fell
// behind etcd's compaction): everything shared may have changed, and a
// host must reload all of it.
type Change struct {
	Kind    string   // one of SharedKinds, or "" (reload everything)
	Key     []string // the record's key after its kind, unescaped (a deployment: its id)
	Deleted bool
}
