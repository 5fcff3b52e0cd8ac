// Package oidc is the OpenID Connect relying party behind berth's sign-in
// gates: the protocol of an authorization-code sign-in, nothing of cookies,
// sessions, redirects or pages (package gate keeps the [Flow] between the
// two halves, checks the state, and decides what to show).
//
// app-lb (app-lb.md §3.6) signs in with Google only and does not check the
// ID token's signature. berth signs in with any OpenID Provider it can
// discover, and always verifies the signature:
//
//   - The `google` provider is the issuer https://accounts.google.com
//     ([Config.Google]); allowed_domains match its hd claim, and the
//     authorization request carries prompt=select_account.
//   - A namespace's auth provider may name another issuer (Keycloak, Auth0,
//     Okta, Dex, GitLab, …), found by discovery; allowed_domains match the
//     domain of a verified email there.
//
// # A sign-in
//
//	p, err := registry.Provider(ctx, oidc.Config{Issuer: …, ClientID: …, ClientSecret: …})
//	f := oidc.NewFlow()                          // keep it, signed, until the callback
//	redirect(p.AuthCodeURL(f, callbackURL))
//	… the callback, its state checked against f.State …
//	id, err := p.Exchange(ctx, f, code, callbackURL)
//	err = oidc.Allowed(id, cfg.Google, allowedDomains, allowedEmails)
//
// The authorization request is response_type=code with scope "openid email
// profile", a state, a nonce and a PKCE S256 challenge. [Provider.Exchange]
// redeems the code with the verifier, requires an id_token and verifies it
// with go-oidc: signature against the issuer's published keys, iss, aud,
// exp; then azp, sub and the nonce. Each failure is an [*Error] whose
// [Reason] names the step, for logs and metrics, and whose message can be
// shown to the person signing in: it never carries a secret, a code or a
// token.
//
// # Discovery and keys
//
// A [Registry] discovers each issuer once (/.well-known/openid-configuration)
// and keeps it; a failed discovery is retried after a backoff, by the first
// request after it, never per request once it succeeded. Discovery also
// settles how berth authenticates at the token endpoint (HTTP Basic unless
// the issuer offers only client_secret_post) and refuses an issuer that
// advertises PKCE without S256 or publishes a non-https endpoint. The keys
// are go-oidc's remote key set, one per issuer, fetched again when a token
// names a key not held: key rotation needs nothing from the operator.
//
// # Allow-lists
//
// [Allowed] applies allowed_domains and allowed_emails (OR'd,
// case-insensitive, "*" for any account); an email or domain match needs
// email_verified, and an absent email_verified counts as unverified.
// [CheckConfig] and [CheckAllowLists] validate configuration without the
// network, naming the field at fault.
//
// Package oidctest runs a real OpenID Provider on loopback for tests.
package oidc
