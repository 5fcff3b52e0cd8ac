package route

import "strings"

// Conflicts between rules: what the registry checks before a rule is
// added, so that a host belongs to one namespace and no two deployments
// tie for a request (issue 9).

// Covers reports whether host is domain or one of its subdomains (at a
// label boundary): "example.com" covers "example.com" and
// "a.example.com", not "badexample.com". Both must be normalized.
func Covers(domain, host string) bool { return suffixMatch(host, domain) }

// HostBound reports whether the rule has a host condition (host or
// host_suffix); a rule without one matches every host.
func (r *Rule) HostBound() bool { return r.Host != "" || r.HostSuffix != "" }

// hosts is the set of hosts a rule can match: every host (all), a single
// host (name), or a domain and its subdomains (name, suffix); none for a
// rule whose host lies outside its own host_suffix.
type hosts struct {
	all, none, suffix bool
	name              string
}

func (r *Rule) hosts() hosts {
	switch {
	case r.Host != "" && r.HostSuffix != "":
		if !suffixMatch(r.Host, r.HostSuffix) {
			return hosts{none: true}
		}
		return hosts{name: r.Host}
	case r.Host != "":
		return hosts{name: r.Host}
	case r.HostSuffix != "" && r.HostSuffix != ".":
		return hosts{name: r.HostSuffix, suffix: true}
	case r.HostSuffix == ".":
		return hosts{none: true}
	}
	return hosts{all: true}
}

func (a hosts) overlap(b hosts) bool {
	switch {
	case a.none || b.none:
		return false
	case a.all || b.all:
		return true
	case !a.suffix && !b.suffix:
		return a.name == b.name
	case a.suffix && !b.suffix:
		return suffixMatch(b.name, a.name)
	case !a.suffix && b.suffix:
		return suffixMatch(a.name, b.name)
	}
	return suffixMatch(a.name, b.name) || suffixMatch(b.name, a.name)
}

// SharesHosts reports whether some host can match both rules, whatever
// the path. Rules without a host condition are not considered: they match
// every host, as the fallback below every host rule.
func (r *Rule) SharesHosts(q *Rule) bool {
	return r.HostBound() && q.HostBound() && r.hosts().overlap(q.hosts())
}

// CoveredBy reports whether every host the rule can match lies under
// domain; a rule without a host condition is under no domain.
func (r *Rule) CoveredBy(domain string) bool {
	h := r.hosts()
	switch {
	case h.none:
		return true
	case h.all:
		return false
	}
	return suffixMatch(h.name, domain)
}

// Overlaps reports whether the rule reaches a host under domain (the
// domain's name itself or a subdomain); a rule without a host condition is
// not counted.
func (r *Rule) Overlaps(domain string) bool {
	return r.HostBound() && r.hosts().overlap(hosts{name: domain, suffix: true})
}

// Ties reports whether a request can match both rules with the same score:
// the routing table would then choose between their deployments by id
// alone.
func (r *Rule) Ties(q *Rule) bool {
	if r.Empty() || q.Empty() || r.Score() != q.Score() || !r.hosts().overlap(q.hosts()) {
		return false
	}
	return strings.HasPrefix(r.PathPrefix, q.PathPrefix) || strings.HasPrefix(q.PathPrefix, r.PathPrefix)
}
