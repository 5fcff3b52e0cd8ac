package spec

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/berth-dev/berth/apitype"
)

var testOpts = Options{Drivers: []string{"process", "firecracker", "kvm"}, SitesDir: "/srv/sites"}

// mountOpts is a host whose drivers attach mounts as berth's do (process
// and firecracker none, kvm and libvirt read-only ones, container any).
var mountOpts = &Options{
	Drivers:  []string{"container", "firecracker", "kvm", "libvirt", "process"},
	SitesDir: "/srv/sites",
	Mounter: func(driver string) (bool, bool) {
		switch driver {
		case "container":
			return true, true
		case "kvm", "libvirt":
			return true, false
		}
		return false, false
	},
}

func vmSpec() *apitype.DeploymentSpec {
	return &apitype.DeploymentSpec{
		ID:     "app",
		Routes: []apitype.RouteRule{{Host: "app.example.com"}},
		VM:     &apitype.VmSpec{Driver: "process", Port: 8080},
	}
}

// imageOpts is a host with an image driver and an image store holding
// only "base"; localBuildOpts also builds from local repositories.
var (
	imageOpts      = Options{Drivers: []string{"kvm", "process"}, ImageExists: func(n string) bool { return n == "base" }}
	localBuildOpts = Options{Drivers: []string{"kvm"}, ImageExists: func(n string) bool { return n == "base" }, BuildAllowLocal: true}
)

// buildSpec is a kvm deployment built from b, with no image yet.
func buildSpec(b apitype.BuildSpec) *apitype.DeploymentSpec {
	return &apitype.DeploymentSpec{
		ID:     "app",
		Routes: []apitype.RouteRule{{Host: "app.example.com"}},
		VM:     &apitype.VmSpec{Driver: "kvm", Port: 8080},
		Build:  &b,
	}
}

func staticSpec() *apitype.DeploymentSpec {
	return &apitype.DeploymentSpec{
		ID:        "api",
		Routes:    []apitype.RouteRule{{PathPrefix: "/api"}},
		Upstreams: []string{"127.0.0.1:9000"},
	}
}

func siteSpec() *apitype.DeploymentSpec {
	return &apitype.DeploymentSpec{
		ID:     "docs",
		Routes: []apitype.RouteRule{{HostSuffix: "docs.example.com"}},
		Site:   &apitype.SiteSpec{Root: "/srv/sites/default/docs"},
	}
}

