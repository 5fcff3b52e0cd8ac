package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/client"
)

// The fleet views as resource kinds: get fleet (GET /fleet), get
// fleet-deployments (GET /fleet/deployments) and get services (GET
// /services). They need a fleet-wide credential (fleet-deployments: any
// authenticated one, narrowed to its namespace).

// getFleet is get fleet: every live host with its last report, then the
// fleet's pool.
func getFleet(ctx context.Context, e *env, args []string) error {
	_, name, rest := splitResource(args)
	if err := e.parseNone(e.flagSet("get"), rest); err != nil {
		return err
	}
	if name != "" {
		return usagef("get fleet takes no name (see get hosts ID, or get fleet-deployments)")
	}
	c, err := e.client()
	if err != nil {
		return err
	}
	if e.output == "json" || e.output == "yaml" {
		return e.fetchAndPrint(ctx, c, "GET", "/fleet", nil, nil)
	}
	sum, err := c.FleetSummary(ctx)
	if err != nil {
		return err
	}
	if e.output == "name" {
		for _, g := range sum.Gateways {
			fmt.Fprintf(e.stdout, "host/%s\n", clean(g.ID))
		}
		return nil
	}
	tw := newTable(e.stdout)
	row(tw, "HOST", "STATE", "DEPLOYMENTS", "READY", "IN-FLIGHT", "REPORTED")
	for _, g := range sum.Gateways {
		name := g.ID
		if g.ID == sum.Self {
			name += " (this)"
		}
		reported := "never"
		if g.ReportedAt > 0 {
			reported = age(int(time.Since(time.UnixMilli(g.ReportedAt))/time.Second)) + " ago"
		}
		row(tw, name, g.State, g.Pool.Deployments, g.Pool.Ready, g.Pool.TotalInFlight, reported)
	}
	tw.Flush()
	p := sum.Pool
	fmt.Fprintf(e.stdout, "\nfleet pool: %s, %d ready, %d draining, %d pending, %d in flight\n",
		plural(p.Deployments, "deployment"), p.Ready, p.Draining, p.Pending, p.TotalInFlight)
	return nil
}

// getFleetDeployments is get fleet-deployments [ID] [-n NAMESPACE]: the
// deployments the fleet's hosts serve, every page of them.
func getFleetDeployments(ctx context.Context, e *env, args []string) error {
	fs := e.flagSet("get")
	ns := fs.String("n", "", "")
	fs.StringVar(ns, "namespace", "", "")
	_, id, rest := splitResource(args)
	if err := e.parseNone(fs, rest); err != nil {
		return err
	}
	c, err := e.client()
	if err != nil {
		return err
	}
	all := apitype.FleetDeployments{Deployments: []apitype.FleetDeployment{}}
	for {
		page, err := c.FleetDeployments(ctx, client.FleetQuery{Namespace: *ns, Offset: len(all.Deployments)})
		if err != nil {
			return err
		}
		all.Deployments = append(all.Deployments, page.Deployments...)
		all.Matched = page.Matched
		if len(page.Deployments) == 0 || len(all.Deployments) >= page.Matched {
			break
		}
	}
	if id != "" {
		var one []apitype.FleetDeployment
		for _, d := range all.Deployments {
			if d.ID == id {
				one = append(one, d)
			}
		}
		if len(one) == 0 {
			return fmt.Errorf("no deployment %q on the fleet's hosts (a host that is down or has not reported is not counted)", id)
		}
		all.Deployments, all.Matched = one, len(one)
	}
	if e.structured() {
		return e.printValue("deployment", all)
	}
	if len(all.Deployments) == 0 {
		fmt.Fprintln(e.stderr, "No deployments found on the fleet's hosts.")
		return nil
	}
	tw := newTable(e.stdout)
	row(tw, "ID", "NAMESPACE", "KIND", "HOSTS", "READY", "DRAINING", "IN-FLIGHT")
	for _, d := range all.Deployments {
		row(tw, d.ID, namespace(d.Namespace), orDash(d.Kind), orDash(strings.Join(d.Hosts, ",")), d.Pool.Ready, d.Pool.Draining, d.Pool.TotalInFlight)
	}
	return tw.Flush()
}

// getServices is get services [ID]: the fleet's services and their
// members, every page of them.
func getServices(ctx context.Context, e *env, args []string) error {
	_, id, rest := splitResource(args)
	if err := e.parseNone(e.flagSet("get"), rest); err != nil {
		return err
	}
	c, err := e.client()
	if err != nil {
		return err
	}
	all := apitype.FleetServices{Services: []apitype.FleetService{}}
	for after := ""; ; {
		page, err := c.Services(ctx, after, 0)
		if err != nil {
			return err
		}
		all.Services = append(all.Services, page.Services...)
		all.Revision = page.Revision
		if page.Next == "" || page.Next == after {
			break
		}
		after = page.Next
	}
	if id != "" {
		var one []apitype.FleetService
		for _, s := range all.Services {
			if s.ID == id {
				one = append(one, s)
			}
		}
		if len(one) == 0 {
			return fmt.Errorf("no service %q in the fleet (a service has members only while a host serves it)", id)
		}
		all.Services = one
	}
	if e.structured() {
		if e.output == "name" {
			raw, err := json.Marshal(all.Services)
			if err != nil {
				return err
			}
			return e.printDocs("service", []json.RawMessage{raw}, false)
		}
		return e.printValue("service", all)
	}
	if len(all.Services) == 0 {
		fmt.Fprintln(e.stderr, "No services found.")
		return nil
	}
	tw := newTable(e.stdout)
	row(tw, "SERVICE", "MEMBERS")
	for _, s := range all.Services {
		ms := make([]string, len(s.Members))
		for i, m := range s.Members {
			ms[i] = m.Peer + "@" + m.Host
			if m.Draining {
				ms[i] += " (draining)"
			}
		}
		row(tw, s.ID, orDash(strings.Join(ms, ", ")))
	}
	return tw.Flush()
}

// describeDiscovery writes a discovery-backed deployment's members as the
// fleet holds them; an error reading them (no fleet, an older server) is
// shown in their place.
func describeDiscovery(ctx context.Context, e *env, c *client.Client, st *apitype.DeploymentStatus) {
	svc := st.Spec.Discovery.ServiceID
	ds, err := c.DiscoveryStatus(ctx, st.Spec.ID)
	if err != nil {
		fmt.Fprintf(e.stdout, "\nDiscovery: service %s (members unavailable: %v)\n", svc, err)
		return
	}
	head := "\nDiscovery: service " + ds.ServiceID
	if ds.Version != nil {
		head += fmt.Sprintf(", revision %d", *ds.Version)
	}
	fmt.Fprintln(e.stdout, head)
	if len(ds.Upstreams) == 0 {
		fmt.Fprintln(e.stdout, "  <no members>")
		return
	}
	tw := newTable(e.stdout)
	row(tw, "  PEER", "DRAINING", "IN-FLIGHT")
	for _, u := range ds.Upstreams {
		row(tw, "  "+u.Peer, yesNo(u.Draining), u.InFlight)
	}
	tw.Flush()
}
