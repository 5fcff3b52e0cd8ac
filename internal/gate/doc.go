// Package gate is the data plane's sign-in gate: a deployment's `auth`
// (apitype.AuthGate), compiled once per spec and asked about every request
// routed to the deployment ([Gate.Admit], the proxy's Gate). It follows
// app-lb.md §3.6 and goes past it where app-lb is weak.
//
// # Decision order
//
//  1. `<base_path>/callback`, `/logout`, `/login` (base_path defaults to
//     app-lb's `/__applb/auth`, so links apps already carry keep working).
//  2. `public_paths`, longest prefix first: `public` admits anyone, with no
//     identity; `none|view|admin` need an app-token that admits the
//     deployment and whose admin scope is at least the tier (a JWT the gate
//     accepts is enough for `none`). A recognised token that falls short is a
//     403 saying why; none at all a 401 naming the tier.
//  3. The `app-token` provider: a bearer app-token that admits the
//     deployment (its admin tier is not checked here).
//  4. The `jwt` provider: the bearer, else the cookie `jwt.cookie`, verified
//     by package jwtverify; a `gateHost` claim must equal the host and a
//     `namespace` claim the deployment's namespace.
//  5. A session cookie (signed in through OpenID Connect, or through the
//     scoped JWT sign-in), looked up server-side.
//  6. A valid app-token that does not admit the deployment: 403
//     `insufficient_scope`.
//  7. Sign-in: a browser (Accept naming text/html) is sent to the issuer (or
//     to a choice page when the gate offers more than one way); a program
//     gets a 401 JSON saying what it may present.
//
// The gate sees the path the client sent, before any strip_prefix: its
// base path and public paths are in the client's URL space.
//
// # What berth does past app-lb
//
//   - Any OpenID Connect issuer, by discovery (package oidc): `google`
//     keeps its meaning (accounts.google.com, `hd` for allowed_domains) and
//     a namespace auth provider may name another issuer in `issuer` (a key
//     AuthProviderView's index signature allows). The ID token's signature
//     is always verified.
//   - Sessions are server-side (package sessions): the cookie holds a random
//     secret, the store only its hash; they expire absolutely
//     (session_ttl_secs) and when idle, can be listed and revoked, and sign
//     out everywhere. A session is bound to its deployment and to the
//     fingerprint of the gate's identity policy, so editing the policy ends
//     every session signed in under the old one.
//   - Cookies are HttpOnly, SameSite=Lax, Secure over TLS, and `__Host-`
//     prefixed when host-only over TLS. The session cookie is removed from
//     the request before it reaches the upstream.
//   - Every X-Auth-Request-* header a client sends is removed, gated or not
//     (the proxy strips them for ungated deployments), so an upstream can
//     trust the ones a gate sets.
//
// Gate-made responses carry X-Frame-Options: DENY, Referrer-Policy:
// same-origin and Cache-Control: no-store. Every decision is counted
// (berth_gate_decisions_total{decision,reason}); refusals of presented
// credentials and sign-in failures are reported as [Event]s with the
// socket peer as their source.
package gate