func intp(v int) *int    { return &v }
func boolp(v bool) *bool { return &v }

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		spec func() *apitype.DeploymentSpec
		opts *Options // testOpts when nil
		want string   // substring of the error; "" means valid
	}{
		{"vm ok", vmSpec, nil, ""},
		{"static ok", staticSpec, nil, ""},
		{"site ok", siteSpec, nil, ""},

		// identity
		{"id required", func() *apitype.DeploymentSpec { s := vmSpec(); s.ID = ""; return s }, nil, "id: required"},
		{"id charset", func() *apitype.DeploymentSpec { s := vmSpec(); s.ID = "a/b"; return s }, nil, "id: "},
		{"id leading dot", func() *apitype.DeploymentSpec { s := vmSpec(); s.ID = ".app"; return s }, nil, "id: "},
		{"id leading dash", func() *apitype.DeploymentSpec { s := vmSpec(); s.ID = "-app"; return s }, nil, "id: "},
		{"id reserved for computers", func() *apitype.DeploymentSpec { s := vmSpec(); s.ID = "cmp_box"; return s }, nil, `id: "cmp_box": the prefix "cmp_" is reserved`},
		{"id too long", func() *apitype.DeploymentSpec { s := vmSpec(); s.ID = strings.Repeat("a", 129); return s }, nil, "id: longer than 128"},
		{"id max length and mixed chars", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.ID = "My_App.v2-" + strings.Repeat("x", 118)
			return s
		}, nil, ""},
		{"namespace charset", func() *apitype.DeploymentSpec { s := vmSpec(); s.Namespace = "Team"; return s }, nil, "namespace: "},
		{"namespace too long", func() *apitype.DeploymentSpec { s := vmSpec(); s.Namespace = strings.Repeat("a", 64); return s }, nil, "namespace: longer than 63"},
		{"namespace ok", func() *apitype.DeploymentSpec { s := vmSpec(); s.Namespace = "team-1"; return s }, nil, ""},

		// backend kind
		{"no backend", func() *apitype.DeploymentSpec { s := vmSpec(); s.VM = nil; return s }, nil, "spec: one of vm, upstreams (or discovery) or site is required"},
		{"vm and upstreams", func() *apitype.DeploymentSpec { s := vmSpec(); s.Upstreams = []string{"a:1"}; return s }, nil, "got vm, upstreams"},
		{"vm and site", func() *apitype.DeploymentSpec { s := vmSpec(); s.Site = &apitype.SiteSpec{Root: "/x"}; return s }, nil, "got vm, site"},
		{"discovery and site", func() *apitype.DeploymentSpec {
			s := siteSpec()
			s.Discovery = &apitype.DiscoverySpec{ServiceID: "x"}
			return s
		}, nil, "got discovery, site"},
		{"upstreams and discovery together", func() *apitype.DeploymentSpec {
			s := staticSpec()
			s.Discovery = &apitype.DiscoverySpec{ServiceID: "svc"}
			return s
		}, nil, "discovery: discovery needs a fleet"},
		{"discovery only", func() *apitype.DeploymentSpec {
			s := staticSpec()
			s.Upstreams = nil
			s.Discovery = &apitype.DiscoverySpec{ServiceID: "svc"}
			return s
		}, nil, "discovery: discovery needs a fleet"},
		{"discovery service_id", func() *apitype.DeploymentSpec {
			s := staticSpec()
			s.Discovery = &apitype.DiscoverySpec{}
			return s
		}, nil, "discovery.service_id: required"},
		{"empty upstreams alone", func() *apitype.DeploymentSpec { s := staticSpec(); s.Upstreams = []string{}; return s }, nil, "upstreams: must not be empty"},

		// routes
		{"empty rule", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.Routes = append(s.Routes, apitype.RouteRule{})
			return s
		}, nil, "routes[1]: an empty rule"},
		{"redirect-only rule", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.Routes = []apitype.RouteRule{{Redirect: &apitype.RouteRedirect{To: "https://x.org"}}}
			return s
		}, nil, "routes[0]: an empty rule"},
		{"host with scheme", func() *apitype.DeploymentSpec { s := vmSpec(); s.Routes[0].Host = "https://a.com"; return s }, nil, "routes[0].host: "},
		{"host with port", func() *apitype.DeploymentSpec { s := vmSpec(); s.Routes[0].Host = "a.com:8080"; return s }, nil, "routes[0].host: \"a.com:8080\" must not include a port"},
		{"host with path", func() *apitype.DeploymentSpec { s := vmSpec(); s.Routes[0].Host = "a.com/x"; return s }, nil, "routes[0].host: "},
		{"host with space", func() *apitype.DeploymentSpec { s := vmSpec(); s.Routes[0].Host = "a .com"; return s }, nil, "spaces"},
		{"host wildcard", func() *apitype.DeploymentSpec { s := vmSpec(); s.Routes[0].Host = "*.a.com"; return s }, nil, "use host_suffix"},
		{"host non-ascii", func() *apitype.DeploymentSpec { s := vmSpec(); s.Routes[0].Host = "bücher.de"; return s }, nil, "xn--"},
		{"host empty label", func() *apitype.DeploymentSpec { s := vmSpec(); s.Routes[0].Host = "a..com"; return s }, nil, "empty label"},
		{"host only dots", func() *apitype.DeploymentSpec { s := vmSpec(); s.Routes[0].Host = ".."; return s }, nil, "routes[0].host: "},
		{"host too long", func() *apitype.DeploymentSpec { s := vmSpec(); s.Routes[0].Host = strings.Repeat("a", 4097); return s }, nil, "routes[0].host: longer than 4096"},
		{"host upper case and trailing dot", func() *apitype.DeploymentSpec { s := vmSpec(); s.Routes[0].Host = "App.Example.COM."; return s }, nil, ""},
		{"host ipv6", func() *apitype.DeploymentSpec { s := vmSpec(); s.Routes[0].Host = "[::1]"; return s }, nil, ""},
		{"host ipv6 with port", func() *apitype.DeploymentSpec { s := vmSpec(); s.Routes[0].Host = "[::1]:80"; return s }, nil, "port"},
		{"host bad brackets", func() *apitype.DeploymentSpec { s := vmSpec(); s.Routes[0].Host = "[nope]"; return s }, nil, "IPv6"},
		{"suffix with leading dot", func() *apitype.DeploymentSpec { s := siteSpec(); s.Routes[0].HostSuffix = ".Example.com"; return s }, nil, ""},
		{"suffix bare dot", func() *apitype.DeploymentSpec { s := siteSpec(); s.Routes[0].HostSuffix = "."; return s }, nil, "routes[0].host_suffix: \".\" matches nothing"},
		{"suffix with port", func() *apitype.DeploymentSpec { s := siteSpec(); s.Routes[0].HostSuffix = "a.com:1"; return s }, nil, "routes[0].host_suffix: "},
		{"suffix with scheme", func() *apitype.DeploymentSpec { s := siteSpec(); s.Routes[0].HostSuffix = "http://a.com"; return s }, nil, "routes[0].host_suffix: "},
		{"path no slash", func() *apitype.DeploymentSpec { s := staticSpec(); s.Routes[0].PathPrefix = "api"; return s }, nil, "routes[0].path_prefix: \"api\" must start with /"},
		{"path space", func() *apitype.DeploymentSpec { s := staticSpec(); s.Routes[0].PathPrefix = "/a b"; return s }, nil, "routes[0].path_prefix: "},
		{"path control", func() *apitype.DeploymentSpec { s := staticSpec(); s.Routes[0].PathPrefix = "/a\x01"; return s }, nil, "routes[0].path_prefix: "},
		{"path query", func() *apitype.DeploymentSpec { s := staticSpec(); s.Routes[0].PathPrefix = "/a?b"; return s }, nil, "routes[0].path_prefix: "},
		{"path too long", func() *apitype.DeploymentSpec {
			s := staticSpec()
			s.Routes[0].PathPrefix = "/" + strings.Repeat("a", 4096)
			return s
		}, nil, "routes[0].path_prefix: longer"},
		{"strip without prefix", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.Routes[0].StripPrefix = boolp(true)
			return s
		}, nil, "routes[0].strip_prefix: needs a path_prefix"},
		{"strip false without prefix", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.Routes[0].StripPrefix = boolp(false)
			return s
		}, nil, ""},
		{"strip with prefix", func() *apitype.DeploymentSpec {
			s := staticSpec()
			s.Routes[0].StripPrefix = boolp(true)
			return s
		}, nil, ""},
		{"too many routes", func() *apitype.DeploymentSpec {
			s := staticSpec()
			for i := range 257 {
				s.Routes = append(s.Routes, apitype.RouteRule{PathPrefix: fmt.Sprintf("/%d", i)})
			}
			return s
		}, nil, "routes: 258 rules exceed the limit of 256"},
		{"static without routes", func() *apitype.DeploymentSpec { s := staticSpec(); s.Routes = nil; return s }, nil, "routes: a static deployment needs at least one route"},
		{"site without routes", func() *apitype.DeploymentSpec { s := siteSpec(); s.Routes = []apitype.RouteRule{}; return s }, nil, "routes: a site deployment needs at least one route"},
		{"vm with empty routes", func() *apitype.DeploymentSpec { s := vmSpec(); s.Routes = []apitype.RouteRule{}; return s }, nil, ""},
		{"vm with nil routes", func() *apitype.DeploymentSpec { s := vmSpec(); s.Routes = nil; return s }, nil, ""},
		{"auth without routes", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.Routes = nil
			s.Auth = &apitype.AuthGate{Provider: apitype.Providers(apitype.ProviderAppToken)}
			return s
		}, nil, "auth: an auth gate needs routes"},

		// redirect
		{"redirect ok", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.Routes[0].Redirect = &apitype.RouteRedirect{To: "https://new.example.com/x", Status: intp(308)}
			return s
		}, nil, ""},
		{"redirect relative", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.Routes[0].Redirect = &apitype.RouteRedirect{To: "/elsewhere"}
			return s
		}, nil, "routes[0].redirect.to: "},
		{"redirect ftp", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.Routes[0].Redirect = &apitype.RouteRedirect{To: "ftp://x.org"}
			return s
		}, nil, "routes[0].redirect.to: "},
		{"redirect no host", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.Routes[0].Redirect = &apitype.RouteRedirect{To: "https:///x"}
			return s
		}, nil, "routes[0].redirect.to: "},
		{"redirect missing to", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.Routes[0].Redirect = &apitype.RouteRedirect{}
			return s
		}, nil, "routes[0].redirect.to: required"},
		{"redirect status", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.Routes[0].Redirect = &apitype.RouteRedirect{To: "https://x.org", Status: intp(200)}
			return s
		}, nil, "routes[0].redirect.status: 200 is not one of"},

		// upstreams
		{"upstream https ok", func() *apitype.DeploymentSpec {
			s := staticSpec()
			s.Upstreams = []string{"https://api.example.com", "10.0.0.1:80", "[::1]:81"}
			return s
		}, nil, ""},
		{"upstream bad", func() *apitype.DeploymentSpec { s := staticSpec(); s.Upstreams = []string{"a:1", "nope"}; return s }, nil, "upstreams[1]: upstream \"nope\": missing port"},
		{"upstream path", func() *apitype.DeploymentSpec { s := staticSpec(); s.Upstreams = []string{"https://a.com/x"}; return s }, nil, "upstreams[0]: "},
		{"upstream userinfo", func() *apitype.DeploymentSpec {
			s := staticSpec()
			s.Upstreams = []string{"https://u:p@a.com"}
			return s
		}, nil, "upstreams[0]: "},
		{"upstream port range", func() *apitype.DeploymentSpec { s := staticSpec(); s.Upstreams = []string{"a.com:70000"}; return s }, nil, "upstreams[0]: "},
		{"upstream duplicate", func() *apitype.DeploymentSpec {
			s := staticSpec()
			s.Upstreams = []string{"https://a.com", "b:1", "https://A.com:443"}
			return s
		}, nil, "upstreams[2]: \"https://A.com:443\" duplicates upstreams[0]"},
		{"plain and tls same addr differ", func() *apitype.DeploymentSpec {
			s := staticSpec()
			s.Upstreams = []string{"https://a.com", "a.com:443"}
			return s
		}, nil, ""},
		{"too many upstreams", func() *apitype.DeploymentSpec {
			s := staticSpec()
			s.Upstreams = nil
			for i := range 257 {
				s.Upstreams = append(s.Upstreams, fmt.Sprintf("10.0.%d.%d:80", i/250, i%250))
			}
			return s
		}, nil, "upstreams: 257 upstreams exceed the limit of 256"},

		// vm
		{"driver missing defaults to process", func() *apitype.DeploymentSpec { s := vmSpec(); s.VM.Driver = ""; return s }, nil, ""},
		{"driver missing, process unavailable", func() *apitype.DeploymentSpec { s := vmSpec(); s.VM.Driver = ""; return s }, &Options{Drivers: []string{"kvm"}}, "vm.driver: \"process\" is not available on this host (available: kvm)"},
		{"driver unavailable", func() *apitype.DeploymentSpec { s := vmSpec(); s.VM.Driver = "libvirt"; return s }, nil, "vm.driver: \"libvirt\" is not available on this host (available: process, firecracker, kvm)"},
		{"no drivers at all", vmSpec, &Options{}, "vm.driver: \"process\" is not available on this host (available: none)"},
		{"port zero", func() *apitype.DeploymentSpec { s := vmSpec(); s.VM.Driver, s.VM.Port = "kvm", 0; return s }, nil, "vm.port: 0 is not a port"},
		{"port left out for process", func() *apitype.DeploymentSpec { s := vmSpec(); s.VM.Port = 0; return s }, nil, ""},
		{"port negative for process", func() *apitype.DeploymentSpec { s := vmSpec(); s.VM.Port = -1; return s }, nil, "vm.port: -1 is not a port"},
		{"port high", func() *apitype.DeploymentSpec { s := vmSpec(); s.VM.Port = 65536; return s }, nil, "vm.port: "},
		{"size class", func() *apitype.DeploymentSpec { s := vmSpec(); s.VM.SizeClass = "huge"; return s }, nil, "vm.size_class: \"huge\""},
		{"size class ok", func() *apitype.DeploymentSpec { s := vmSpec(); s.VM.SizeClass = apitype.SizeXLarge; return s }, nil, ""},
		{"open port range", func() *apitype.DeploymentSpec { s := vmSpec(); s.VM.OpenPorts = []int{22, 0}; return s }, nil, "vm.open_ports[1]: 0 is not a port"},
		{"open port duplicate", func() *apitype.DeploymentSpec { s := vmSpec(); s.VM.OpenPorts = []int{22, 22}; return s }, nil, "vm.open_ports[1]: 22 duplicates vm.open_ports[0]"},
		{"disk size", func() *apitype.DeploymentSpec { s := vmSpec(); s.VM.DiskSizeGB = intp(0); return s }, nil, "vm.disk_size_gb: "},
		{"env var name", func() *apitype.DeploymentSpec { s := vmSpec(); s.VM.EnvVars = map[string]string{"A=B": "x"}; return s }, nil, "vm.env_vars: "},
		{"env_from secret", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.VM.EnvFrom = []apitype.SecretEnv{{Key: "k"}}
			return s
		}, nil, "vm.env_from[0].secret: required"},
		{"env_from as", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.VM.EnvFrom = []apitype.SecretEnv{{Secret: "s", As: "1BAD"}}
			return s
		}, nil, "vm.env_from[0].as: "},
		{"mount ok", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.VM.Mounts = []apitype.MountSpec{{Path: "/data", Store: "local", Ref: "v1"}, {Path: "/models", Store: "https://art.example.com", Ref: "v1"}}
			return s
		}, nil, ""},
		{"mount relative", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.VM.Mounts = []apitype.MountSpec{{Path: "data", Store: "local", Ref: "r"}}
			return s
		}, nil, "vm.mounts[0].path: "},
		{"mount dotdot", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.VM.Mounts = []apitype.MountSpec{{Path: "/a/../b", Store: "local", Ref: "r"}}
			return s
		}, nil, "vm.mounts[0].path: \"/a/../b\" must not contain .."},
		{"mount reserved", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.VM.Mounts = []apitype.MountSpec{{Path: "/proc", Store: "local", Ref: "r"}}
			return s
		}, nil, "vm.mounts[0].path: \"/proc\" is reserved"},
		{"mount nested", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.VM.Mounts = []apitype.MountSpec{{Path: "/data", Store: "local", Ref: "r"}, {Path: "/data/x", Store: "local", Ref: "r"}}
			return s
		}, nil, "vm.mounts[1].path: \"/data/x\" nests with vm.mounts[0]"},
		{"mount duplicate", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.VM.Mounts = []apitype.MountSpec{{Path: "/data", Store: "local", Ref: "r"}, {Path: "/data", Store: "local", Ref: "r"}}
			return s
		}, nil, "vm.mounts[1].path: \"/data\" duplicates"},
		{"too many mounts", func() *apitype.DeploymentSpec {
			s := vmSpec()
			for i := range 9 {
				s.VM.Mounts = append(s.VM.Mounts, apitype.MountSpec{Path: fmt.Sprintf("/m%d", i), Store: "local", Ref: "r"})
			}
			return s
		}, nil, "vm.mounts: 9 mounts exceed the limit of 8"},
		{"mount writable on kvm", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.VM.Driver = apitype.DriverKVM
			s.VM.Mounts = []apitype.MountSpec{{Path: "/data", Store: "local", Ref: "r", ReadOnly: boolp(false)}}
			return s
		}, nil, "vm.mounts[0].read_only: "},
		{"mount on a driver that cannot", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.VM.Mounts = []apitype.MountSpec{{Path: "/data", Store: "local", Ref: "r"}}
			return s
		}, mountOpts, "vm.mounts: the process driver cannot attach mounts (drivers on this host that can: container, kvm, libvirt)"},
		{"mount where no driver can", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.VM.Mounts = []apitype.MountSpec{{Path: "/data", Store: "local", Ref: "r"}}
			return s
		}, &Options{Drivers: []string{"process"}, Mounter: func(string) (bool, bool) { return false, false }},
			"vm.mounts: the process driver cannot attach mounts (drivers on this host that can: none)"},
		{"mount on a driver that can", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.VM.Driver, s.VM.Image = apitype.DriverContainer, "img"
			s.VM.Mounts = []apitype.MountSpec{{Path: "/data", Store: "local", Ref: "r", ReadOnly: boolp(false)}}
			return s
		}, mountOpts, ""},
		{"mount writable on libvirt", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.VM.Driver, s.VM.Image = apitype.DriverLibvirt, "img"
			s.VM.Mounts = []apitype.MountSpec{{Path: "/data", Store: "local", Ref: "r"}, {Path: "/w", Store: "local", Ref: "r", ReadOnly: boolp(false)}}
			return s
		}, mountOpts, "vm.mounts[1].read_only: false is refused on the libvirt driver, which attaches mounts read-only only"},
		{"mount read-only on kvm", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.VM.Driver, s.VM.Image = apitype.DriverKVM, "img"
			s.VM.Mounts = []apitype.MountSpec{{Path: "/data", Store: "local", Ref: "r", ReadOnly: boolp(true)}}
			return s
		}, mountOpts, ""},
		{"mount store", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.VM.Mounts = []apitype.MountSpec{{Path: "/data", Ref: "r"}}
			return s
		}, nil, "vm.mounts[0].store: required"},
		{"mount auth secret", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.VM.Mounts = []apitype.MountSpec{{Path: "/data", Store: "local", Ref: "r", Auth: &apitype.SecretRef{}}}
			return s
		}, nil, "vm.mounts[0].auth.secret: required"},
		{"workspace ok", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.VM.Workspace = &apitype.WorkspaceSpec{Store: "s3://my-bucket/ws"}
			s.Scaling = &apitype.ScalingPolicy{MaxReplicas: intp(1)}
			return s
		}, nil, ""},
		{"workspace refused on firecracker", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.VM.Driver = apitype.DriverFirecracker
			s.VM.Workspace = &apitype.WorkspaceSpec{Store: "local"}
			s.Scaling = &apitype.ScalingPolicy{MaxReplicas: intp(1)}
			return s
		}, nil, "vm.driver: vm.workspace needs a driver that shares a writable directory"},
		{"workspace on kvm", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.VM.Driver = apitype.DriverKVM
			s.VM.Workspace = &apitype.WorkspaceSpec{Store: "local"}
			s.Scaling = &apitype.ScalingPolicy{MaxReplicas: intp(1)}
			return s
		}, nil, ""},
		{"workspace on kvm elsewhere than /workspace", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.VM.Driver = apitype.DriverKVM
			s.VM.Workspace = &apitype.WorkspaceSpec{Store: "local", Path: "/data"}
			s.Scaling = &apitype.ScalingPolicy{MaxReplicas: intp(1)}
			return s
		}, nil, `vm.workspace.path: "/data": the kvm driver attaches the workspace at /workspace only`},
		{"workspace refused on firecracker, naming the drivers", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.VM.Driver = apitype.DriverFirecracker
			s.VM.Workspace = &apitype.WorkspaceSpec{Store: "local"}
			s.Scaling = &apitype.ScalingPolicy{MaxReplicas: intp(1)}
			return s
		}, nil, `vm.driver: vm.workspace needs a driver that shares a writable directory with its replicas (process, container, kvm or libvirt), not "firecracker"`},
		{"workspace needs one replica", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.VM.Workspace = &apitype.WorkspaceSpec{Store: "local"}
			return s
		}, nil, "scaling.max_replicas: 5: vm.workspace has one owner at a time"},
		{"workspace needs no warm pool", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.VM.Workspace = &apitype.WorkspaceSpec{Store: "local"}
			s.Scaling = &apitype.ScalingPolicy{MaxReplicas: intp(1), WarmPool: intp(1)}
			return s
		}, nil, "scaling.warm_pool: 1: vm.workspace requires warm_pool 0"},
		{"workspace store form", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.VM.Workspace = &apitype.WorkspaceSpec{Store: "ftp://x"}
			s.Scaling = &apitype.ScalingPolicy{MaxReplicas: intp(1)}
			return s
		}, nil, "vm.workspace.store: "},
		{"workspace bucket name", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.VM.Workspace = &apitype.WorkspaceSpec{Store: "s3://A_B"}
			s.Scaling = &apitype.ScalingPolicy{MaxReplicas: intp(1)}
			return s
		}, nil, "vm.workspace.store: s3://A_B: a bucket name"},
		{"workspace ref", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.VM.Workspace = &apitype.WorkspaceSpec{Store: "local", Ref: "a/../b"}
			s.Scaling = &apitype.ScalingPolicy{MaxReplicas: intp(1)}
			return s
		}, nil, "vm.workspace.ref: "},
		{"workspace path on a driver without writable mounts", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.VM.Workspace = &apitype.WorkspaceSpec{Store: "local", Path: "/data"}
			s.Scaling = &apitype.ScalingPolicy{MaxReplicas: intp(1)}
			return s
		}, &Options{Drivers: []string{"process"}, Mounter: func(string) (bool, bool) { return false, false }}, "vm.workspace.path: \"/data\": the process driver attaches the workspace at /workspace only"},
		{"workspace path reserved", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.VM.Workspace = &apitype.WorkspaceSpec{Store: "local", Path: "/proc/x"}
			s.Scaling = &apitype.ScalingPolicy{MaxReplicas: intp(1)}
			return s
		}, nil, "vm.workspace.path: \"/proc/x\" is reserved"},
		{"archive without a bucket", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.VM.WorkspaceArchive = &apitype.WorkspaceArchive{S3Key: "a/b.tar.gz"}
			return s
		}, nil, "vm.workspace_archive: this server has no archive bucket"},
		{"archive ok", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.VM.WorkspaceArchive = &apitype.WorkspaceArchive{S3Key: "a/b.tar.gz"}
			return s
		}, &Options{Drivers: []string{"process"}, WorkspaceArchives: true}, ""},
		{"workspace and archive", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.VM.Workspace = &apitype.WorkspaceSpec{Store: "/srv/ws"}
			s.VM.WorkspaceArchive = &apitype.WorkspaceArchive{S3Key: "k"}
			return s
		}, nil, "vm.workspace_archive: cannot be combined"},
		{"archive id alone", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.VM.WorkspaceArchive = &apitype.WorkspaceArchive{ArchiveID: "ar-1"}
			return s
		}, nil, "vm.workspace_archive.s3_key: required"},

		// scaling
		{"scaling negative", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.Scaling = &apitype.ScalingPolicy{DrainTimeoutSecs: intp(-1)}
			return s
		}, nil, "scaling.drain_timeout_secs: must not be negative"},
		{"scaling min over max", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.Scaling = &apitype.ScalingPolicy{MinReplicas: intp(3), MaxReplicas: intp(2)}
			return s
		}, nil, "scaling.min_replicas: min_replicas (3) exceeds max_replicas (2)"},
		{"scaling min over default max", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.Scaling = &apitype.ScalingPolicy{MinReplicas: intp(7)}
			return s
		}, nil, "min_replicas (7) exceeds max_replicas (5)"},
		{"scaling target zero", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.Scaling = &apitype.ScalingPolicy{TargetConcurrency: intp(0)}
			return s
		}, nil, "scaling.target_concurrency: must be greater than 0"},
		{"scaling warm over max", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.Scaling = &apitype.ScalingPolicy{WarmPool: intp(3), MaxReplicas: intp(2)}
			return s
		}, nil, "scaling.warm_pool: warm_pool (3) exceeds max_replicas (2)"},
		{"scaling idle action", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.Scaling = &apitype.ScalingPolicy{IdleAction: "hibernate"}
			return s
		}, nil, "scaling.idle_action: \"hibernate\""},
		{"scaling retain ok", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.Scaling = &apitype.ScalingPolicy{IdleAction: apitype.IdleRetain, MinReplicas: intp(5)}
			return s
		}, nil, ""},
		{"scaling on site accepted", func() *apitype.DeploymentSpec {
			s := siteSpec()
			s.Scaling = &apitype.ScalingPolicy{MaxReplicas: intp(1)}
			return s
		}, nil, ""},
		{"scaling on site still validated", func() *apitype.DeploymentSpec {
			s := siteSpec()
			s.Scaling = &apitype.ScalingPolicy{MaxReplicas: intp(-1)}
			return s
		}, nil, "scaling.max_replicas: "},

		// health
		{"health ok", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.Health = &apitype.HealthCheck{Path: apitype.Some("/healthz?deep=1"), Port: intp(9000), TimeoutSecs: intp(0)}
			return s
		}, nil, ""},
		{"health tcp", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.Health = &apitype.HealthCheck{Path: apitype.NullValue[string]()}
			return s
		}, nil, ""},
		{"health port", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.Health = &apitype.HealthCheck{Port: intp(0)}
			return s
		}, nil, "health.port: 0 is not a port"},
		{"health timeout", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.Health = &apitype.HealthCheck{TimeoutSecs: intp(-1)}
			return s
		}, nil, "health.timeout_secs: must not be negative"},
		{"health path", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.Health = &apitype.HealthCheck{Path: apitype.Some("healthz")}
			return s
		}, nil, "health.path: \"healthz\" must start with /"},
		{"health path empty", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.Health = &apitype.HealthCheck{Path: apitype.Some("")}
			return s
		}, nil, "health.path: "},
		{"health path crlf", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.Health = &apitype.HealthCheck{Path: apitype.Some("/x HTTP/1.1\r\nHost: evil")}
			return s
		}, nil, "health.path: "},
		{"health expected header", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.Health = &apitype.HealthCheck{ExpectedHeader: &apitype.ExpectedHeader{Name: "", Value: "x"}}
			return s
		}, nil, "health.expected_header.name: "},

		// site
		{"site root required", func() *apitype.DeploymentSpec { s := siteSpec(); s.Site.Root = ""; return s }, &Options{}, "site.root: required"},
		{"site root relative", func() *apitype.DeploymentSpec { s := siteSpec(); s.Site.Root = "srv/docs"; return s }, &Options{}, "site.root: \"srv/docs\" must be an absolute path"},
		{"site root from SitesDir", func() *apitype.DeploymentSpec { s := siteSpec(); s.Site.Root = ""; return s }, &Options{SitesDir: "/var/lib/berth/sites"}, ""},
		{"site index dotdot", func() *apitype.DeploymentSpec { s := siteSpec(); s.Site.Index = "../index.html"; return s }, nil, "site.index: \"../index.html\" must not contain .."},
		{"site index absolute", func() *apitype.DeploymentSpec { s := siteSpec(); s.Site.Index = "/etc/passwd"; return s }, nil, "site.index: "},
		{"site not_found dotdot", func() *apitype.DeploymentSpec { s := siteSpec(); s.Site.NotFound = "a/../../x"; return s }, nil, "site.not_found: "},
		{"site not_found ok", func() *apitype.DeploymentSpec { s := siteSpec(); s.Site.NotFound = "errors/404.html"; return s }, nil, ""},
		{"site cache control injection", func() *apitype.DeploymentSpec { s := siteSpec(); s.Site.CacheControl = "x\r\nSet-Cookie: a"; return s }, nil, "site.cache_control: "},

		// build and artifact
		{"build ok", func() *apitype.DeploymentSpec { return buildSpec(apitype.BuildSpec{Repo: "https://git.test/x"}) }, &imageOpts, ""},
		{"build on process", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.Build = &apitype.BuildSpec{Repo: "https://git.test/x"}
			return s
		}, nil, "build: the process driver runs no images"},
		{"build image missing ok", func() *apitype.DeploymentSpec {
			s := buildSpec(apitype.BuildSpec{Repo: "https://git.test/x"})
			s.VM.Image = "app-build-1"
			return s
		}, &imageOpts, ""},
		{"build and artifact", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.Build = &apitype.BuildSpec{Repo: "r"}
			s.Artifact = &apitype.ArtifactSpec{Store: "local", Ref: "r"}
			return s
		}, nil, "build: build and artifact are mutually exclusive"},
		{"build on site", func() *apitype.DeploymentSpec { s := siteSpec(); s.Build = &apitype.BuildSpec{Repo: "r"}; return s }, nil, "build: only a vm deployment can be built"},
		{"build neither", func() *apitype.DeploymentSpec { return buildSpec(apitype.BuildSpec{}) }, &imageOpts, "build: one of repo or store is required"},
		{"build repo and store", func() *apitype.DeploymentSpec {
			return buildSpec(apitype.BuildSpec{Repo: "r", Store: "local", Ref: "x"})
		}, &imageOpts, "build: repo and store are mutually exclusive"},
		{"build store needs ref", func() *apitype.DeploymentSpec { return buildSpec(apitype.BuildSpec{Store: "local"}) }, &imageOpts, "build.ref: required"},
		{"build store dockerfile", func() *apitype.DeploymentSpec {
			return buildSpec(apitype.BuildSpec{Store: "local", Ref: "v1", Dockerfile: "Dockerfile"})
		}, &imageOpts, "build.dockerfile: git source only"},
		{"build store ok", func() *apitype.DeploymentSpec { return buildSpec(apitype.BuildSpec{Store: "local", Ref: "v1"}) }, &imageOpts, ""},
		{"build dockerfile absolute", func() *apitype.DeploymentSpec {
			return buildSpec(apitype.BuildSpec{Repo: "https://git.test/x", Dockerfile: "/etc/passwd"})
		}, &imageOpts, "build.dockerfile: "},
		{"build context escapes", func() *apitype.DeploymentSpec {
			return buildSpec(apitype.BuildSpec{Repo: "https://git.test/x", Context: "../up"})
		}, &imageOpts, "build.context: "},
		{"build context unclean", func() *apitype.DeploymentSpec {
			return buildSpec(apitype.BuildSpec{Repo: "https://git.test/x", Context: "a//b"})
		}, &imageOpts, "build.context: "},
		{"build subdir ok", func() *apitype.DeploymentSpec {
			return buildSpec(apitype.BuildSpec{Repo: "https://git.test/x", Context: "web", Dockerfile: "web/Dockerfile.prod"})
		}, &imageOpts, ""},
		{"build image name", func() *apitype.DeploymentSpec {
			return buildSpec(apitype.BuildSpec{Repo: "https://git.test/x", ImageName: "-x"})
		}, &imageOpts, "build.image_name: "},
		{"build image name registry", func() *apitype.DeploymentSpec {
			return buildSpec(apitype.BuildSpec{Repo: "https://git.test/x", ImageName: "ghcr.io/o/app:v1"})
		}, &imageOpts, "build.image_name: "},
		{"build image size", func() *apitype.DeploymentSpec {
			return buildSpec(apitype.BuildSpec{Repo: "https://git.test/x", ImageSizeMB: intp(512)})
		}, &imageOpts, "build.image_size_mb: not supported yet"},
		{"build local refused", func() *apitype.DeploymentSpec { return buildSpec(apitype.BuildSpec{Repo: "/srv/git/app"}) }, &imageOpts, "build.repo: local repositories are not allowed"},
		{"build file refused", func() *apitype.DeploymentSpec { return buildSpec(apitype.BuildSpec{Repo: "file:///srv/git/app"}) }, &imageOpts, "build.repo: local repositories are not allowed"},
		{"build local allowed", func() *apitype.DeploymentSpec { return buildSpec(apitype.BuildSpec{Repo: "/srv/git/app"}) }, &localBuildOpts, ""},
		{"build http refused", func() *apitype.DeploymentSpec { return buildSpec(apitype.BuildSpec{Repo: "http://git.test/x"}) }, &imageOpts, "build.repo: the http transport is not allowed"},
		{"build ssh refused", func() *apitype.DeploymentSpec { return buildSpec(apitype.BuildSpec{Repo: "ssh://git@git.test/x"}) }, &imageOpts, "build.repo: the ssh transport"},
		{"build ext refused", func() *apitype.DeploymentSpec { return buildSpec(apitype.BuildSpec{Repo: "ext::sh -c x"}) }, &imageOpts, "build.repo: "},
		{"build url credentials", func() *apitype.DeploymentSpec {
			return buildSpec(apitype.BuildSpec{Repo: "https://u:p@git.test/x"})
		}, &imageOpts, "build.repo: credentials in the URL"},
		{"build auth", func() *apitype.DeploymentSpec {
			return buildSpec(apitype.BuildSpec{Repo: "https://git.test/x", Auth: &apitype.SecretRef{}})
		}, &imageOpts, "build.auth.secret: required"},
		{"artifact on site", func() *apitype.DeploymentSpec {
			s := siteSpec()
			s.Artifact = &apitype.ArtifactSpec{Store: "local", Ref: "r", StripComponents: intp(1)}
			return s
		}, nil, ""},
		{"artifact on vm without an image yet", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.VM.Driver = apitype.DriverKVM
			s.Artifact = &apitype.ArtifactSpec{Store: "local", Ref: "r", ImageName: "app"}
			return s
		}, &Options{Drivers: []string{"kvm"}, ImageExists: func(string) bool { return false }}, ""},
		{"artifact on process", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.Artifact = &apitype.ArtifactSpec{Store: "local", Ref: "r"}
			return s
		}, nil, "artifact: the process driver has no images"},
		{"artifact on static", func() *apitype.DeploymentSpec {
			s := staticSpec()
			s.Artifact = &apitype.ArtifactSpec{Store: "local", Ref: "r"}
			return s
		}, nil, "artifact: only vm and site"},
		{"artifact grow on site", func() *apitype.DeploymentSpec {
			s := siteSpec()
			s.Artifact = &apitype.ArtifactSpec{Store: "local", Ref: "r", GrowGB: intp(1)}
			return s
		}, nil, "artifact.grow_gb: "},
		{"artifact strip on vm", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.Artifact = &apitype.ArtifactSpec{Store: "local", Ref: "r", StripComponents: intp(1)}
			return s
		}, nil, "artifact.strip_components: site bundles only"},
		{"artifact grow on vm", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.Artifact = &apitype.ArtifactSpec{Store: "local", Ref: "r", GrowGB: intp(2)}
			return s
		}, nil, "artifact.grow_gb: berth cannot grow an image's disk"},
		{"artifact strip too deep", func() *apitype.DeploymentSpec {
			s := siteSpec()
			s.Artifact = &apitype.ArtifactSpec{Store: "local", Ref: "r", StripComponents: intp(17)}
			return s
		}, nil, "artifact.strip_components: 17 is out of range: 0 to 16"},
		{"mount strip too deep", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.VM.Mounts = []apitype.MountSpec{{Path: "/data", Store: "local", Ref: "r", StripComponents: intp(99)}}
			return s
		}, nil, "vm.mounts[0].strip_components: 99 is out of range: 0 to 16"},
		{"artifact ref", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.Artifact = &apitype.ArtifactSpec{Store: "local"}
			return s
		}, nil, "artifact.ref: required"},

		// update
		{"update on static", func() *apitype.DeploymentSpec {
			s := staticSpec()
			s.Update = &apitype.UpdateSpec{WorkingDir: "/srv/app", Commands: []string{"git pull"}}
			return s
		}, nil, ""},
		{"update on site", func() *apitype.DeploymentSpec {
			s := siteSpec()
			s.Update = &apitype.UpdateSpec{WorkingDir: "/srv/app", Commands: []string{"make"}, TimeoutSecs: new(60), VerifyTimeoutSecs: new(0)}
			return s
		}, nil, ""},
		{"update timeout zero", func() *apitype.DeploymentSpec {
			s := staticSpec()
			s.Update = &apitype.UpdateSpec{WorkingDir: "/srv/app", Commands: []string{"make"}, TimeoutSecs: new(0)}
			return s
		}, nil, "update.timeout_secs: 0 is out of range"},
		{"update timeout too long", func() *apitype.DeploymentSpec {
			s := staticSpec()
			s.Update = &apitype.UpdateSpec{WorkingDir: "/srv/app", Commands: []string{"make"}, TimeoutSecs: new(86401)}
			return s
		}, nil, "update.timeout_secs: 86401 is out of range"},
		{"update verify timeout", func() *apitype.DeploymentSpec {
			s := staticSpec()
			s.Update = &apitype.UpdateSpec{WorkingDir: "/srv/app", Commands: []string{"make"}, VerifyTimeoutSecs: new(-1)}
			return s
		}, nil, "update.verify_timeout_secs: -1 is out of range"},
		{"update env name", func() *apitype.DeploymentSpec {
			s := staticSpec()
			s.Update = &apitype.UpdateSpec{WorkingDir: "/srv/app", Commands: []string{"make"}, Env: map[string]string{"1BAD": "x"}}
			return s
		}, nil, "update.env: \"1BAD\""},
		{"update blank command", func() *apitype.DeploymentSpec {
			s := staticSpec()
			s.Update = &apitype.UpdateSpec{WorkingDir: "/srv/app", Commands: []string{"make", " "}}
			return s
		}, nil, "update.commands[1]: must not be empty"},
		{"update auth", func() *apitype.DeploymentSpec {
			s := staticSpec()
			s.Update = &apitype.UpdateSpec{WorkingDir: "/srv/app", Commands: []string{"make"}, Auth: &apitype.SecretRef{Secret: "git"}}
			return s
		}, nil, "update.auth: not supported yet"},
		{"update on vm", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.Update = &apitype.UpdateSpec{WorkingDir: "/srv/app", Commands: []string{"git pull"}}
			return s
		}, nil, "update: only static and site"},
		{"update and artifact on site", func() *apitype.DeploymentSpec {
			s := siteSpec()
			s.Artifact = &apitype.ArtifactSpec{Store: "local", Ref: "r"}
			s.Update = &apitype.UpdateSpec{WorkingDir: "/srv/app", Commands: []string{"make"}}
			return s
		}, nil, "update: update and artifact are mutually exclusive"},
		{"update commands", func() *apitype.DeploymentSpec {
			s := staticSpec()
			s.Update = &apitype.UpdateSpec{WorkingDir: "/srv/app"}
			return s
		}, nil, "update.commands: "},
		{"update working dir", func() *apitype.DeploymentSpec {
			s := staticSpec()
			s.Update = &apitype.UpdateSpec{WorkingDir: "app", Commands: []string{"make"}}
			return s
		}, nil, "update.working_dir: "},
		{"update env_from", func() *apitype.DeploymentSpec {
			s := staticSpec()
			s.Update = &apitype.UpdateSpec{WorkingDir: "/a", Commands: []string{"make"}, EnvFrom: []apitype.SecretEnv{{}}}
			return s
		}, nil, "update.env_from[0].secret: required"},

		// auth
		{"auth ok", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.Auth = &apitype.AuthGate{Provider: apitype.Providers(apitype.ProviderGoogle), ClientID: "cid",
				ClientSecret: &apitype.SecretRef{Secret: "google"}, AllowedDomains: []string{"example.com"}}
			return s
		}, nil, ""},
		{"auth provider value", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.Auth = &apitype.AuthGate{Provider: apitype.Providers("github")}
			return s
		}, nil, "auth.provider[0]: \"github\""},
		{"auth client_id without google", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.Auth = &apitype.AuthGate{Provider: apitype.Providers(apitype.ProviderAppToken), ClientID: "x"}
			return s
		}, nil, "auth.client_id: "},
		{"auth provider_ref with identity", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.Auth = &apitype.AuthGate{ProviderRef: "corp", ClientID: "x"}
			return s
		}, nil, "auth.provider_ref: inherits the identity fields; remove client_id"},
		{"auth jwt needs spec", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.Auth = &apitype.AuthGate{Provider: apitype.Providers(apitype.ProviderJWT)}
			return s
		}, nil, "auth.jwt: required"},
		{"auth jwt allow-list", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.Auth = &apitype.AuthGate{Provider: apitype.Providers(apitype.ProviderJWT), AllowedEmails: []string{"a@b"},
				JWT: &apitype.JwtSpec{JWKSURL: "https://x/jwks", Algorithms: []string{"RS256"}, Issuer: "x"}}
			return s
		}, nil, "auth.allowed_domains: "},
		{"auth jwt two keys", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.Auth = &apitype.AuthGate{Provider: apitype.Providers(apitype.ProviderJWT),
				JWT: &apitype.JwtSpec{JWKSURL: "https://x/jwks", PublicKey: "pem", Algorithms: []string{"RS256"}, Issuer: "x"}}
			return s
		}, nil, "auth.jwt: exactly one of"},
		{"auth jwt algorithms", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.Auth = &apitype.AuthGate{Provider: apitype.Providers(apitype.ProviderJWT),
				JWT: &apitype.JwtSpec{Secret: &apitype.SecretRef{Secret: "k"}, Issuer: "x"}}
			return s
		}, nil, "auth.jwt.algorithms: required"},
		{"auth public path scope", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.Auth = &apitype.AuthGate{Provider: apitype.Providers(apitype.ProviderAppToken),
				PublicPaths: []apitype.PublicPath{{Path: "/pub", Scope: "everyone"}}}
			return s
		}, nil, "auth.public_paths[0].scope: "},
		{"auth google needs client", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.Auth = &apitype.AuthGate{AllowedDomains: []string{"example.com"}}
			return s
		}, nil, "auth.client_id: required with the google provider"},
		{"auth google needs secret", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.Auth = &apitype.AuthGate{ClientID: "cid", AllowedDomains: []string{"example.com"}}
			return s
		}, nil, "auth.client_secret: required"},
		{"auth google needs allow-list", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.Auth = &apitype.AuthGate{ClientID: "cid", ClientSecret: &apitype.SecretRef{Secret: "g"}}
			return s
		}, nil, "auth.allowed_domains: an allow-list is required"},
		{"auth cookie_domain outside", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.Routes = []apitype.RouteRule{{Host: "app.example.com"}, {Host: "app.other.org"}}
			s.Auth = &apitype.AuthGate{Provider: apitype.Providers(apitype.ProviderAppToken), CookieDomain: "example.com"}
			return s
		}, nil, "auth.cookie_domain: routes[1].host \"app.other.org\" is not within"},
		{"auth cookie_domain one label", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.Auth = &apitype.AuthGate{Provider: apitype.Providers(apitype.ProviderAppToken), CookieDomain: "com"}
			return s
		}, nil, "auth.cookie_domain: \"com\" must be a parent domain"},
		{"auth session_scope", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.Auth = &apitype.AuthGate{Provider: apitype.Providers(apitype.ProviderAppToken), SessionScope: "root"}
			return s
		}, nil, "auth.session_scope: "},
		{"auth redirect_url path", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.Auth = &apitype.AuthGate{Provider: apitype.Providers(apitype.ProviderAppToken), RedirectURL: "https://a.test/cb"}
			return s
		}, nil, "auth.redirect_url: must end in /__applb/auth/callback"},
		{"auth jwt login_url needs cookie", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.Auth = &apitype.AuthGate{Provider: apitype.Providers(apitype.ProviderJWT),
				JWT: &apitype.JwtSpec{JWKSURL: "https://x.test/jwks", Algorithms: []string{"RS256"}, Issuer: "x", LoginURL: "https://x.test/login"}}
			return s
		}, nil, "auth.jwt.cookie: required with login_url"},
		{"auth jwt login_endpoint", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.Auth = &apitype.AuthGate{Provider: apitype.Providers(apitype.ProviderJWT),
				JWT: &apitype.JwtSpec{JWKSURL: "https://x.test/jwks", Algorithms: []string{"RS256"}, Issuer: "x", Cookie: "t", LoginEndpoint: "https://x.test/api/auth/login"}}
			return s
		}, nil, "auth.jwt.login_endpoint: not supported"},
		{"auth jwt jwks http", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.Auth = &apitype.AuthGate{Provider: apitype.Providers(apitype.ProviderJWT),
				JWT: &apitype.JwtSpec{JWKSURL: "http://x.test/jwks", Algorithms: []string{"RS256"}, Issuer: "x"}}
			return s
		}, nil, "auth.jwt.jwks_url: "},
		{"auth jwt scoped half", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.Auth = &apitype.AuthGate{Provider: apitype.Providers(apitype.ProviderJWT),
				JWT: &apitype.JwtSpec{JWKSURL: "https://x.test/jwks", Algorithms: []string{"RS256"}, Issuer: "x", AuthorizeURL: "https://x.test/authorize"}}
			return s
		}, nil, "auth.jwt.authorize_url: authorize_url and token_url go together"},

		// feed
		{"feed expose", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.Feed = &apitype.FeedSpec{Expose: "feed.xml"}
			return s
		}, nil, "feed.expose: \"feed.xml\" must start with /"},
		{"feed expose query", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.Feed = &apitype.FeedSpec{Expose: "/feed?x=1"}
			return s
		}, nil, "feed.expose: \"/feed?x=1\" must not contain ?"},
		{"feed expose dot segment", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.Feed = &apitype.FeedSpec{Expose: "/a/../feed"}
			return s
		}, nil, "feed.expose: \"/a/../feed\" must be a clean path"},
		{"feed expose no routes", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.Routes = nil
			s.Feed = &apitype.FeedSpec{Expose: "/feed"}
			return s
		}, nil, "feed.expose: the deployment has no routes"},
		{"feed expose off the routes", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.Routes = []apitype.RouteRule{{Host: "app.example.com", PathPrefix: "/app"}}
			s.Feed = &apitype.FeedSpec{Expose: "/feed"}
			return s
		}, nil, "feed.expose: \"/feed\" lies on none of the deployment's routes"},
		{"feed ok", func() *apitype.DeploymentSpec {
			s := vmSpec()
			s.Routes = []apitype.RouteRule{{Host: "app.example.com", PathPrefix: "/app"}}
			yes := true
			s.Feed = &apitype.FeedSpec{Announce: &yes, Issues: &yes, Expose: "/app/feed.xml"}
			return s
		}, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := testOpts
			if tt.opts != nil {
				o = *tt.opts
			}
			s := tt.spec()
			Normalize(s, o)
			err := Validate(s, o)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate = nil, want error containing %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Validate = %q, want it to contain %q", err, tt.want)
			}
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Errorf("Validate returned %T, want *FieldError", err)
			}
		})
	}
}

