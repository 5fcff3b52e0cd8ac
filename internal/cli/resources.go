package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"
)

// One grammar for every resource: berth get|describe|delete KIND [NAME],
// with KIND singular, plural or short (deployment, deployments, deploy)
// and "KIND/NAME" as one argument, as kubectl takes them. The older verbs
// (token list, image delete, computer get, ...) run the same code.

// resource is one kind get, describe and delete know. Each verb gets the
// command's whole argument list (the KIND word included), and parses its
// own flags; nil means the verb does not apply to the kind.
type resource struct {
	kind               string   // singular: what -o name prints before the slash
	aliases            []string // plural first, then short forms
	flags              string   // the kind's own flags, for the resource list
	get, describe, del func(ctx context.Context, e *env, args []string) error
}

// resources is the table `berth get` prints, in that order.
var resources []*resource

func init() {
	resources = []*resource{
		{kind: "deployment", aliases: []string{"deployments", "deploy"},
			get: getDeployments, describe: describeDeployment, del: deleteDeployment},
		{kind: "vm", aliases: []string{"vms"}, flags: "-d DEPLOYMENT",
			get: runGetVMs, describe: describeVM, del: runDeleteVM},
		{kind: "secret", aliases: []string{"secrets"}, flags: "-n NAMESPACE",
			get:      func(ctx context.Context, e *env, a []string) error { return runGetAccess(ctx, e, "secret", a) },
			describe: describeSecret,
			del:      func(ctx context.Context, e *env, a []string) error { return runDeleteAccess(ctx, e, "secret", a) }},
		{kind: "namespace", aliases: []string{"namespaces", "ns"},
			get:      func(ctx context.Context, e *env, a []string) error { return runGetAccess(ctx, e, "namespace", a) },
			describe: describeNamespace,
			del:      func(ctx context.Context, e *env, a []string) error { return runDeleteAccess(ctx, e, "namespace", a) }},
		{kind: "token", aliases: []string{"tokens"},
			get:      namedVerb("get", func(ctx context.Context, e *env, ids []string) error { return e.listTokens(ctx, one(ids)) }),
			describe: describeFrom("/tokens", "", "token", "id"),
			del:      namedVerb("delete", func(ctx context.Context, e *env, ids []string) error { return e.revokeTokens(ctx, ids) })},
		{kind: "image", aliases: []string{"images", "img"},
			get:      namedVerb("get", func(ctx context.Context, e *env, ids []string) error { return e.listImages(ctx, one(ids)) }),
			describe: describeFrom("/images", "images", "image", "name"),
			del:      namedVerb("delete", func(ctx context.Context, e *env, ids []string) error { return e.deleteImages(ctx, ids) })},
		{kind: "cert", aliases: []string{"certs", "certificates", "certificate"},
			get: namedVerb("get", func(ctx context.Context, e *env, ids []string) error { return e.listCerts(ctx, one(ids)) })},
		{kind: "alert", aliases: []string{"alerts"}, flags: "--severity S --rule R -d DEPLOYMENT -n NAMESPACE --follow",
			get: getAlerts},
		{kind: "rule", aliases: []string{"rules"},
			get: namedVerb("get", func(ctx context.Context, e *env, ids []string) error { return e.getRules(ctx, one(ids)) }),
			del: namedVerb("delete", func(ctx context.Context, e *env, ids []string) error { return e.deleteRules(ctx, ids) })},
		{kind: "computer", aliases: []string{"computers", "comp"}, flags: "-n NAMESPACE",
			get: func(ctx context.Context, e *env, args []string) error {
				_, id, rest := splitResource(args)
				if id == "" {
					return computerList(ctx, e, rest)
				}
				return computerGet(ctx, e, append(rest, id))
			},
			describe: describeComputer,
			del: func(ctx context.Context, e *env, args []string) error {
				_, id, rest := splitResource(args)
				return computerDelete(ctx, e, append(rest, id))
			}},
		{kind: "job", aliases: []string{"jobs"}, flags: "-d DEPLOYMENT", get: getJobs},
		{kind: "disk", aliases: []string{"disks"},
			get: namedVerb("get", func(ctx context.Context, e *env, ids []string) error { return e.listDisks(ctx, one(ids)) })},
		{kind: "feed", aliases: []string{"feeds"},
			get: namedVerb("get", func(ctx context.Context, e *env, ids []string) error { return e.listFeeds(ctx, one(ids)) })},
		{kind: "host", aliases: []string{"hosts"},
			get: namedVerb("get", func(ctx context.Context, e *env, ids []string) error { return e.listHosts(ctx, one(ids)) })},
		{kind: "fleet", aliases: []string{"fleet"}, get: getFleet},
		{kind: "fleet-deployment", aliases: []string{"fleet-deployments", "fleet-deploy"}, flags: "-n NAMESPACE", get: getFleetDeployments},
		{kind: "service", aliases: []string{"services", "svc"}, get: getServices},
	}
}

