package cli

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/client"
)

var getCmd = &command{
	name:    "get",
	summary: "List resources (deployments, vms, secrets, tokens, images, ...) or show one",
	help: `Usage: berth get KIND [NAME] [-o json|yaml|name|wide]
       berth get KIND/NAME
       berth get              (lists the kinds)

       berth get deployments [-o json|yaml|name|wide]
       berth get deployment ID     (also: deploy ID, deployment/ID)
       berth get vms -d DEPLOYMENT [-o json|yaml|name|wide]
       berth get secrets [-n NAMESPACE]
       berth get namespaces
       berth get tokens [ID]       (as 'berth token list')
       berth get images [NAME]     (as 'berth image list')
       berth get computers [ID] [-n NAMESPACE]   (as 'berth computer list|get')
       berth get feeds [NAMESPACE] (as 'berth feed NAMESPACE')
       berth get hosts [ID]        (the fleet's live hosts; see 'berth host -h')
       berth get fleet
       berth get fleet-deployments [ID] [-n NAMESPACE]
       berth get services [ID]

List deployments as a table: NAME KIND ROUTES DESIRED READY PENDING IN-FLIGHT.
-o wide adds NAMESPACE MIN MAX WARM TARGET BACKEND, where BACKEND is the
upstreams of a static deployment, the root of a site, or driver:image of a
vm deployment. -o json and -o yaml print the server's reply as received.

get secrets lists secrets by NAMESPACE ID KEYS UPDATED; values never leave
the server. get namespaces lists the namespaces you can see and how many of
their deployments you reach.

get vms lists the VMs of one deployment: SANDBOX ADDR STATE IN-FLIGHT
UPTIME CPU MEMORY, where STATE is ready, unhealthy, draining or booting.
-o wide adds HEALTHY and the VM driver's STATUS of a booting VM; -o json
and -o yaml print {deployment, vms, pending_vms} with the server's lists.

On a fleet (berth serve --etcd), get fleet lists the live hosts by HOST
STATE DEPLOYMENTS READY IN-FLIGHT REPORTED (when each last reported),
then the pool rolled up over the fleet. get fleet-deployments lists the
deployments the fleet's hosts serve: ID NAMESPACE KIND HOSTS READY
DRAINING IN-FLIGHT, summed over their hosts (-n narrows to a namespace).
get services lists the fleet's services and their MEMBERS as
peer@host, "(draining)" after a draining one. get fleet and get services
need a fleet-wide credential; -o json and -o yaml print the reply (every
page of it, merged), -o name the hosts, deployments or services.
`,
	run: runGet,
}

// deploymentClient parses the flags and "deployment[s] [ID]" of command
// name (see resourceID), and returns the id and the admin API client.
func (e *env) deploymentClient(name string, args []string, needID bool) (string, *client.Client, error) {
	pos, err := e.parse(e.flagSet(name), args)
	if err != nil {
		return "", nil, err
	}
	id, err := resourceID(pos, needID)
	if err != nil {
		return "", nil, err
	}
	c, err := e.client()
	return id, c, err
}

// resourceID reads "deployment[s] [ID]" or "deployment/ID" from pos. With
// needID, the id is required.
func resourceID(pos []string, needID bool) (string, error) {
	if len(pos) == 0 {
		return "", usagef("missing resource type (want deployment)")
	}
	kind, id, slash := strings.Cut(pos[0], "/")
	rest := pos[1:]
	switch kind {
	case "deployment", "deployments", "deploy":
	default:
		return "", usagef("unknown resource type %q (want deployment)", kind)
	}
	if slash {
		if id == "" {
			return "", usagef("missing id after %q", pos[0])
		}
	} else if len(rest) > 0 {
		id, rest = rest[0], rest[1:]
	}
	if len(rest) > 0 {
		return "", usagef("unexpected argument %q", rest[0])
	}
	if needID && id == "" {
		return "", usagef("missing deployment ID")
	}
	return id, nil
}

// stripKind accepts "ID" or "deployment/ID" where a command takes a bare
// deployment id.
func stripKind(arg string) string {
	for _, p := range []string{"deployment/", "deployments/", "deploy/"} {
		if s, ok := strings.CutPrefix(arg, p); ok {
			return s
		}
	}
	return arg
}

func deploymentPath(id string) string { return "/deployments/" + url.PathEscape(id) }

func runGet(ctx context.Context, e *env, args []string) error { return dispatch(ctx, e, "get", args) }