// TestAuthAccepted: gates are enforced (package gate), so a valid one,
// inline or inherited, passes Validate.
func TestAuthAccepted(t *testing.T) {
	for _, g := range []*apitype.AuthGate{
		{Provider: apitype.Providers(apitype.ProviderAppToken)},
		{ProviderRef: "corp"},
		{Provider: apitype.Providers(apitype.ProviderJWT), JWT: &apitype.JwtSpec{Secret: &apitype.SecretRef{Secret: "k"}, Algorithms: []string{"HS256"}, Issuer: "i"}},
	} {
		s := vmSpec()
		s.Routes = []apitype.RouteRule{{Host: "a.test"}}
		s.Auth = g
		Normalize(s, testOpts)
		if err := Validate(s, testOpts); err != nil {
			t.Errorf("gate %+v: Validate = %v", g, err)
		}
	}
}

// TestReplicaCeiling: max_replicas above the operator's ceiling is refused
// naming scaling.max_replicas; at the ceiling, or without one, it is not.
func TestReplicaCeiling(t *testing.T) {
	o := testOpts
	o.MaxReplicasCeiling = 100
	for _, c := range []struct {
		max  int
		opts Options
		want bool
	}{{100, o, false}, {101, o, true}, {101, testOpts, false}} {
		s := vmSpec()
		s.Scaling = &apitype.ScalingPolicy{MaxReplicas: &c.max}
		Normalize(s, c.opts)
		err := Validate(s, c.opts)
		var fe *FieldError
		if got := errors.As(err, &fe) && fe.Field == "scaling.max_replicas"; got != c.want {
			t.Errorf("max_replicas %d, ceiling %d: Validate = %v", c.max, c.opts.MaxReplicasCeiling, err)
		}
	}
}