// lookupResource finds a kind by any of its names.
func lookupResource(name string) *resource {
	for _, r := range resources {
		if r.kind == name || slices.Contains(r.aliases, name) {
			return r
		}
	}
	return nil
}

// kindNames is the list of kinds for error messages.
func kindNames() string {
	var ks []string
	for _, r := range resources {
		ks = append(ks, r.aliases[0])
	}
	return strings.Join(ks, ", ")
}

// resourceProbe is a flag set with every flag that takes a value among the
// resource verbs, to find the KIND word among flags and their values.
func resourceProbe() *flag.FlagSet {
	fs := (&env{}).flagSet("probe")
	for _, n := range []string{"n", "namespace", "d", "deployment", "timeout", "severity", "rule", "limit"} {
		fs.String(n, "", "")
	}
	return fs
}

// splitResource finds the KIND word (the first positional argument) and
// the NAME after it ("KIND NAME" or "KIND/NAME"), and returns the other
// arguments, flags included, as they were.
func splitResource(args []string) (kind, name string, rest []string) {
	fs := resourceProbe()
	at := -1
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			if i+1 < len(args) {
				at = i + 1
			}
			break
		}
		if len(a) < 2 || a[0] != '-' {
			at = i
			break
		}
		if takesValue(fs, a) {
			i++
		}
	}
	if at < 0 {
		return "", "", args
	}
	rest = append(slices.Clone(args[:at]), args[at+1:]...)
	kind, name, slash := strings.Cut(args[at], "/")
	if slash {
		return kind, name, rest
	}
	// The NAME is the next positional argument, if any.
	for i := at; i < len(rest); i++ {
		a := rest[i]
		if a == "--" {
			break
		}
		if len(a) < 2 || a[0] != '-' {
			return kind, a, append(rest[:i:i], rest[i+1:]...)
		}
		if takesValue(fs, a) {
			i++
		}
	}
	return kind, "", rest
}

// dispatch runs verb (get, describe or delete) for the kind named in args.
func dispatch(ctx context.Context, e *env, verb string, args []string) error {
	kind, _, _ := splitResource(args)
	if kind == "" {
		if verb == "get" && !slices.ContainsFunc(args, func(a string) bool { return a == "-h" || a == "--help" || a == "-help" }) {
			return printResources(e.stdout)
		}
		if _, err := e.parse(e.flagSet(verb), args); err != nil {
			return err
		}
		return usagef("missing resource type (want one of: %s)", kindNames())
	}
	r := lookupResource(kind)
	if r == nil {
		return usagef("unknown resource type %q (want one of: %s)", kind, kindNames())
	}
	run := map[string]func(context.Context, *env, []string) error{"get": r.get, "describe": r.describe, "delete": r.del}[verb]
	if run == nil {
		return usagef("%s does not apply to %s", verb, r.aliases[0])
	}
	return run(ctx, e, args)
}

// printResources is `berth get` with no KIND: what there is to get.
func printResources(w io.Writer) error {
	fmt.Fprintln(w, "Resources (berth get|describe|delete KIND [NAME]):")
	tw := newTable(w)
	row(tw, "  KIND", "ALIASES", "FLAGS")
	for _, r := range resources {
		row(tw, "  "+r.aliases[0], strings.Join(append([]string{r.kind}, r.aliases[1:]...), ","), orDash(r.flags))
	}
	return tw.Flush()
}

