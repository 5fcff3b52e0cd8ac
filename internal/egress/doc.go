// Package egress is berth's egress proxy for Computers: the one way out
// of a container-backed Computer, and an audited, policy-checked way out
// for the others. Every request through it is checked against the egress
// policy of the grant it works under and against the platform deny set,
// and becomes an egress fact (host, method, status).
//
// # Who is asking
//
// A process in a Computer reaches the proxy through its HTTP_PROXY and
// HTTPS_PROXY variables (Env), which the Computer API sets on every
// command it starts (exec, bash, processStart, terminal). The variables
// carry a credential, http://<computer-id>:<secret>@<addr>, whose secret
// names the subject the work was started for — a grant by id, or the
// admin caller's provenance — and is an HMAC of the Computer and subject
// under a host key, compared in constant time and never logged. So the
// proxy knows, per request, which Computer and which grant it acts for:
// two agents working in one Computer under different grants each get
// their own grant's policy, and revoking or expiring a grant cuts the
// egress of every process started under it at its next request. (Within
// one Computer this is attribution, not isolation: its processes run as
// one user and could read each other's environment.)
//
// Work started with an admin credential carries no grant, so no egress
// policy: it is denied everything, and the refusals are recorded with the
// caller's provenance. An operator who wants egress in a Computer issues
// a grant with a policy and works under it.
//
// # What may be reached
//
// The policy is the grant's egress field (see Policy); none denies all.
// Whatever it says, the platform deny set applies: RFC 1918 and other
// private, shared (CGNAT 100.64.0.0/10), link-local (169.254.0.0/16, the
// cloud metadata service), loopback, multicast and reserved blocks, the
// host's own addresses, and destination port 25 (SMTP). Names are
// resolved once, every address of the answer is checked (a name with any
// address in the deny set is refused), and the proxy connects to the
// checked address itself, never resolving the name again, so DNS
// rebinding cannot slip a private address past the check. Refusals are
// 403 answers, recorded as egress facts with status 403.
//
// # What is seen
//
// Plain HTTP requests (http:// URLs) are forwarded, and their fact has
// the method and the destination's status. HTTPS goes through CONNECT
// tunnels, which berth does not intercept (no TLS man in the middle, no
// injected CA): the proxy sees only the destination host and port, so an
// HTTPS fact says method "CONNECT" with status 200 when the tunnel opened
// (or the refusal's status), not the method and status of the requests
// inside it.
//
// # What it enforces
//
// For container-backed Computers, direct egress is dropped by the guest
// network (package hostnet's FORWARD rule, unless the host enables guest
// egress), so the proxy is the only way out and the policy is enforced.
// Process-backed Computers share the host's network: a process that
// ignores its proxy variables connects directly, so there the policy is
// advisory and the facts cover only traffic that uses the proxy.
package egress
