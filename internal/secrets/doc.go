// Package secrets keeps berth's secret store (app-lb.md §8): named bundles
// of key/value pairs, grouped by namespace, whose values never leave berth
// through the API and are never written to disk in plaintext.
//
// # Sealing
//
// Each secret is stored as one row of the SQLite store whose namespace, id
// and update time are in the clear (they are its address) and whose
// description, key names and values are sealed together with AES-256-GCM:
//
//	sealed = 0x01 || nonce (12 random bytes, fresh per write) || ciphertext || tag
//	AAD    = "berth-secret-v1" 0x00 namespace 0x00 id
//
// The AAD binds a sealed value to its row, so rows cannot be swapped or
// renamed in the database file without the swap being detected. Unlike
// app-lb, there is no plaintext mode.
//
// [Key.Seal] and [Key.Open] are that sealing, and the only one in berth:
// package certs seals the ACME private keys it stores with them too.
//
// # The key
//
// [LoadKey] takes the key from BERTH_SECRET_KEY when it is set: 64 hex
// characters are the key itself, anything else is hashed with SHA-256 into
// one. When it is unset, the key lives in <data dir>/secret.key: 32 random
// bytes written as hex when the directory is first used, mode 0600, refused
// if anyone but the owner can read it. Back that file up with the database,
// or set BERTH_SECRET_KEY to its contents; without the key the secrets are
// gone.
//
// The first key a data directory is used with is recorded as a sealed known
// plaintext. [Open] checks it (and every stored secret) before anything
// else, so a restart with a different key fails loudly with [ErrWrongKey]
// and writes nothing.
//
// # References
//
// Deployment specs name secrets with SecretRef and SecretEnv, never values;
// package spec stamps each reference with the deployment's own namespace,
// so a spec can only reach secrets behind its own wall. [Store.ResolveEnv]
// turns a `vm.env_from` list into environment variables when a replica is
// created, and [ReferencedBy] finds the deployments that would break if a
// secret were deleted.
package secrets
