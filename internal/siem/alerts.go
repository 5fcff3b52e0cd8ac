package siem

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/berth-dev/berth/apitype"
)

// ruleInfo is a rule's fixed part: severity, ATT&CK technique, and its
// title after the client's address (web rules build theirs).
var ruleInfo = map[string]struct {
	sev       apitype.Severity
	technique string
	title     string
}{
	RuleBruteForce:  {apitype.SeverityHigh, "T1110", "is failing authentication repeatedly"},
	RuleSpray:       {apitype.SeverityHigh, "T1110.003", "is spraying credentials across several deployments"},
	RuleEnumeration: {apitype.SeverityHigh, "T1110.003", "is trying many identities against the sign-in gate"},
	RuleScopeDenied: {apitype.SeverityMedium, "T1110", "is using a credential beyond its scope"},
	RuleSigninState: {apitype.SeverityMedium, "T1190", "returned to the sign-in gate with an OAuth state that does not match"},
	RuleScanner:     {apitype.SeverityMedium, "T1595", "is probing for unserved paths"},
	RuleRateSpike:   {apitype.SeverityMedium, "T1498", "is sending an unusual volume of requests"},
}

// Suggested rules' lifetimes.
const (
	blockSecs     = 3600      // a client block: long enough to stop a run, short enough to forget
	pathBlockSecs = 7 * 86400 // a literal signature path
	exemptSecs    = 86400     // an exemption turns detection off for the address: a day, then look again
	maxAlertPath  = 512
)

// finding is what an alert is built from: a request or an auth event.
type finding struct {
	st                    *state
	src                   netip.Prefix
	client                netip.Addr
	at                    time.Time
	deployment, namespace string
	req                   *Request
	auth                  *Auth
}

func (f *finding) ip() string {
	if !f.client.IsValid() {
		return "an unknown address"
	}
	return f.client.Unmap().WithZone("").String()
}

// alert builds a new alert for rule. param is the query parameter a web
// signature matched in ("" for the path); literal is the matched text of
// the path, for a block-path rule.
func (f *finding) alert(id int64, rule, param, literal string) apitype.SecurityAlert {
	a := apitype.SecurityAlert{ID: id, Ts: f.at.UnixMilli(), LastTs: f.at.UnixMilli(), Rule: rule,
		Deployment: f.deployment, Count: 1}
	if f.client.IsValid() {
		a.Client = f.ip()
	}
	var p string
	if f.req != nil {
		p = f.req.Path
	} else if f.auth != nil {
		p = f.auth.Path
	}
	a.Path = truncate(p, maxAlertPath)
	if info, ok := ruleInfo[rule]; ok {
		a.Severity, a.Technique, a.Title = info.sev, info.technique, f.ip()+" "+info.title
	} else {
		for _, w := range webRules {
			if w.rule == rule {
				a.Severity, a.Technique = w.sev, w.technique
				if param == "" {
					a.Title = w.what + " attempt in path from " + f.ip()
				} else {
					a.Title = w.what + " attempt in query parameter " + strconv.Quote(param) + " from " + f.ip()
				}
			}
		}
	}
	a.ECS = f.ecs(rule, param, a.Path)
	a.Response = f.respond(id, rule, literal)
	return a
}

