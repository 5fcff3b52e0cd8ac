// Package auth decides who is calling berth's admin API and what they may
// do there: the operator's HTTP Basic credential, app-tokens (minting,
// storage as hashes, verification), the tiers and scope walls of app-lb.md
// §2.1 and §7, and a brake on repeated failed credentials.
//
// # Callers
//
// Every request that is not on an open route resolves to a [Principal]:
//
//   - Operator: `Authorization: Basic` with BERTH_ADMIN_USER and
//     BERTH_ADMIN_PASSWORD, compared in constant time.
//   - Token: `Authorization: Bearer berth_…`, an app-token (below). The query
//     parameter `?app_token=` is accepted only on routes registered with
//     [AllowQueryToken] (the shell websocket: browsers cannot set headers on
//     a websocket).
//   - A browser signed in to the web UI (package ui, through
//     [BrowserSessions]): no Authorization header, a session cookie. It
//     acts as the credential it signed in with — the operator, or the
//     app-token while the token still verifies — and every request it
//     makes that changes state must carry the session's CSRF token
//     ([ErrCSRF], 403). A 401 to a page's script (Sec-Fetch-Mode other
//     than navigate) or to a browser whose session ended carries no Basic
//     challenge, so no password dialog covers the page.
//   - Ungated: no credential, on a server with no operator password. berth
//     refuses to serve the admin API on a non-loopback address in that state
//     (package server), so an ungated caller is always local.
//
// A credential that is presented but does not verify is a 401 even on an
// ungated server: a credential is never silently ignored, and presenting a
// token always narrows what the caller may do to that token's scope.
//
// # Tiers and walls
//
// Each route is registered with a [Tier] and a [Wall]. The tier is checked
// first (401 without a credential where one is needed; 403 for a token
// whose admin scope is too weak), then the wall:
//
//   - [WallDeployment]: the route names a deployment in its {id} path value,
//     and the caller must touch it ([Principal.Touches]). A confined caller
//     asking about a deployment outside its reach gets the same 403 whether
//     or not the deployment exists, so the API is no existence oracle.
//   - [WallNarrow]: any caller may use the route; the handler narrows its
//     answer to what [Principal] may see.
//   - [WallFleet]: only callers that cover the whole fleet pass.
//
// When BERTH_ADMIN_PASSWORD is set both the view and the CRUD tier are
// enforced (app-lb can leave the CRUD tier open with a password set; berth
// cannot).
//
// # App-tokens
//
// A token is `berth_<id>_<secret>`: id is 12 lowercase hex characters (6
// random bytes) and secret is 43 characters of unpadded base64url (32
// random bytes, 256 bits). It is shown once, when minted. Only the hex
// SHA-256 of the secret part is stored; verification looks the id up and
// compares hashes with crypto/subtle. app-lb's `applb_…` tokens, and any
// other shape, are refused.
//
// Revocation takes effect on the next request: verification reads the
// in-memory token set, which every write updates after persisting it.
//
// A token minted or changed while the admin API had no operator password
// ([TokensConfig.Open]) could have been made by anyone on the host, so it
// is marked, and refused (401, saying why) whenever berth runs with a
// password; mint a new one with the password. It is kept, not deleted, so
// the operator sees it in `GET /tokens` and revokes it.
//
// # Brake
//
// Failed credentials are counted per client address (the socket peer, never
// a forwarded header; IPv6 by /64) and per target: the operator account
// (any Basic credential), or the token id a well-formed app-token carries.
// The brake has to keep two promises that pull against each other:
//
//   - The correct credential always works. A credential is always
//     evaluated (in constant time) once its request gets a turn, however
//     many failures its address or target has, and a correct one passes at
//     once. A lockout never refuses the right password from an address
//     that is not itself flooding the same turn.
//   - Guessing is bounded per target, whatever the number of addresses.
//     After a few failures an address's further failures are answered more
//     slowly; at [BrakeConfig.Threshold] failures the address is locked out,
//     and at [BrakeConfig.TargetThreshold] failures from all addresses
//     together the target is, each for [BrakeConfig.Lockout] (doubling on
//     repeat). A locked-out address or target has its credentials evaluated
//     one at a time, and each failure holds the next evaluation back for
//     [BrakeConfig.Pace] before it is answered 429: so a locked-out target
//     sees at most one evaluated failure per Pace from all addresses (one
//     per Pace per address that is locked out itself). A request that does
//     not get its turn within [BrakeConfig.MaxWait] (or finds
//     [BrakeConfig.MaxWaiters] ahead of it) is answered the same 429
//     without evaluation: a 429 says nothing about the guess.
//
// The two meet where an attacker floods a target from many addresses while
// the operator logs in: the operator would wait for turns the attacker
// holds. An address that proved a target's credential is remembered for
// that target ([BrakeConfig.KnownFor], at most [BrakeConfig.MaxKnown]
// addresses) and is held back only by its own address's lockout, not by the
// target's; an address that never logged in may be refused while the flood
// lasts. Requests without a credential are never braked, and requests
// refused by [Guard] (through berth's data plane, a foreign Host or Origin)
// never reach the brake. The tables are bounded; the least recently seen
// entries are forgotten first.
package auth
