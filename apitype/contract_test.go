package apitype_test

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/contracttest"
)

// registry maps every type the contract declares to its Go counterpart. A
// contract type missing here fails TestContract, which is how a new
// declaration in types.d.ts gets noticed.
var registry = map[string]reflect.Type{
	"DeploymentKind":        reflect.TypeFor[apitype.DeploymentKind](),
	"RouteRule":             reflect.TypeFor[apitype.RouteRule](),
	"RouteRedirect":         reflect.TypeFor[apitype.RouteRedirect](),
	"ScalingPolicy":         reflect.TypeFor[apitype.ScalingPolicy](),
	"ExpectedHeader":        reflect.TypeFor[apitype.ExpectedHeader](),
	"HealthCheck":           reflect.TypeFor[apitype.HealthCheck](),
	"VmSpec":                reflect.TypeFor[apitype.VmSpec](),
	"WorkspaceArchive":      reflect.TypeFor[apitype.WorkspaceArchive](),
	"Ingress":               reflect.TypeFor[apitype.Ingress](),
	"WorkspaceSpec":         reflect.TypeFor[apitype.WorkspaceSpec](),
	"WorkspaceStatus":       reflect.TypeFor[apitype.WorkspaceStatus](),
	"MountSpec":             reflect.TypeFor[apitype.MountSpec](),
	"SecretRef":             reflect.TypeFor[apitype.SecretRef](),
	"BuildSpec":             reflect.TypeFor[apitype.BuildSpec](),
	"ArtifactSpec":          reflect.TypeFor[apitype.ArtifactSpec](),
	"SiteSpec":              reflect.TypeFor[apitype.SiteSpec](),
	"SecretEnv":             reflect.TypeFor[apitype.SecretEnv](),
	"UpdateSpec":            reflect.TypeFor[apitype.UpdateSpec](),
	"PublicPath":            reflect.TypeFor[apitype.PublicPath](),
	"AuthGate":              reflect.TypeFor[apitype.AuthGate](),
	"AuthProvider":          reflect.TypeFor[apitype.AuthProvider](),
	"JwtSpec":               reflect.TypeFor[apitype.JwtSpec](),
	"DeploymentSpec":        reflect.TypeFor[apitype.DeploymentSpec](),
	"DiscoverySpec":         reflect.TypeFor[apitype.DiscoverySpec](),
	"FeedSpec":              reflect.TypeFor[apitype.FeedSpec](),
	"VmStatus":              reflect.TypeFor[apitype.VmStatus](),
	"DeploymentStatus":      reflect.TypeFor[apitype.DeploymentStatus](),
	"SiteRootStatus":        reflect.TypeFor[apitype.SiteRootStatus](),
	"UpstreamTrafficStatus": reflect.TypeFor[apitype.UpstreamTrafficStatus](),
	"StatusCounts":          reflect.TypeFor[apitype.StatusCounts](),
	"Bucket":                reflect.TypeFor[apitype.Bucket](),
	"Histogram":             reflect.TypeFor[apitype.Histogram](),
	"AutoscaleCounts":       reflect.TypeFor[apitype.AutoscaleCounts](),
	"DeploymentMetrics":     reflect.TypeFor[apitype.DeploymentMetrics](),
	"HostUsage":             reflect.TypeFor[apitype.HostUsage](),
	"FleetPool":             reflect.TypeFor[apitype.FleetPool](),
	"PoolStatus":            reflect.TypeFor[apitype.PoolStatus](),
	"VmView":                reflect.TypeFor[apitype.VmView](),
	"PendingVmView":         reflect.TypeFor[apitype.PendingVmView](),
	"DeploymentView":        reflect.TypeFor[apitype.DeploymentView](),
	"ObsStats":              reflect.TypeFor[apitype.ObsStats](),
	"DaemonSnapshot":        reflect.TypeFor[apitype.DaemonSnapshot](),
	"MetricsResponse":       reflect.TypeFor[apitype.MetricsResponse](),
	"HostSandboxView":       reflect.TypeFor[apitype.HostSandboxView](),
	"DiskState":             reflect.TypeFor[apitype.DiskState](),
	"DiskPartKind":          reflect.TypeFor[apitype.DiskPartKind](),
	"ArchiveStatus":         reflect.TypeFor[apitype.ArchiveStatus](),
	"DiskPart":              reflect.TypeFor[apitype.DiskPart](),
	"ArchiveRecord":         reflect.TypeFor[apitype.ArchiveRecord](),
	"DiskInfo":              reflect.TypeFor[apitype.DiskInfo](),
	"ArchiveView":           reflect.TypeFor[apitype.ArchiveView](),
	"DiskTotals":            reflect.TypeFor[apitype.DiskTotals](),
	"DiskInventory":         reflect.TypeFor[apitype.DiskInventory](),
	"SecuritySummary":       reflect.TypeFor[apitype.SecuritySummary](),
	"Severity":              reflect.TypeFor[apitype.Severity](),
	"SecurityAlert":         reflect.TypeFor[apitype.SecurityAlert](),
	"AlertResponse":         reflect.TypeFor[apitype.AlertResponse](),
	"SuggestedAction":       reflect.TypeFor[apitype.SuggestedAction](),
	"RuleAction":            reflect.TypeFor[apitype.RuleAction](),
	"RuleMatch":             reflect.TypeFor[apitype.RuleMatch](),
	"RuleSpec":              reflect.TypeFor[apitype.RuleSpec](),
	"RuleView":              reflect.TypeFor[apitype.RuleView](),
	"GuardStats":            reflect.TypeFor[apitype.GuardStats](),
	"SeverityTotals":        reflect.TypeFor[apitype.SeverityTotals](),
	"SiemStats":             reflect.TypeFor[apitype.SiemStats](),
	"SecurityResponse":      reflect.TypeFor[apitype.SecurityResponse](),
	"WorkflowSpec":          reflect.TypeFor[apitype.WorkflowSpec](),
	"WorkflowList":          reflect.TypeFor[apitype.WorkflowList](),
	"JobKind":               reflect.TypeFor[apitype.JobKind](),
	"JobStatus":             reflect.TypeFor[apitype.JobStatus](),
	"JobRecord":             reflect.TypeFor[apitype.JobRecord](),
	"MountOutcome":          reflect.TypeFor[apitype.MountOutcome](),
	"SecretSummary":         reflect.TypeFor[apitype.SecretSummary](),
	"CertStatus":            reflect.TypeFor[apitype.CertStatus](),
	"ExecOutput":            reflect.TypeFor[apitype.ExecOutput](),
	"EvictOutcome":          reflect.TypeFor[apitype.EvictOutcome](),
	"AdminScope":            reflect.TypeFor[apitype.AdminScope](),
	"TokenSummary":          reflect.TypeFor[apitype.TokenSummary](),
	"FeedIndexEntry":        reflect.TypeFor[apitype.FeedIndexEntry](),
	"FeedEvent":             reflect.TypeFor[apitype.FeedEvent](),
	"MintedToken":           reflect.TypeFor[apitype.MintedToken](),
	"PluginView":            reflect.TypeFor[apitype.PluginView](),
	"WhoAmI":                reflect.TypeFor[apitype.WhoAmI](),
	"RolloutOperation":      reflect.TypeFor[apitype.RolloutOperation](),
	"DiscoveryStatus":       reflect.TypeFor[apitype.DiscoveryStatus](),
	"NamespaceEntry":        reflect.TypeFor[apitype.NamespaceEntry](),
	"AuthProviderView":      reflect.TypeFor[apitype.AuthProviderView](),
	"NamespacePlugin":       reflect.TypeFor[apitype.NamespacePlugin](),
	"NamespaceInstall":      reflect.TypeFor[apitype.NamespaceInstall](),
	"PluginInstalls":        reflect.TypeFor[apitype.PluginInstalls](),
	"ObsFreshness":          reflect.TypeFor[apitype.ObsFreshness](),
	"ObsMetricBucket":       reflect.TypeFor[apitype.ObsMetricBucket](),
	"ObsLogBucket":          reflect.TypeFor[apitype.ObsLogBucket](),
	"ObsFleetRow":           reflect.TypeFor[apitype.ObsFleetRow](),
	"ObsFleet":              reflect.TypeFor[apitype.ObsFleet](),
	"ObsDeployment":         reflect.TypeFor[apitype.ObsDeployment](),
	"ObsLogRow":             reflect.TypeFor[apitype.ObsLogRow](),
	"ObsLogs":               reflect.TypeFor[apitype.ObsLogs](),
	"ObsAlert":              reflect.TypeFor[apitype.ObsAlert](),
}