func (f *finding) ecs(rule, param, urlPath string) map[string]json.RawMessage {
	m := map[string]any{"observer.name": "berth", "rule.name": rule}
	if f.client.IsValid() {
		m["source.ip"] = f.ip()
	}
	if f.deployment != "" {
		m["service.name"] = f.deployment
	}
	if urlPath != "" {
		m["url.path"] = urlPath
		if ext := strings.TrimPrefix(path.Ext(urlPath), "."); ext != "" && len(ext) <= 16 && !strings.ContainsAny(ext, "/%") {
			m["url.extension"] = strings.ToLower(ext)
		}
	}
	tags := []string{"berth", "siem", rule}
	if r := f.req; r != nil {
		m["event.category"] = []string{"web"}
		m["event.action"] = rule
		m["http.request.method"] = truncate(r.Method, 16)
		if h := hostOnly(r.Host); h != "" {
			m["url.domain"] = truncate(h, 253)
		}
		m["http.response.status_code"] = r.Status
		m["event.duration"] = r.Duration.Nanoseconds()
		m["http.response.body.bytes"] = r.Bytes
		if r.Status >= 400 || r.Status == 0 {
			m["event.outcome"] = "failure"
		} else {
			m["event.outcome"] = "success"
		}
		if r.Scheme != "" {
			m["http.request.authorization.scheme"] = r.Scheme
		}
		if r.UserAgent != "" {
			m["user_agent.original"] = truncate(r.UserAgent, 256)
		}
		if param != "" {
			m["berth.query_parameter"] = param
		}
		if r.Credentialed {
			tags = append(tags, "credentialed")
		}
		if r.Unrouted {
			tags = append(tags, "unrouted")
		}
	}
	if a := f.auth; a != nil {
		m["event.category"] = []string{"authentication"}
		m["event.action"] = a.Action
		m["event.outcome"] = "failure"
		if a.Reason != "" {
			m["event.reason"] = truncate(a.Reason, 256)
		}
		if a.Subject != "" {
			m["user.name"] = truncate(a.Subject, 128)
		}
		if h := hostOnly(a.Host); h != "" {
			m["url.domain"] = truncate(h, 253)
		}
		if a.Scheme != "" {
			m["http.request.authorization.scheme"] = a.Scheme
		}
		if strings.HasPrefix(a.Action, "admin-") {
			tags = append(tags, "admin")
		}
	}
	m["tags"] = tags
	out := make(map[string]json.RawMessage, len(m))
	for k, v := range m {
		b, err := json.Marshal(v)
		if err == nil {
			out[k] = b
		}
	}
	return out
}

func hostOnly(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		return strings.ToLower(host)
	}
	return strings.ToLower(h)
}

func secs(n int64) *int64 { return &n }