// namedVerb adapts a verb on names (NAME... after KIND) to the resource
// table; it takes only the global flags.
func namedVerb(verb string, run func(ctx context.Context, e *env, names []string) error) func(context.Context, *env, []string) error {
	return func(ctx context.Context, e *env, args []string) error {
		kind, name, rest := splitResource(args)
		pos, err := e.parse(e.flagSet(verb), rest)
		if err != nil {
			return err
		}
		names := pos
		if name != "" {
			names = append([]string{name}, pos...)
		}
		if verb == "get" && len(names) > 1 {
			return usagef("get %s takes at most one name", kind)
		}
		return run(ctx, e, names)
	}
}

func one(names []string) string {
	if len(names) == 0 {
		return ""
	}
	return names[0]
}

// describeFrom describes the element of the list at path whose key is
// NAME: its fields, one per line.
func describeFrom(path, listKey, kind, key string) func(context.Context, *env, []string) error {
	return func(ctx context.Context, e *env, args []string) error {
		_, name, rest := splitResource(args)
		if err := e.parseNone(e.flagSet("describe"), rest); err != nil {
			return err
		}
		if name == "" {
			return usagef("missing %s name", kind)
		}
		c, err := e.client()
		if err != nil {
			return err
		}
		item, err := fetchItem(ctx, c, path, listKey, kind, key, name)
		if err != nil {
			return err
		}
		return e.describeDoc(kind, item)
	}
}

// describeDoc prints one resource for people: its fields as "Key: value"
// lines, nested objects flattened to "outer.inner". -o json, yaml and
// name print it as the other verbs do.
func (e *env) describeDoc(kind string, doc json.RawMessage) error {
	if e.structured() {
		return e.printDocs(kind, []json.RawMessage{doc}, false)
	}
	var v any
	dec := json.NewDecoder(strings.NewReader(string(doc)))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return err
	}
	tw := newTable(e.stdout)
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		switch x := v.(type) {
		case map[string]any:
			keys := make([]string, 0, len(x))
			for k := range x {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			for _, k := range keys {
				walk(join(prefix, k), x[k])
			}
		case []any:
			parts := make([]string, len(x))
			for i, it := range x {
				b, _ := json.Marshal(it)
				parts[i] = strings.Trim(string(b), `"`)
			}
			row(tw, prefix+":", orDash(strings.Join(parts, ", ")))
		case nil:
			row(tw, prefix+":", "-")
		default:
			row(tw, prefix+":", fmt.Sprint(x))
		}
	}
	walk("", v)
	return tw.Flush()
}

// describePath describes the resource at path(NAME, -n NAMESPACE).
func describePath(kind string, path func(name, ns string) string) func(context.Context, *env, []string) error {
	return func(ctx context.Context, e *env, args []string) error {
		fs := e.flagSet("describe")
		ns := fs.String("n", "", "")
		fs.StringVar(ns, "namespace", "", "")
		_, name, rest := splitResource(args)
		if err := e.parseNone(fs, rest); err != nil {
			return err
		}
		if name == "" {
			return usagef("missing %s name", kind)
		}
		c, err := e.client()
		if err != nil {
			return err
		}
		var raw json.RawMessage
		if _, err := c.Do(ctx, "GET", path(name, *ns), nil, &raw); err != nil {
			return err
		}
		return e.describeDoc(kind, raw)
	}
}

var (
	describeSecret   = describePath("secret", func(id, ns string) string { return secretURL(ns, id, false) })
	describeComputer = describePath("computer", func(id, _ string) string { return "/computers/" + url.PathEscape(id) })
)

var describeNamespace = describeFrom("/namespaces", "", "namespace", "namespace")

func describeVM(ctx context.Context, e *env, args []string) error {
	fs, dep, _ := e.vmFlagSet("describe")
	id, sandbox, c, err := e.oneVM(fs, dep, args)
	if err != nil {
		return err
	}
	vms, err := fetchVMs(ctx, c, id)
	if err != nil {
		return err
	}
	for _, raw := range []json.RawMessage{vms.rawVMs, vms.rawPending} {
		var list []json.RawMessage
		json.Unmarshal(raw, &list)
		for _, it := range list {
			var v struct {
				SandboxID string `json:"sandbox_id"`
			}
			if json.Unmarshal(it, &v) == nil && v.SandboxID == sandbox {
				return e.describeDoc("vm", it)
			}
		}
	}
	return fmt.Errorf("no VM %q in deployment %s", sandbox, id)
}
