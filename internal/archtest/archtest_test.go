package archtest

import (
	"encoding/json"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const mod = "github.com/berth-dev/berth"

type pkg struct {
	ImportPath string
	Imports    []string
	Deps       []string
	Doc        string
	Name       string
}

func listPackages(t *testing.T) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-json", mod+"/...")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var pkgs []pkg
	dec := json.NewDecoder(out)
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if len(pkgs) < 5 {
		t.Fatalf("go list found only %d packages", len(pkgs))
	}
	return pkgs
}

// rules: importer prefix → forbidden import prefixes, with the reason.
var rules = []struct {
	importer  string
	forbidden []string
	why       string
}{
	{mod + "/apitype", []string{mod + "/"}, "the wire types are public and import only the standard library"},
	{mod + "/apitype/computertype", []string{mod + "/"}, "the Computer API's wire types are public, shared by the server and the client, and import only the standard library"},
	{mod + "/client", []string{mod + "/internal/", mod + "/cmd/"}, "the public client must not depend on server internals"},
	{mod + "/internal/cli", []string{mod + "/internal/"}, "the CLI reaches the server only through the client package"},
	{mod + "/internal/hostcheck", []string{mod + "/internal/server", mod + "/internal/admin"}, "host checks run without a server"},
	{mod + "/internal/route", []string{mod + "/"}, "the routing table is a leaf"},
	{mod + "/internal/web", []string{mod + "/"}, "HTTP plumbing is a leaf"},
	{mod + "/internal/syncbuf", []string{mod + "/"}, "the concurrent-write buffer of tests is a leaf"},
	{mod + "/internal/clocktest", []string{mod + "/"}, "the clock tests move by hand is a leaf every package's tests may import"},
	{mod + "/internal/health", []string{mod + "/"}, "probing is a leaf"},
	{mod + "/internal/metrics", []string{mod + "/"}, "metrics are a leaf"},
	{mod + "/internal/site", []string{mod + "/"}, "file serving is a leaf"},
	{mod + "/internal/store", []string{mod + "/"}, "the store knows nothing of its users"},
	{mod + "/internal/spec", []string{mod + "/internal/proxy", mod + "/internal/registry", mod + "/internal/admin", mod + "/internal/server", mod + "/internal/store"}, "validation is pure"},
	{mod + "/internal/proxy/proxytest", []string{mod + "/internal/"}, "raw HTTP/1.1 peers for measuring the data plane know nothing of berth"},
	{mod + "/internal/proxy", []string{mod + "/internal/admin", mod + "/internal/store", mod + "/internal/server", mod + "/internal/registry", mod + "/internal/spec", mod + "/apitype"}, "the data plane depends only on routing and its own types"},
	{mod + "/internal/registry", []string{mod + "/internal/admin", mod + "/internal/server"}, "the registry is below the API"},
	{mod + "/internal/autoscale", []string{mod + "/"}, "scaling decisions are pure"},
	{mod + "/internal/auth", []string{mod + "/internal/admin", mod + "/internal/server", mod + "/internal/registry", mod + "/internal/proxy", mod + "/internal/ui"}, "credentials and walls know nothing of the handlers they guard (browser sessions reach the gate through the BrowserSessions interface it declares)"},
	{mod + "/internal/ui", []string{mod + "/internal/admin", mod + "/internal/server", mod + "/internal/registry", mod + "/internal/proxy", mod + "/internal/fleet", mod + "/internal/gate", mod + "/client"}, "the web UI's pages hold no data: their scripts read and write through the admin API's routes, so the UI knows the gate it signs browsers in with and the session set, not the handlers"},
	{mod + "/internal/certs/rfc2136", []string{mod + "/"}, "the DNS UPDATE provider is a leaf (its bindtest only runs named)"},
	{mod + "/internal/certs", []string{mod + "/internal/server", mod + "/internal/proxy", mod + "/internal/admin", mod + "/internal/registry", mod + "/internal/store", mod + "/internal/fleet"}, "the certificate manager knows the routed hosts only through SetHosts, below the listeners and the API that use it"},
	{mod + "/internal/secrets", []string{mod + "/internal/admin", mod + "/internal/server", mod + "/internal/registry", mod + "/internal/fleet"}, "sealing is below its users"},
	{mod + "/internal/agent", []string{mod + "/"}, "the in-sandbox agent runs inside every sandbox: it imports nothing of berth's, so nothing of the server side reaches a sandbox"},
	{mod + "/internal/vm", []string{mod + "/internal/fleet", mod + "/internal/registry", mod + "/internal/admin", mod + "/internal/server", mod + "/internal/proxy", mod + "/internal/store"}, "drivers know only the runtime contract"},
	{mod + "/internal/vm/proc", []string{mod + "/"}, "what drivers know of host processes is a leaf they share"},
	{mod + "/internal/vm/spares", []string{mod + "/"}, "the spare-pool skeleton knows nothing of what its spares are"},
	{mod + "/internal/vm/replicadir", []string{mod + "/internal/vm/process", mod + "/internal/vm/container", mod + "/internal/vm/kvm", mod + "/internal/vm/firecracker", mod + "/internal/vm/libvirt", mod + "/internal/vm/vmtest", mod + "/internal/hostnet", mod + "/internal/image"}, "the replica state directory is below the drivers that keep one"},
	{mod + "/internal/fleet", []string{mod + "/internal/registry", mod + "/internal/admin", mod + "/internal/server", mod + "/internal/store", mod + "/internal/vm/"}, "the pool manager uses drivers only through the vm contract"},
	{mod + "/internal/fleet/etcdfleet", []string{mod + "/"}, "fleet membership and slots know only etcd: the Computer manager and the admin API reach them through interfaces they declare, which the composition root connects"},
	{mod + "/internal/fleet/etcdembed", []string{mod + "/"}, "the embedded etcd member is a leaf"},
	{mod + "/internal/fleet/placement", []string{mod + "/"}, "placement is pure rules over hosts and requests: a leaf, which the etcd scheduler runs"},
	{mod + "/internal/fleet/fleetca", []string{mod + "/internal/", mod + "/client", mod + "/cmd/"}, "the fleet CA and its files know only the wire types of the join (apitype) and berth's sealing (secrets, for the CA key at rest): berth serve reads its fleet.json through the composition root"},
	{mod + "/internal/fleet/etcdtest", []string{mod + "/internal/fleet/etcdfleet", mod + "/internal/server", mod + "/internal/admin", mod + "/internal/computer"}, "the test clusters start etcd members and know nothing of what runs on them"},
	{mod + "/internal/fleet", []string{mod + "/internal/proxy"}, "the control plane does not depend on the data plane: a pool publishes its replicas through fleet.Backends, which package registry connects to the data plane's pool"},
	{mod + "/internal/admin", []string{mod + "/internal/server", mod + "/internal/store"}, "handlers reach storage through the registry"},
	{mod + "/internal/rollout", []string{mod + "/internal/admin", mod + "/internal/server", mod + "/internal/proxy"}, "rollout records sit below the API that starts them and above the registry and the fleet that carry them out"},
	{mod + "/internal/agentbin", []string{mod + "/"}, "bundling the agent binary is a leaf"},
	{mod + "/internal/hostnet", []string{mod + "/"}, "host networking is a leaf"},
	{mod + "/internal/ptybridge", []string{mod + "/apitype", mod + "/client", mod + "/cmd/", mod + "/internal/agent", mod + "/internal/admin", mod + "/internal/computer", mod + "/internal/server", mod + "/internal/fleet", mod + "/internal/registry"}, "the websocket↔terminal bridge knows terminals only through its Terminal interface, below the handlers that use it"},
	{mod + "/internal/oidc", []string{mod + "/internal/", mod + "/client", mod + "/cmd/"}, "the OpenID Connect relying party (and its test provider) knows only the wire types and its libraries: cookies, sessions and pages are the gate's"},
	{mod + "/internal/build", []string{mod + "/"}, "the image builder runs git and buildah and hands the tree to its caller's Import: it knows nothing of jobs, deployments or the image store (address walls only, from netguard, the tar extractor, from untar, and the mount table, from mountinfo)"},
	{mod + "/internal/untar", []string{mod + "/"}, "berth's one tar extractor is a leaf: the image store, artifact trees and the image builder share it"},
	{mod + "/internal/mountinfo", []string{mod + "/"}, "reading the host's mount table is a leaf: the image store and the image builder share it"},
	{mod + "/internal/netguard", []string{mod + "/"}, "address walls are a leaf, shared by the proxy and spec validation"},
	{mod + "/internal/tracing", []string{mod + "/"}, "the span export is a leaf: the data plane traces through the OpenTelemetry API, and the composition root hands it the tracer"},
	{mod + "/internal/artifact", []string{mod + "/internal/admin", mod + "/internal/server", mod + "/internal/registry", mod + "/internal/store", mod + "/internal/fleet", mod + "/internal/proxy"}, "the artifact store and its fetch client are below the API that serves them and the jobs that fetch with them (the form of a store string is spec's to check)"},
	{mod + "/internal/workspace", []string{mod + "/internal/admin", mod + "/internal/server", mod + "/internal/registry", mod + "/internal/store", mod + "/internal/fleet", mod + "/internal/proxy", mod + "/internal/vm", mod + "/internal/secrets", mod + "/internal/jobs"}, "durable workspaces reach their records, stores and replicas only through the interfaces they declare (Records, Remote, Alive), below the fleet hook and the server that wire them"},
	{mod + "/internal/feed", []string{mod + "/internal/admin", mod + "/internal/server", mod + "/internal/registry", mod + "/internal/fleet", mod + "/internal/proxy", mod + "/internal/health"}, "the event feeds are handed what happened (Lifecycle, Issue): they know nothing of the registry, the pools, the probes or the data plane that report it, below the API that serves them"},
	{mod + "/internal/notify", []string{mod + "/internal/proxy", mod + "/internal/registry", mod + "/internal/admin", mod + "/internal/server", mod + "/internal/siem", mod + "/internal/guard"}, "the alert webhooks are handed alerts (Notifier.Alert) by the composition root: they know nothing of the SIEM that raises them, the data plane or the API that configures them"},
	{mod + "/internal/gate", []string{mod + "/internal/proxy", mod + "/internal/registry", mod + "/internal/admin", mod + "/internal/server", mod + "/internal/store", mod + "/internal/namespaces"}, "the sign-in gate is handed its tokens, sessions and providers through interfaces it declares; it satisfies the proxy's Gate without importing it"},
	{mod + "/internal/ratelimit", []string{mod + "/internal/proxy", mod + "/internal/registry", mod + "/internal/admin", mod + "/internal/server"}, "per-client limits satisfy the proxy's Limiter without importing it, below the registry that asks for them and the API that sets them"},
	{mod + "/internal/sessions", []string{mod + "/internal/gate", mod + "/internal/proxy", mod + "/internal/registry", mod + "/internal/admin", mod + "/internal/server", mod + "/internal/auth"}, "sessions are storage and lifetime, below the gate that uses them"},
	{mod + "/internal/guard", []string{mod + "/internal/proxy", mod + "/internal/registry", mod + "/internal/admin", mod + "/internal/server", mod + "/internal/gate"}, "guard rules are storage and a matcher, below the data plane that checks them and the API that writes them"},
	{mod + "/internal/telemetry", []string{mod + "/internal/proxy", mod + "/internal/registry", mod + "/internal/admin", mod + "/internal/server", mod + "/internal/store", mod + "/internal/obs"}, "the telemetry store is handed records (Access, Line) by the composition root and keeps its own file: it knows nothing of the data plane that feeds it, the main store, or the API that reads it"},
	{mod + "/internal/obs", []string{mod + "/internal/proxy", mod + "/internal/registry", mod + "/internal/admin", mod + "/internal/server", mod + "/internal/auth"}, "the obs API is an http.Handler mounted by whoever checks the caller (the admin API now, the plugin dispatcher later): it is told the namespace and asks Visible about deployments, and knows nothing of the gate, the registry or the data plane"},
	{mod + "/internal/siem", []string{mod + "/internal/proxy", mod + "/internal/registry", mod + "/internal/admin", mod + "/internal/server", mod + "/internal/gate", mod + "/internal/guard"}, "the detection engine is told what happened through Request and Auth, and suggests guard rules as wire types: it knows nothing of the data plane, the gate or the guard that feed and enforce it"},
	{mod + "/internal/jwtverify", []string{mod + "/internal/", mod + "/client", mod + "/cmd/"}, "JWT verification knows the wire type and nothing of the gate that calls it"},
	{mod + "/internal/image", []string{mod + "/internal/vm", mod + "/internal/server", mod + "/internal/admin", mod + "/internal/registry"}, "the image store knows nothing of the drivers that boot its images"},
	{mod + "/internal/grant", []string{mod + "/internal/computer", mod + "/internal/computerapi", mod + "/internal/server"}, "grant tokens know nothing of what they guard"},
	{mod + "/internal/inventory", []string{mod + "/internal/fleet", mod + "/internal/computer", mod + "/internal/server", mod + "/internal/registry", mod + "/internal/admin", mod + "/internal/store", mod + "/internal/proxy", mod + "/internal/vm/"}, "the sandbox inventory knows drivers only through the vm contract and its claimants only through the Claims they register, below both"},
	{mod + "/internal/disks", []string{mod + "/internal/admin", mod + "/internal/server", mod + "/internal/registry", mod + "/internal/fleet", mod + "/internal/computer", mod + "/internal/inventory", mod + "/internal/proxy", mod + "/internal/vm/process", mod + "/internal/vm/container", mod + "/internal/vm/kvm", mod + "/internal/vm/libvirt", mod + "/internal/vm/firecracker", mod + "/internal/vm/drivers"}, "the disk census walks the drivers' directories and knows the drivers only through the vm contract, its owners and records only through the interfaces it declares, below the API that serves it"},
	{mod + "/internal/plugin/obsplugin", []string{mod + "/internal/store", mod + "/internal/admin", mod + "/internal/server", mod + "/internal/registry", mod + "/internal/fleet", mod + "/internal/proxy"}, "the obs plugin adapts the telemetry API it is handed to package plugin's contract: it knows nothing of the records, the API or the composition root"},
	{mod + "/internal/plugin", []string{mod + "/internal/admin", mod + "/internal/server", mod + "/internal/registry", mod + "/internal/fleet", mod + "/internal/proxy", mod + "/internal/vm"}, "the plugin host reaches its records through the Records it declares and its plugins through the Plugin interface, below the API that serves it"},
	{mod + "/internal/computer", []string{mod + "/internal/computerapi", mod + "/internal/server", mod + "/internal/admin", mod + "/internal/registry", mod + "/internal/fleet", mod + "/internal/vm/"}, "Computers use drivers only through the vm contract, below their API"},
	{mod + "/internal/server", []string{mod + "/internal/vm/process", mod + "/internal/vm/container", mod + "/internal/vm/kvm", mod + "/internal/vm/libvirt", mod + "/internal/vm/firecracker", mod + "/internal/vm/guest"}, "the composition root opens the drivers only through package drivers: adding a driver touches no server code"},
	{mod + "/cmd/berth", testHelpers, "the binary carries no test helpers"},
	{mod + "/bench", []string{mod + "/"}, "benchmark programs stand alone, so they measure any berth binary (BERTH_BIN)"},
	{mod + "/internal/archtest", []string{mod + "/"}, "the layering test reads the tree through go list, not by importing it"},
	{mod + "/internal/contracttest", []string{mod + "/"}, "the contract parser is a leaf test helper"},
	{mod + "/internal/demo", []string{mod + "/internal/"}, "the demo is specs only, written in the wire types"},
	{mod + "/internal/egress", []string{mod + "/internal/computer", mod + "/internal/computerapi", mod + "/internal/server", mod + "/internal/admin", mod + "/internal/grant", mod + "/internal/store", mod + "/internal/vm"}, "the egress proxy knows a policy and addresses, nothing of the Computers whose work it carries"},
	{mod + "/internal/jobs", []string{mod + "/internal/admin", mod + "/internal/server", mod + "/internal/registry", mod + "/internal/proxy", mod + "/internal/fleet", mod + "/internal/vm"}, "jobs are handed their deployment (Request) and reach storage and secrets through interfaces they declare, below the API that starts them"},
	{mod + "/internal/namespaces", []string{mod + "/internal/admin", mod + "/internal/server", mod + "/internal/registry", mod + "/internal/fleet", mod + "/internal/proxy", mod + "/internal/vm"}, "namespaces are below the handlers and the fleet"},
	{mod + "/internal/computerapi", []string{mod + "/internal/server", mod + "/internal/admin", mod + "/internal/registry", mod + "/internal/fleet", mod + "/internal/store", mod + "/internal/vm"}, "the Computer API reaches Computers only through its Manager interface, below the composition root"},
	{mod + "/internal/server", testHelpers, "the composition root carries no test helpers"},
	{mod + "/internal/vm/vmtest", []string{mod + "/internal/vm/"}, "the conformance suite knows drivers only through the vm contract"},
	{mod + "/internal/vm/vmfake", []string{mod + "/internal/vm/process", mod + "/internal/vm/container", mod + "/internal/vm/kvm", mod + "/internal/vm/firecracker", mod + "/internal/vm/libvirt", mod + "/internal/vm/guest", mod + "/internal/vm/drivers", mod + "/internal/vm/vmtest"}, "the in-memory driver for tests knows only the vm contract and the drivers' shared spec check (TestFakeDriverOnlyInTests: only tests import it)"},
	{mod + "/internal/vm/console", []string{mod + "/internal/vm/"}, "console capture is below the drivers that use it"},
	{mod + "/internal/vm/microvm", []string{mod + "/internal/vm/kvm", mod + "/internal/vm/libvirt", mod + "/internal/vm/firecracker", mod + "/internal/vm/guest", mod + "/internal/vm/drivers"}, "what the microVM drivers share is below them"},
	{mod + "/internal/vm/guest", []string{mod + "/internal/vm/drivers"}, "guest kernels and disks are below the driver factories that use them"},
	{mod + "/internal/vm/process", []string{mod + "/internal/vm/drivers"}, "a driver knows nothing of the factories that open it"},
	{mod + "/internal/vm/container", []string{mod + "/internal/vm/drivers"}, "a driver knows nothing of the factories that open it"},
	{mod + "/internal/vm/kvm", []string{mod + "/internal/vm/drivers"}, "a driver knows nothing of the factories that open it"},
	{mod + "/internal/vm/libvirt", []string{mod + "/internal/vm/drivers"}, "a driver knows nothing of the factories that open it"},
	{mod + "/internal/vm/firecracker", []string{mod + "/internal/vm/drivers"}, "a driver knows nothing of the factories that open it"},
}

