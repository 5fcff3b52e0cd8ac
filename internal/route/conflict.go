package route

import (
	"slices"
	"strings"
)

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

// Index holds many deployments' rules and finds those a rule may tie
// with or share hosts with (Ties, SharesHosts) without scanning them all:
// what a conflict check needs when the set is large. Not safe for
// concurrent use; the zero Index is empty.
type Index struct {
	rules   map[string][]Rule
	exact   map[string]map[string]struct{} // a single host → ids with a rule for it
	suffix  map[string]map[string]struct{} // a host_suffix → ids with a rule for it
	under   map[string]map[string]struct{} // a name → ids with a rule whose hosts lie under it
	unbound map[string]struct{}            // ids with a rule without host condition
}

// Set records deployment id's rules, replacing those it had.
func (x *Index) Set(id string, rules []Rule) {
	x.Delete(id)
	if x.rules == nil {
		x.rules = map[string][]Rule{}
		x.exact, x.suffix, x.under = map[string]map[string]struct{}{}, map[string]map[string]struct{}{}, map[string]map[string]struct{}{}
		x.unbound = map[string]struct{}{}
	}
	rules = slices.Clone(rules)
	x.rules[id] = rules
	for i := range rules {
		h := rules[i].hosts()
		switch {
		case h.none:
		case h.all:
			x.unbound[id] = struct{}{}
		default:
			if h.suffix {
				addID(x.suffix, h.name, id)
			} else {
				addID(x.exact, h.name, id)
			}
			for n := range labelSuffixes(h.name) {
				addID(x.under, n, id)
			}
		}
	}
}

// Delete forgets deployment id; absent, it does nothing.
func (x *Index) Delete(id string) {
	rules, ok := x.rules[id]
	if !ok {
		return
	}
	delete(x.rules, id)
	delete(x.unbound, id)
	for i := range rules {
		h := rules[i].hosts()
		if h.none || h.all {
			continue
		}
		delID(x.suffix, h.name, id)
		delID(x.exact, h.name, id)
		for n := range labelSuffixes(h.name) {
			delID(x.under, n, id)
		}
	}
}

// Rules returns the rules recorded for id.
func (x *Index) Rules(id string) []Rule { return x.rules[id] }

// Near returns, sorted, the ids of the deployments that have a rule that
// may tie with r or share hosts with it: every deployment for which
// r.Ties(q) or r.SharesHosts(q) holds for one of its rules q is among them.
// Rules of length at most MaxFieldLen are assumed (a rule without host
// condition then never ties with one that has one).
func (x *Index) Near(r *Rule) []string {
	h := r.hosts()
	set := map[string]struct{}{}
	switch {
	case h.none:
		return nil
	case h.all:
		for id := range x.unbound {
			set[id] = struct{}{}
		}
	default:
		if h.suffix {
			for id := range x.under[h.name] {
				set[id] = struct{}{}
			}
		} else {
			for id := range x.exact[h.name] {
				set[id] = struct{}{}
			}
		}
		for n := range labelSuffixes(h.name) {
			for id := range x.suffix[n] {
				set[id] = struct{}{}
			}
		}
	}
	out := make([]string, 0, len(set))
	for id := range set {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

// labelSuffixes yields name and each of its suffixes that starts after a
// dot: every domain that covers name (suffixMatch).
func labelSuffixes(name string) func(func(string) bool) {
	return func(yield func(string) bool) {
		if !yield(name) {
			return
		}
		for i := 0; i < len(name); i++ {
			if name[i] == '.' && i+1 < len(name) {
				if !yield(name[i+1:]) {
					return
				}
			}
		}
	}
}

func addID(m map[string]map[string]struct{}, k, id string) {
	s := m[k]
	if s == nil {
		s = map[string]struct{}{}
		m[k] = s
	}
	s[id] = struct{}{}
}

func delID(m map[string]map[string]struct{}, k, id string) {
	if s := m[k]; s != nil {
		delete(s, id)
		if len(s) == 0 {
			delete(m, k)
		}
	}
}
