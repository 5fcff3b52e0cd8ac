// Package etcdstore is a second backend for berth's store: the same
// methods, record types (package store's Deployment, Namespace, Token, ...)
// and errors (wrapping store.ErrNotFound and store.ErrConflict) as the
// SQLite *store.Store, kept in an etcd cluster so that several berth hosts
// can share it. It covers every entity of package store (the server's
// Store interface lists them); berth serve --store etcd://… runs on it.
//
// # Hosts
//
// A Store is one host's (Open names it): the hosts sharing a store share
// the fleet's configuration, the records of store.SharedKinds
// (deployments, upstream drains, namespaces, auth providers, tokens,
// secrets, registry credentials, guard rules, rate limits, sessions and
// their hashes, webhooks, obs alerts) and the secret key check, each at
// <prefix><kind>/…; every other record (Computers and everything of
// theirs, replicas, jobs and workflows, rollouts, workspaces, images and
// pulls, disks, feeds, security alerts, plugins, grants) and every
// per-host counter (computerqueueseq, securityalertseq, computerfactseq)
// is the host's own, at <prefix>hosts/<host>/<kind>/…, which no other
// host reads. Every key is built by one function (Store.key) that knows
// which kinds are shared. WatchShared reports the changes of shared
// records, by any host, as store.Change. Claim holds a host's part,
// hosts/<host>/holder, for one berth.
//
// A cascade across the two (DeleteDeployment deleting the deployment's
// pulls and rollouts) reaches this host's records only; another host's
// stay under its own directory until it drops them.
//
// # Keys
//
// Under the prefix given to Open (default /berth/store/), each key
// component path-escaped (url.PathEscape, so a '/' inside an id cannot
// alias another key), every value the JSON encoding of package store's
// record type (byte fields such as a spec base64, so they come back
// verbatim; times RFC 3339 in UTC with nanoseconds). The shared keys
// below are at the prefix, every other under hosts/<host>/ (the host id
// path-escaped):
//
//	deployments/<id>                deployment: id, namespace, spec, revision, created and updated times
//	namespaces/<name>               namespace: name, description, domains, created time
//	authproviders/<ns>/<name>       auth provider: namespace, name, spec, created time
//	tokens/<id>                     token: every store.Token field; the secret only as its SHA-256
//	secrets/<ns>/<id>               sealed secret: namespace, id, the sealed blob, updated time
//	secretkeycheck                  the sealed secret key check (written once; shared)
//	hosts/<host>/holder             the berth holding host's part (Claim), on its lease
//	guardrules/<id>                 guard rule: every store.GuardRule field, hit counters included
//	grants/<id>                     Computer grant: its Computer, the signed payload, expiry, issue and revocation times
//	computers/<id>                  Computer: every store.Computer field (idle timeout in whole ms)
//	computerslots/<id>              the fleet slot Computer id holds: its id, reservation time
//	computerqueue/<id>              Computer id's queued start: its id, queue seq (FIFO order), queue time
//	computerqueueseq                the last queue seq handed out; every slot or queue write rewrites it, guarding reads of both
//	computerhosts/<host>            host capacity: host id, max active, reserved headroom
//	computerusage/<runtime>         usage interval: every store.UsageInterval field, the acknowledged observation (-1 none)
//	computerrecycles/<runtime>      recycle request: every store.Recycle field
//	computerfactseq/<id>            the last fact seq given to Computer id (a JSON number; never goes back, outlives the Computer)
//	computerfacts/<id>/<seq>        fact, seq zero-padded to 20 digits: seq, time (Unix ms), dedupe key, body
//	computerfactdedupe/<id>/<key>   a dedupe key of a stored fact of Computer id: that fact's seq
//	computerfactsbytime/<at>/<id>/<seq>  retention index, at as 20 digits in signed order: the fact's dedupe key
//	computerports/<id>/<port>       exposed port: its Computer, every store.ComputerPort field
//	workspaces/<deployment>         workspace: every store.Workspace field, the CreateRevision of the deployment's key it belongs to
//	securityalerts/<id, 20 digits>  security alert: every store.SecurityAlert field (JSON verbatim); zero-padded so key order is id order
//	securityalertseq                the last security alert id ever stored (a decimal number; rewritten by every PutSecurityAlerts)
//	diskrecords/<sandbox>           disk decision: every store.DiskRecord field (only non-default records exist)
//	diskarchives/<id>               disk archive: id, sandbox, start, the view JSON verbatim
//	upstreamdrains/<dep>/<upstream> upstream drain: deployment, upstream, reason, start time (deleted with the deployment)
//	feedevents/<id>                 feed event: every store.FeedEvent field, Seq as given by the caller
//	images/<name>                   image: name, digest, size, pin, source, created time
//	obsalerts/<id>                  obs alert rule: every store.ObsAlert field, the sealed webhook verbatim
//	plugins/<id>                    plugin record: id, switch, config JSON verbatim, updated time
//	plugininstalls/<plugin>/<ns>    plugin install: plugin, namespace, install time and installer, config JSON verbatim
//	ratelimits/<dep>                rate limit: every store.RateLimit field (deleted with the deployment)
//	sessions/<id>                   sign-in session: every store.Session field; the secret only as its SHA-256
//	sessionhashes/<sha256>          the id of the session with that secret hash (keeps hashes unique, as SQLite's UNIQUE does)
//	webhooks/<id>                   security alert webhook: the sealed configuration, severity, note, created time, delivery counts
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
// DeleteDeployment deletes, in the same transaction, what the SQLite store
// deletes with a deployment: its upstream drains, rate limit, pulls and
// rollouts; DeleteImage, what SQLite's foreign keys delete with an image:
// its pull record, the namespaces that resolved it and its run config.
//
// Computers (and deployments' workspaces) are kept too, with package
// computer's Store methods. A write that reads several keys (a slot
// reservation reads the Computer, every slot, the queue, the hosts) reads
// them in one transaction and commits in one transaction guarded by their
// ModRevisions, deciding again, callback included, when it fails: a
// callback (UpdateComputer's, ReserveComputerSlot's, ...) may run more
// than once, and only its last run's changes are written. Every write to
// the slots or the queue rewrites computerqueueseq, so comparing its
// ModRevision guards what was read of both, deletes included; a fact
// append compares the Computer's fact seq counter, so seqs have no gap
// and no duplicate. A write appends at most 32 facts. As in SQLite,
// DeleteComputer deletes the Computer's slot, queue entry and ports with
// it and keeps its facts and fact seq. PendingUsage and AcknowledgeUsage
// touching more than 128 intervals, and DeleteComputerFactsBefore, commit
// in several transactions of at most 128 operations (each whole or not
// at all). A workspace record names the CreateRevision of its
// deployment's key, and counts only while that deployment exists with it,
// so DeleteDeployment need not delete it.
package etcdstore