// testHelpers are packages only tests import.
var testHelpers = []string{mod + "/internal/vm/vmtest", mod + "/internal/vm/vmfake", mod + "/internal/server/servertest", mod + "/internal/proxy/proxytest", mod + "/internal/contracttest", mod + "/internal/archtest", mod + "/internal/certs/rfc2136/bindtest", mod + "/internal/certs/pebbletest", mod + "/internal/oidc/oidctest", mod + "/internal/tracing/otlptest", mod + "/internal/fleet/etcdtest"}

// allowed: by a rule's importer, the leaves it may import although the rule
// forbids them (all of berth).
var allowed = map[string][]string{
	mod + "/internal/build":           {mod + "/internal/netguard", mod + "/internal/untar", mod + "/internal/mountinfo"}, // the remote's address check; a recipe's context; what a build left mounted
	mod + "/internal/certs/rfc2136":   {mod + "/internal/syncbuf"},                                                        // bindtest's daemon log
	mod + "/internal/fleet/etcdfleet": {mod + "/internal/fleet/placement"},
	mod + "/internal/fleet/fleetca":   {mod + "/internal/secrets"}, // the scheduler places with the pure placement rules
}

// TestEveryPackageHasARule: a package no rule names could import anything;
// each one says where it sits.
func TestEveryPackageHasARule(t *testing.T) {
	for _, p := range listPackages(t) {
		covered := false
		for _, r := range rules {
			if p.ImportPath == r.importer || strings.HasPrefix(p.ImportPath, r.importer+"/") {
				covered = true
				break
			}
		}
		if !covered {
			t.Errorf("no layering rule covers %s: add one to rules saying what it may not import", p.ImportPath)
		}
	}
}