// TestContract holds the Go types to the contract: every declared type has a
// Go counterpart, every declared field (inherited ones too) a Go field of the
// same JSON name and optionality, and no Go JSON field is undeclared —
// recursively through the named inline object types.
func TestContract(t *testing.T) {
	c := contracttest.MustLoad(t)
	problems := checkRegistry(c, registry)
	for _, p := range problems {
		t.Error(p)
	}
	if len(problems) > 0 {
		t.Logf("contract: %s", c.Path)
	}
}

// documentedRegistry maps the declarations of internal/contracttest's
// documented.d.ts (responses app-lb documents that the contract does not
// declare) to their Go types.
var documentedRegistry = map[string]reflect.Type{
	"ImageInventory": reflect.TypeFor[apitype.ImageInventory](),
	"ImageView":      reflect.TypeFor[apitype.ImageView](),
	"ImageReference": reflect.TypeFor[apitype.ImageReference](),
}

// TestDocumented holds the Go types of the documented responses to their
// declarations, as TestContract does for the contract's.
func TestDocumented(t *testing.T) {
	for _, p := range checkRegistry(contracttest.MustDocumented(t), documentedRegistry) {
		t.Error(p)
	}
}

// checkRegistry returns every difference between the contract and reg.
func checkRegistry(c *contracttest.Contract, reg map[string]reflect.Type) []string {
	var problems []string
	for _, name := range c.Names {
		rt, ok := reg[name]
		if !ok {
			problems = append(problems, name+": declared in the contract, but has no Go type in the registry")
			continue
		}
		problems = append(problems, c.CheckGoType(name, rt)...)
	}
	for name := range reg {
		if !slices.Contains(c.Names, name) {
			problems = append(problems, name+": in the registry, but not declared in the contract")
		}
	}
	slices.Sort(problems)
	return problems
}

