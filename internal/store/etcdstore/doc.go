// Package etcdstore is a second backend for berth's store: the same
// methods, record types (package store's Deployment, Namespace, Token, ...)
// and errors (wrapping store.ErrNotFound and store.ErrConflict) as the
// SQLite *store.Store, kept in an etcd cluster so that several berth hosts
// can share it. It covers deployments, namespaces and auth providers,
// tokens, sealed secrets (and the secret key check), guard rules and
// Computer grants; the other entities of package store stay SQLite-only
// for now.
//
// # Keys
//
// Under the prefix given to Open (default /berth/store/), each key
// component path-escaped (url.PathEscape, so a '/' inside an id cannot
// alias another key), every value the JSON encoding of package store's
// record type (byte fields such as a spec base64, so they come back
// verbatim; times RFC 3339 in UTC with nanoseconds):
//
//	deployments/<id>                deployment: id, namespace, spec, revision, created and updated times
//	namespaces/<name>               namespace: name, description, domains, created time
//	authproviders/<ns>/<name>       auth provider: namespace, name, spec, created time
//	tokens/<id>                     token: every store.Token field; the secret only as its SHA-256
//	secrets/<ns>/<id>               sealed secret: namespace, id, the sealed blob, updated time
//	secretkeycheck                  the sealed secret key check (written once)
//	guardrules/<id>                 guard rule: every store.GuardRule field, hit counters included
//	grants/<id>                     Computer grant: its Computer, the signed payload, expiry, issue and revocation times
//	jobs/<id>                       job: every store.Job field; ordered by the key's etcd CreateRevision (SQLite's seq)
//	workflows/<id>                  workflow: id and spec
//	pulls/<deployment>/<path>       mount pull: every store.MountPull field; the artifact pull (path "") at pulls/<deployment>/
//	pulledimages/<name>             pulled image: name, manifest digest, layers, config (namespaces under pulledimagens/)
//	pulledimagens/<name>/<ns>       a namespace that resolved the pulled image name; value the namespace
//	registrycredentials/<ns>/<host> registry credential mapping: namespace, host and the id of the secret (never its value)
//	imageconfigs/<name>             a built image's run defaults: name and config JSON
//	rollouts/<deployment>/<op>      rollout: every store.Rollout field; ordered by the key's etcd CreateRevision (SQLite's seq)
//	replicas/<replica>              replica template digest: replica, deployment, key digest
//
// # Writes
//
// Every write is one etcd transaction. A read-modify-write (a deployment's
// revision, a namespace's kept creation time, a token's last use, guard
// hits) reads the key and commits only if the key's ModRevision is still
// the one read; when another writer got in between, it decides again on
// what that writer left (the transaction's else branch returns it), so two
// writers at the same expected revision can never both succeed. A
// deployment's Revision is kept in its value (1 on create, +1 per write,
// afresh after a delete), independent of etcd's own revisions.
//
// Lists are sorted in Go exactly as the SQLite store's ORDER BY clauses
// sort them (byte order of the ids; guard rules by creation time, then
// id). Each call whose context has no deadline is bounded by
// DefaultOpTimeout.
//
// Multi-key writes are split when they exceed etcd's default limit of 128
// operations per transaction: DeleteGuardRules, AddGuardHits,
// RevokeGrants and PruneGrants over more than 128 keys commit in several
// transactions of at most 128 each (each one whole or not at all).
//
// DeleteDeployment deletes only the deployment: the upstream drains, rate
// limits and pulls that the SQLite store deletes with it are not kept here.
package etcdstore