func TestLayering(t *testing.T) {
	for _, p := range listPackages(t) {
		for _, r := range rules {
			if p.ImportPath != r.importer && !strings.HasPrefix(p.ImportPath, r.importer+"/") {
				continue
			}
			for _, imp := range p.Imports {
				for _, f := range r.forbidden {
					if strings.HasPrefix(imp, f) && !strings.HasPrefix(imp, r.importer) && !slices.ContainsFunc(allowed[r.importer], func(a string) bool { return strings.HasPrefix(imp, a) }) {
						t.Errorf("%s must not import %s: %s", p.ImportPath, imp, r.why)
					}
				}
			}
		}
	}
}

// TestBinaryHasNoTestingDeps makes sure test helpers never leak into berth.
func TestBinaryHasNoTestingDeps(t *testing.T) {
	for _, p := range listPackages(t) {
		if p.ImportPath != mod+"/cmd/berth" {
			continue
		}
		for _, d := range p.Deps {
			if d == "testing" || strings.HasSuffix(d, "test") && strings.HasPrefix(d, mod) {
				t.Errorf("cmd/berth depends on %s", d)
			}
		}
		return
	}
	t.Fatal("cmd/berth not found")
}

func TestPackageDocs(t *testing.T) {
	for _, p := range listPackages(t) {
		if p.Name == "main" && p.Doc == "" || p.Doc == "" {
			t.Errorf("%s has no package comment", p.ImportPath)
		}
	}
}

// TestFakeDriverOnlyInTests keeps the in-memory driver (package vmfake) out
// of berth: only _test.go files and test helper packages (named …test)
// import it, so berth never runs replicas in memory and its binary links no
// shell interpreter.
func TestFakeDriverOnlyInTests(t *testing.T) {
	const fake = mod + "/internal/vm/vmfake"
	found := false
	for _, p := range listPackages(t) {
		if p.ImportPath == fake {
			found = true
			continue
		}
		if !strings.HasSuffix(p.ImportPath, "test") && slices.Contains(p.Imports, fake) {
			t.Errorf("%s imports %s: the fake driver is for tests only", p.ImportPath, fake)
		}
		if p.ImportPath == mod+"/cmd/berth" {
			for _, d := range p.Deps {
				if d == fake || strings.HasPrefix(d, "mvdan.cc/sh/") {
					t.Errorf("cmd/berth depends on %s", d)
				}
			}
		}
	}
	if !found {
		t.Fatalf("%s not found", fake)
	}
}
