// Package jwtverify verifies the JWTs a deployment's `jwt` auth gate admits
// (app-lb.md §3.6.1), compiled from an [apitype.JwtSpec].
//
// # Rules
//
// A spec names exactly one key source:
//
//   - `secret`: an HMAC key from the secret store, for HS256/HS384/HS512. It
//     is resolved through [Options.Secret] on first use and again every
//     minute in the background, so a rotated secret takes effect within a
//     minute; a failed resolve keeps the last key. A key shorter than 32
//     bytes is refused (RFC 7518 §3.2).
//   - `public_key`: one inline PEM public key (PKIX `PUBLIC KEY`, PKCS #1
//     `RSA PUBLIC KEY`) or certificate (`CERTIFICATE`, the first one; its
//     dates are not checked — it is only a container for the key), for
//     RS*/PS* (RSA, 2048..8192 bits), ES256/ES384/ES512 (P-256/P-384/P-521)
//     and EdDSA (Ed25519). A private key is refused.
//   - `jwks_url`: the issuer's JWK set, https unless the host is loopback
//     (127.0.0.0/8, ::1, localhost). See "JWKS" below.
//
// `algorithms` is required and the token's header never widens it: a token
// whose `alg` is not listed is refused, `none` can never be listed, and every
// listed algorithm must suit the key source — an HS* algorithm with a public
// key or a JWKS, an RS* with a secret, ES256 with an RSA key or ES384 with a
// P-256 key are all refused by [Check]. Keys are typed per family, so a token
// signed with HMAC over the RSA key's PEM bytes (the HS/RS confusion attack)
// meets no HMAC key to verify against.
//
// Every token must carry `exp` in the future and `iss` equal to `issuer`;
// `nbf` is honoured when present; `aud` (a string, or an array containing
// it) must match `audience` when one is configured. `leeway_secs` (0..300,
// default 0) widens `exp` and `nbf` only.
//
// `require` maps claim → wanted value or list of values. A list is an OR
// within the claim, the map an AND across claims, and a claim that is itself
// an array in the token holds when it contains one wanted value. Values
// compare typed: a string never equals a number ("1" ≠ 1), numbers compare
// by value (1 = 1.0), booleans are booleans.
//
// The claim named by `subject_claim` (default `sub`) must be a non-empty
// string of valid UTF-8 without control characters (it travels in a
// header): it becomes the user. `email_claim`
// (`email`) and `name_claim` (`name`) are taken when they are such strings
// and left empty otherwise. Header parameters that name keys (`jku`, `x5u`,
// `jwk`, `x5c`) are ignored; a token with `crit` is refused.
//
// # JWKS
//
// The set is fetched by the first [Verifier.Verify] (or [Verifier.Prefetch]),
// never by [New], then refreshed in the background every 10 minutes; the keys
// held keep serving while a refresh runs and when one fails, so a request
// whose `kid` is known never waits on the network after the first fetch. A
// token with an unknown `kid` (or no `kid` and no key that suits its `alg`)
// triggers a refetch, at most one per 30 seconds per [Verifier]; requests
// arriving while any fetch is in flight wait for that one instead of starting
// their own. While no keys are held at all, a failed fetch is retried on
// demand at most every 5 seconds. Each fetch has 5 seconds, reads at most
// 1 MiB, follows at most 3 redirects (all https-or-loopback), and keeps at
// most 32 usable keys; keys marked for encryption (`use: enc`), symmetric
// keys, keys with private parameters, RSA keys under 2048 bits and keys whose
// `alg` is not among `algorithms` are skipped. [Verifier.Close] stops the
// refresh and waits for it.
//
// # Refusals
//
// Verify returns an [*Error] whose [Reason] is short and stable — a metrics
// label and the reason of a SIEM `gate-jwt` record — and whose message is for
// a person. [Check] returns a [*FieldError] naming the field as `jwt.<field>`.
package jwtverify