func TestLoaderVar(t *testing.T) {
	for name, want := range map[string]bool{
		"LD_PRELOAD": true, "LD_LIBRARY_PATH": true, "LD_AUDIT": true, "LD_ANYTHING": true,
		"GCONV_PATH": true, "GLIBC_TUNABLES": true, "NLSPATH": true, "RES_OPTIONS": true,
		"PATH": false, "TMPDIR": false, "HOME": false, "OLD_PRELOAD": false, "ld_preload": false,
	} {
		if got := LoaderVar(name); got != want {
			t.Errorf("LoaderVar(%s) = %v, want %v", name, got, want)
		}
	}
}

func TestValidateNil(t *testing.T) {
	err := Validate(nil, testOpts)
	if err == nil || err.Error() != "spec: required" {
		t.Errorf("Validate(nil) = %v, want spec: required", err)
	}
}

func TestValidateWithoutNormalize(t *testing.T) {
	// Validate must judge a raw client document the same way where
	// Normalize only changes spelling.
	s := siteSpec()
	s.Routes[0].HostSuffix = ".Docs.Example.COM."
	s.Routes = append(s.Routes, apitype.RouteRule{Host: "WWW.Example.com."})
	if err := Validate(s, testOpts); err != nil {
		t.Errorf("Validate = %v, want nil", err)
	}
}

func TestFieldErrorString(t *testing.T) {
	e := &FieldError{Field: "scaling.min_replicas", Msg: "3 exceeds max_replicas (2)"}
	if got, want := e.Error(), "scaling.min_replicas: 3 exceeds max_replicas (2)"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}