// respond is an alert's runbook: what to check, and the guard rules that
// would stop it.
func (f *finding) respond(id int64, rule, literal string) apitype.AlertResponse {
	ip, dep := f.ip(), f.deployment
	note := fmt.Sprintf("alert %d: %s", id, rule)
	var r apitype.AlertResponse
	admin := f.auth != nil && strings.HasPrefix(f.auth.Action, "admin-")
	var blockClient, blockDep, exempt *apitype.SuggestedAction
	if f.src.IsValid() {
		c := ruleClient(f.src)
		who := c
		if !f.src.Addr().Is4() {
			who = "every address in " + c
		}
		blockClient = &apitype.SuggestedAction{Kind: "block-client",
			Label:  "Block " + c + " for an hour",
			Effect: "Refuses every data-plane request from " + who + " (403) to every deployment for an hour; everyone else's traffic is unaffected. It does not apply to berth's admin API.",
			Rule:   apitype.RuleSpec{Action: apitype.RuleBlock, Match: apitype.RuleMatch{Client: c}, ExpiresInSecs: secs(blockSecs), Note: note}}
		if dep != "" {
			blockDep = &apitype.SuggestedAction{Kind: "block-client-deployment",
				Label:  "Block " + c + " from " + dep + " for an hour",
				Effect: "Refuses requests from " + who + " to " + dep + " only, for an hour; its requests to other deployments, and everyone else's to " + dep + ", still pass.",
				Rule:   apitype.RuleSpec{Action: apitype.RuleBlock, Match: apitype.RuleMatch{Client: c, Deployment: dep}, ExpiresInSecs: secs(blockSecs), Note: note}}
		}
		exempt = &apitype.SuggestedAction{Kind: "exempt-client",
			Label:  "Exempt " + c + " for a day (a monitor, scanner or load test of yours)",
			Effect: "Lets " + who + " through every block rule and turns detection off for it for a day. Only for an address you know is yours: an exemption hides a real attacker just as well.",
			Rule:   apitype.RuleSpec{Action: apitype.RuleAllow, Match: apitype.RuleMatch{Client: c}, ExpiresInSecs: secs(exemptSecs), Note: note}}
	}
	add := func(as ...*apitype.SuggestedAction) {
		for _, a := range as {
			if a != nil {
				r.Actions = append(r.Actions, *a)
			}
		}
	}
	where := "the deployment"
	if dep != "" {
		where = dep
	}
	shared := "Is " + ip + " shared (a NAT, a corporate proxy, a mobile carrier" + v6Note(f.src) + ")? A block refuses everyone behind it."
	switch rule {
	case RuleBruteForce:
		r.Investigate = []string{
			"Which credential is failing (user.name, event.reason)? A stale or rotated secret in a CI job, script or app of yours fails exactly like this.",
			"Did anything from " + ip + " succeed after the failures? A success after a run of failures is a guessed credential: rotate it and end its sessions.",
			shared,
		}
		add(blockDep, blockClient)
	case RuleSpray:
		r.Investigate = []string{
			"Which deployments were tried? The alert names none because the failures span several; search the access log for " + ip + ".",
			"Did any attempt succeed? One credential accepted among many refused is a compromised one.",
			shared,
		}
		add(blockClient)
	case RuleEnumeration:
		r.Investigate = []string{
			"Which identities were tried at " + where + "'s sign-in gate (user.name shows the last)? Many near-miss names are enumeration; one real user retrying is not.",
			"Did any sign-in from " + ip + " succeed? End that identity's sessions if it was not its owner.",
			shared,
		}
		add(blockDep, blockClient)
	case RuleScopeDenied:
		r.Investigate = []string{
			"Which token is it (user.name)? A token used beyond its scope is misconfigured automation, or a leaked token being explored.",
			"Check who minted it and where it is used; revoke it if the use is not expected.",
		}
		add(blockClient)
	case RuleSigninState:
		r.Investigate = []string{
			"One mismatch is usually harmless: a stale sign-in tab, two tabs signing in at once, or a browser that dropped the state cookie.",
			"Repeated mismatches from " + ip + " while others sign in fine suggest a forged callback (login CSRF) or a broken proxy in front of berth.",
		}
		add(blockDep)
	case RuleScanner:
		r.Investigate = []string{
			"Is " + ip + " a scanner of yours (a vulnerability scanner, a link checker, an uptime monitor)? Check user_agent.original.",
			"Did any probed path answer 200? A scanner that found something is the finding; the 404s are not.",
			shared,
		}
		add(blockDep, blockClient, exempt)
	case RuleRateSpike:
		r.Investigate = []string{
			"Is " + ip + " a load test, a crawler or a monitor of yours (user_agent.original)?",
			"Is " + where + " still answering in time? A spike that slows a deployment calls for the block; one it absorbs may only need watching.",
			shared,
		}
		add(blockDep, blockClient, exempt)
	default: // web signatures
		r.Investigate = []string{
			"What did " + where + " answer (http.response.status_code)? A 2xx or a 5xx to an injection deserves a look at the application's own logs.",
			"Is the matched text expected there (a code snippet in a search box, a path in a documentation site)? Then it is a false positive: exempt the address, or leave it.",
		}
		if f.req != nil && f.req.Credentialed {
			r.Investigate = append(r.Investigate, "The request carried a valid credential for "+where+": the sender is signed in, or a signed-in user's browser was made to send it. Find that session and end it if it was not its owner.")
		}
		add(blockDep, blockClient)
		if literal != "" {
			m := apitype.RuleMatch{Deployment: dep}
			label, scope := "", "every deployment"
			if dep != "" {
				scope = dep
			}
			if rule == RuleSecretProbe {
				m.PathPrefix = literal
				label = "Refuse paths under " + literal + " on " + scope
			} else {
				m.PathContains = literal
				label = "Refuse paths containing " + literal + " on " + scope
			}
			exp := secs(pathBlockSecs)
			if rule == RuleSecretProbe {
				exp = nil
			}
			r.Actions = append(r.Actions, apitype.SuggestedAction{Kind: "block-path", Label: label,
				Effect: "Refuses such paths from anyone on " + scope + ". The match is literal and case-sensitive, so a differently spelled or encoded variant still passes: this stops a repeat, not the attack class. Make sure nothing legitimate is served there.",
				Rule:   apitype.RuleSpec{Action: apitype.RuleBlock, Match: m, ExpiresInSecs: exp, Note: note}})
		}
	}
	if admin {
		r.Caveat = "This happened at berth's admin API, and guard rules never apply to it: a block rule keeps " + ip + " away from the deployments only. To stop it, revoke or rotate the credential, and keep the admin listener off networks " + ip + " can reach."
	}
	if r.Actions == nil {
		r.Actions = []apitype.SuggestedAction{}
	}
	return r
}

func v6Note(p netip.Prefix) string {
	if p.IsValid() && !p.Addr().Is4() {
		return "; IPv6 is grouped by /64"
	}
	return ""
}