// TestContractDetectsDrift feeds the checker small contracts that differ
// from the Go types in one way each, and asserts each difference is named.
func TestContractDetectsDrift(t *testing.T) {
	tests := []struct {
		name string
		ts   string
		reg  map[string]reflect.Type
		want []string // substrings, one per expected problem
	}{
		{
			name: "extra TS field",
			ts:   `export interface RouteRule { host?: string; host_suffix?: string; path_prefix?: string; strip_prefix?: boolean; redirect?: RouteRedirect; weight?: number; } export interface RouteRedirect { to: string; status?: number; keep_path?: boolean; }`,
			reg:  map[string]reflect.Type{"RouteRule": reflect.TypeFor[apitype.RouteRule](), "RouteRedirect": reflect.TypeFor[apitype.RouteRedirect]()},
			want: []string{"RouteRule.weight: declared in the contract"},
		},
		{
			name: "Go field not in TS",
			ts:   `export interface RouteRedirect { to: string; status?: number; }`,
			reg:  map[string]reflect.Type{"RouteRedirect": reflect.TypeFor[apitype.RouteRedirect]()},
			want: []string{"RouteRedirect.keep_path: Go field apitype.RouteRedirect.KeepPath is not declared"},
		},
		{
			name: "optionality differs",
			ts:   `export interface RouteRedirect { to?: string; status: number; keep_path?: boolean; }`,
			reg:  map[string]reflect.Type{"RouteRedirect": reflect.TypeFor[apitype.RouteRedirect]()},
			want: []string{"RouteRedirect.status: required in the contract", "RouteRedirect.to: optional in the contract"},
		},
		{
			name: "type missing from registry",
			ts:   `export type Colour = "red" | "blue"; export interface ExpectedHeader { name: string; value: string; }`,
			reg:  map[string]reflect.Type{"ExpectedHeader": reflect.TypeFor[apitype.ExpectedHeader]()},
			want: []string{"Colour: declared in the contract, but has no Go type"},
		},
		{
			name: "inherited field",
			ts: `export interface TokenSummary { id: string; name: string; admin: AdminScope; namespace?: string; deployments: string[]; created_at: number; expires_at?: number; last_used_at?: number; fleet?: boolean; mirrored_from?: string; minted_by?: string; }
export type AdminScope = "none" | "view" | "admin";
export interface MintedToken extends TokenSummary { token: string; }`,
			reg: map[string]reflect.Type{
				"TokenSummary": reflect.TypeFor[apitype.TokenSummary](),
				"MintedToken":  reflect.TypeFor[apitype.MintedToken](),
				"AdminScope":   reflect.TypeFor[apitype.AdminScope](),
			},
			want: []string{"MintedToken.minted_by: declared in the contract", "TokenSummary.minted_by: declared in the contract"},
		},
		{
			name: "field in a named inline object",
			ts:   `export interface WhoAmI { caller: string; admin_scope: string; fleet: boolean; confined: boolean; may: { read_view_routes: boolean; use_admin_routes: boolean; use_fleet_routes: boolean; [extra: string]: unknown; }; token?: { id: string; name: string; [extra: string]: unknown; }; namespace?: string; deployments?: string[]; expires_at?: number; expires_in_secs?: number; subject?: unknown; namespaces?: Record<string, string>; detail?: string; note?: string; [extra: string]: unknown; }`,
			reg:  map[string]reflect.Type{"WhoAmI": reflect.TypeFor[apitype.WhoAmI]()},
			want: []string{"WhoAmI.may.use_fleet_routes: declared in the contract"},
		},
		{
			name: "field type differs",
			ts:   `export interface ExpectedHeader { name: string; value: number; }`,
			reg:  map[string]reflect.Type{"ExpectedHeader": reflect.TypeFor[apitype.ExpectedHeader]()},
			want: []string{"ExpectedHeader.value: contract says number"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := contracttest.Parse("drift.d.ts", []byte(tt.ts))
			if err != nil {
				t.Fatal(err)
			}
			got := checkRegistry(c, tt.reg)
			if len(got) != len(tt.want) {
				t.Errorf("got %d problems, want %d:\n%s", len(got), len(tt.want), strings.Join(got, "\n"))
			}
			for _, w := range tt.want {
				if !slices.ContainsFunc(got, func(p string) bool { return strings.Contains(p, w) }) {
					t.Errorf("no problem mentions %q; got:\n%s", w, strings.Join(got, "\n"))
				}
			}
		})
	}
}

