package registry

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/route"
	"github.com/berth-dev/berth/internal/spec"
)

// Route ownership (issue 9): a host belongs to one namespace.
//
//   - The operator assigns domains to namespaces (package namespaces); a
//     domain covers its name and every subdomain. No namespace may route a
//     host under another namespace's domain.
//   - A rule may not share a host with another namespace's rule, unless
//     the host lies under a domain assigned to the rule's own namespace:
//     assigning the domain is how the operator hands a host over.
//   - No two deployments may have rules that tie (a request matching both
//     with the same precedence), whatever their namespaces: the table would
//     pick one by id alone.
//   - No rule may name a Computer's exposed-port host (Options.Reserved).
//   - A restricted writer (PutOptions.Restricted) may route only hosts
//     under its namespace's domains, plus the automatic <id>.<base-domain>
//     host of the deployment; a rule without host or host_suffix (it
//     matches every host) is refused to it. With no domains assigned, such
//     a writer has only the automatic host.
//
// Conflicts answer 409; what the writer may not route answers 403.
// Messages name another deployment or namespace only to a writer who can
// see it.

// RouteError is a route the writer may not add.
type RouteError struct {
	Status int // http.StatusConflict or http.StatusForbidden
	Field  string
	Msg    string
}

func (e *RouteError) Error() string { return e.Field + ": " + e.Msg }

// checkRoutes applies the ownership rules to s (normalized, validated) in
// namespace ns against the current set. r.mu is held.
func (r *Registry) checkRoutes(ctx context.Context, s *apitype.DeploymentSpec, o PutOptions) error {
	ns := spec.Namespace(s)
	domains := map[string][]string{}
	if r.o.Domains != nil {
		var err error
		if domains, err = r.o.Domains(ctx); err != nil {
			return fmt.Errorf("reading the namespaces' domains: %w", err)
		}
	}
	own := domains[ns]
	auto := ""
	if base := strings.Trim(strings.ToLower(r.o.Spec.BaseDomain), "."); base != "" {
		auto = strings.ToLower(s.ID) + "." + base
	}
	visible := func(e *Entry) bool { return o.Visible == nil || o.Visible(e.Spec.ID, spec.Namespace(&e.Spec)) }
	var otherNS []string
	for n := range domains {
		if n != ns {
			otherNS = append(otherNS, n)
		}
	}
	slices.Sort(otherNS)

	rs := rules(s.Routes)
	for i := range rs {
		rule := &rs[i]
		field := fmt.Sprintf("routes[%d]", i)
		what := describe(rule)
		conflict := func(format string, args ...any) error {
			return &RouteError{http.StatusConflict, field, fmt.Sprintf(format, args...)}
		}
		if rule.Host != "" && r.o.Reserved != nil {
			if why := r.o.Reserved(rule.Host); why != "" {
				return conflict("host %q is reserved for %s", rule.Host, why)
			}
		}
		if o.Restricted && !rule.HostBound() {
			return &RouteError{http.StatusForbidden, field, "a rule without host or host_suffix matches every host; this credential may route only hosts under its namespace's domains"}
		}
		mine := underAny(rule, own)
		// Only the deployments the index finds can conflict with the
		// rule; in id order, as a scan of all of them would meet them.
		for _, id := range r.routes.Near(rule) {
			e := r.deps[id]
			if id == s.ID || e == nil {
				continue
			}
			ens := spec.Namespace(&e.Spec)
			qs := e.rules
			for j := range qs {
				q := &qs[j]
				tie := rule.Ties(q)
				if !tie && (ens == ns || mine || !rule.SharesHosts(q)) {
					continue
				}
				switch {
				case visible(e) && tie:
					return conflict("deployment %q (namespace %q) already routes %s with the same precedence; a request would go to either", e.Spec.ID, ens, describe(q))
				case visible(e):
					return conflict("%s shares hosts with %s of deployment %q in namespace %q; a host belongs to one namespace (assign its domain to namespace %q to hand it over)", what, describe(q), e.Spec.ID, ens, ns)
				case ens == ns:
					return conflict("%s is routed by another deployment", what)
				default:
					return conflict("%s is routed by another namespace", what)
				}
			}
		}
		for _, n := range otherNS {
			for _, d := range domains[n] {
				if !rule.Overlaps(d) {
					continue
				}
				if o.Restricted {
					return conflict("%s is assigned to another namespace", what)
				}
				return conflict("%s reaches domain %q, assigned to namespace %q", what, d, n)
			}
		}
		if o.Restricted && !mine && !(rule.Host == auto && auto != "" && rule.HostSuffix == "") {
			msg := fmt.Sprintf("%s is not under a domain of namespace %q; this credential may route only hosts under ", what, ns)
			switch {
			case len(own) > 0:
				msg += strings.Join(own, ", ")
			default:
				msg += "its namespace's domains, and none are assigned (ask the operator to assign one)"
			}
			if auto != "" {
				msg += fmt.Sprintf(", and the deployment's own %s", auto)
			}
			return &RouteError{http.StatusForbidden, field, msg}
		}
	}
	return nil
}

func underAny(rule *route.Rule, domains []string) bool {
	if !rule.HostBound() {
		return false
	}
	for _, d := range domains {
		if rule.CoveredBy(d) {
			return true
		}
	}
	return false
}

// describe names a rule's conditions for a message.
func describe(r *route.Rule) string {
	var parts []string
	if r.Host != "" {
		parts = append(parts, fmt.Sprintf("host %q", r.Host))
	}
	if r.HostSuffix != "" {
		parts = append(parts, fmt.Sprintf("host_suffix %q", r.HostSuffix))
	}
	if r.PathPrefix != "" || len(parts) == 0 {
		parts = append(parts, fmt.Sprintf("path_prefix %q", r.PathPrefix))
	}
	return strings.Join(parts, " ")
}