// getDeployments is get deployment[s] [ID].
func getDeployments(ctx context.Context, e *env, args []string) error {
	id, c, err := e.deploymentClient("get", args, false)
	if err != nil {
		return err
	}
	if e.structured() {
		path := "/deployments"
		if id != "" {
			path = deploymentPath(id)
		}
		return e.fetchAndPrint(ctx, c, "GET", path, nil, nil)
	}
	var list []apitype.DeploymentStatus
	if id == "" {
		list, err = c.Deployments(ctx)
		if err != nil {
			return err
		}
		if len(list) == 0 {
			fmt.Fprintln(e.stderr, "No deployments found.")
			return nil
		}
	} else {
		st, _, err := c.Deployment(ctx, id)
		if err != nil {
			return err
		}
		list = []apitype.DeploymentStatus{*st}
	}
	e.printDeployments(list)
	return nil
}

// printDeployments writes the deployments table.
func (e *env) printDeployments(list []apitype.DeploymentStatus) {
	wide := e.output == "wide"
	tw := newTable(e.stdout)
	cols := []any{"NAME", "KIND", "ROUTES", "DESIRED", "READY", "PENDING", "IN-FLIGHT"}
	if wide {
		cols = append(cols, "NAMESPACE", "MIN", "MAX", "WARM", "TARGET", "BACKEND")
	}
	row(tw, cols...)
	for _, d := range list {
		cols := []any{d.Spec.ID, orDash(string(d.Kind)), routes(d.Spec.Routes),
			d.DesiredReplicas, d.Ready, d.Pending, d.TotalInFlight}
		if wide {
			sc := scalingCols(d)
			cols = append(cols, namespace(d.Spec.Namespace), sc[0], sc[1], sc[2], sc[3], backend(d))
		}
		row(tw, cols...)
	}
	tw.Flush()
}

// routes renders route rules compactly: "host/path", "*.suffix/path" or
// "/path", joined with commas.
func routes(rs []apitype.RouteRule) string {
	if len(rs) == 0 {
		return "<none>"
	}
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = route(r)
	}
	return strings.Join(parts, ",")
}

func route(r apitype.RouteRule) string {
	host := r.Host
	if host == "" && r.HostSuffix != "" {
		host = "*" + r.HostSuffix
		if !strings.HasPrefix(r.HostSuffix, ".") {
			host = "*." + r.HostSuffix
		}
	}
	s := host + r.PathPrefix
	if s == "" {
		s = "*"
	}
	if r.Redirect != nil {
		s += "->" + r.Redirect.To
	}
	return s
}

func namespace(ns string) string {
	if ns == "" {
		return "default"
	}
	return ns
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// Scaling defaults, as app-lb applies them to fields a policy leaves out.
const (
	defaultMin    = 0
	defaultMax    = 5
	defaultWarm   = 0
	defaultTarget = 10
	defaultIdle   = 300
)

// scalingCols returns MIN MAX WARM TARGET for a vm deployment, with the
// defaults for absent fields, and dashes for kinds that do not scale.
func scalingCols(d apitype.DeploymentStatus) [4]string {
	if d.Kind != apitype.KindVM {
		return [4]string{"-", "-", "-", "-"}
	}
	var p apitype.ScalingPolicy
	if d.Spec.Scaling != nil {
		p = *d.Spec.Scaling
	}
	return [4]string{
		intOr(p.MinReplicas, defaultMin),
		intOr(p.MaxReplicas, defaultMax),
		intOr(p.WarmPool, defaultWarm),
		intOr(p.TargetConcurrency, defaultTarget),
	}
}

func intOr(p *int, def int) string {
	if p == nil {
		return strconv.Itoa(def)
	}
	return strconv.Itoa(*p)
}

// backend says what serves a deployment: its upstreams, its site root, or
// the driver and image of its VMs.
func backend(d apitype.DeploymentStatus) string {
	s := d.Spec
	switch {
	case d.Kind == apitype.KindVM && s.VM != nil:
		if s.VM.Image == "" {
			return string(s.VM.Driver)
		}
		return string(s.VM.Driver) + ":" + s.VM.Image
	case d.Kind == apitype.KindSite || s.Site != nil:
		if s.Site != nil && s.Site.Root != "" {
			return s.Site.Root
		}
		if d.Site != nil && d.Site.Root != "" {
			return d.Site.Root
		}
	case len(s.Upstreams) > 0:
		return strings.Join(s.Upstreams, ",")
	case s.Discovery != nil:
		return "discovery:" + s.Discovery.ServiceID
	}
	return "-"
}