// TestEncodedTypesMatchContract encodes a fully populated value of every
// registered struct — every field, pointer, slice element and map entry set
// — and checks the JSON against the contract. It proves what the encoders
// (including the custom ones) actually emit, not just what the tags say.
func TestEncodedTypesMatchContract(t *testing.T) {
	c := contracttest.MustLoad(t)
	for _, name := range c.Names {
		rt := registry[name]
		if rt == nil || rt.Kind() != reflect.Struct {
			continue
		}
		v := reflect.New(rt)
		fill(v.Elem(), 0)
		out, err := json.Marshal(v.Interface())
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if err := c.CheckJSON(name, out); err != nil {
			t.Errorf("%s encodes keys the contract does not allow: %v\n%s", name, err, out)
		}
	}
}

var rawType = reflect.TypeFor[json.RawMessage]()

// fill sets every settable part of v to a non-zero value.
func fill(v reflect.Value, depth int) {
	if depth > 8 {
		return
	}
	if v.Type() == rawType {
		v.SetBytes([]byte(`{"any":[1,"two"]}`))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString("s")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64, reflect.Int32:
		v.SetInt(7)
	case reflect.Float64:
		v.SetFloat(1.5)
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		fill(p.Elem(), depth+1)
		v.Set(p)
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 1, 1)
		fill(s.Index(0), depth+1)
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		e := reflect.New(v.Type().Elem()).Elem()
		fill(e, depth+1)
		m.SetMapIndex(reflect.ValueOf("key").Convert(v.Type().Key()), e)
		v.Set(m)
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i), depth+1)
			}
		}
	}
}
