package main

import (
	"context"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/certmagic"

	"github.com/berth-dev/berth/internal/artifact"
	"github.com/berth-dev/berth/internal/auth"
	"github.com/berth-dev/berth/internal/certs"
	"github.com/berth-dev/berth/internal/computer"
	"github.com/berth-dev/berth/internal/demo"
	"github.com/berth-dev/berth/internal/disks"
	"github.com/berth-dev/berth/internal/hostcheck"
	"github.com/berth-dev/berth/internal/hostnet"
	"github.com/berth-dev/berth/internal/server"
	"github.com/berth-dev/berth/internal/siem"
	"github.com/berth-dev/berth/internal/spec"
	"github.com/berth-dev/berth/internal/telemetry"
	"github.com/berth-dev/berth/internal/tracing"
	"github.com/berth-dev/berth/internal/workspace"
)

const serveHelp = `usage: berth serve [flags]

Runs the gateway: the data plane (proxy) and the admin API, which also
serves the web UI (open http://<admin-addr>/ in a browser; with
BERTH_ADMIN_PASSWORD set, sign in with it or with an app-token).

Flags (each also read from the environment variable shown):
`

const serveEnvHelp = `
Credentials (environment only, so they never show in the process list):
  BERTH_ADMIN_PASSWORD  enables HTTP Basic for the operator and gates every
                        admin route but /healthz; required to serve the admin
                        API on a non-loopback --admin-addr
  BERTH_SECRET_KEY      seals the secret store (64 hex characters, or any
                        passphrase); unset: <data-dir>/secret.key, generated
                        0600 on first use — back it up with the data dir
  AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN
                        berth's own S3 credentials: the workspace archive
                        bucket's, and s3:// workspace stores' that name no
                        vm.workspace.auth
  BERTH_ACME_DNS        the DNS provider that answers DNS-01 for
                        --acme-wildcard bases, with its credential:
                        rfc2136://<tsig-key-name>:<base64-secret>@<server>:53
                        ?alg=hmac-sha256[&zone=<zone>] (dynamic updates to
                        your own DNS server: BIND, Knot, PowerDNS)

VM drivers (environment only; they describe the host):
  BERTH_GUEST_KERNEL    the kvm driver's guest kernel; unset: the newest
                        /boot/vmlinuz-<release> with /lib/modules/<release>
                        (Debian: linux-image-amd64)
  BERTH_GUEST_MODULES   its module tree; unset: /lib/modules/<release>
  BERTH_GUEST_INITRD    a ready initramfs; unset: built from the module tree
                        and busybox-static at the first kvm start, cached in
                        <data-dir>/kvm/guest
  BERTH_GUEST_AGENT     a static berth (CGO_ENABLED=0) put into microVM
                        guests as /berth-agent; unset: BERTH_CONTAINER_AGENT,
                        else this berth, which must then be static
  BERTH_KVM_ACCEL       kvm or tcg; unset: kvm where a probe boot works, else tcg
  BERTH_FC_KERNEL       the firecracker driver's guest kernel (a vmlinux with
                        virtio-mmio, ext4 and IP_PNP built in)
  BERTH_FC_BIN          the firecracker binary; unset: firecracker in PATH
  BERTH_CONTAINER_AGENT another berth run as the containers' init; unset:
                        this berth (a dynamic one gets its libc bundled)
  BERTH_OCI_RUNTIME     the containers' OCI runtime: crun, runc or a path
  BERTH_LIBVIRT_SOCKET  libvirtd's socket; unset: /run/libvirt/libvirt-sock
  BERTH_ALLOW_UNLIMITED 1: as root, start process replicas even where no
                        cgroup can limit their pids, memory and CPU (unset:
                        such starts are refused)

Tuning (environment only):
  GOGC                  unset: berth serve collects garbage at 400% heap
                        growth (Go's default is 100): less GC CPU on the data
                        plane for a larger, still small, heap
`

// envBoolDefault reads a boolean environment variable: unset or
// unparsable is def.
func envBoolDefault(name string, def bool) bool {
	if v, err := strconv.ParseBool(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

// siemTuneKeys are --siem-tune's keys.
const siemTuneKeys = "window, auth, scan, scan-paths, rate, spread, suppress, alerts-per-minute, clients, queue, alerts, query"

// parseSIEMTune reads --siem-tune into c: key=value pairs, each a count, a
// duration (window, suppress) or a boolean (query: scan query values).
func parseSIEMTune(v string, c *siem.Config) error {
	for _, kv := range splitList(v) {
		k, val, ok := strings.Cut(kv, "=")
		if !ok {
			return fmt.Errorf("--siem-tune %q: want key=value (keys: %s)", kv, siemTuneKeys)
		}
		k = strings.TrimSpace(k)
		val = strings.TrimSpace(val)
		var ip *int
		var dp *time.Duration
		switch k {
		case "window":
			dp = &c.Window
		case "suppress":
			dp = &c.Suppress
		case "auth":
			ip = &c.AuthThreshold
		case "scan":
			ip = &c.ScanThreshold
		case "scan-paths":
			ip = &c.ScanDistinctPaths
		case "rate":
			ip = &c.RateThreshold
		case "spread":
			ip = &c.SpreadDistinct
		case "alerts-per-minute":
			ip = &c.MaxAlertsPerMinute
		case "clients":
			ip = &c.MaxClients
		case "queue":
			ip = &c.QueueCapacity
		case "alerts":
			ip = &c.AlertCapacity
		case "query":
			b, err := strconv.ParseBool(val)
			if err != nil {
				return fmt.Errorf("--siem-tune query=%q: want true or false", val)
			}
			c.NoQueryScan = !b
			continue
		default:
			return fmt.Errorf("--siem-tune: unknown key %q (keys: %s)", k, siemTuneKeys)
		}
		if dp != nil {
			d, err := time.ParseDuration(val)
			if err != nil || d <= 0 {
				return fmt.Errorf("--siem-tune %s=%q: want a positive duration such as 60s", k, val)
			}
			*dp = d
			continue
		}
		n, err := strconv.Atoi(val)
		if err != nil || n <= 0 {
			return fmt.Errorf("--siem-tune %s=%q: want a positive whole number", k, val)
		}
		*ip = n
	}
	return nil
}

// deprecatedLocalRepos are the two flags (and variables) that each allowed
// local repositories for one of their users before --allow-local-repos
// named the one policy: they still turn it on, with a warning.
var deprecatedLocalRepos = []struct{ flag, env string }{
	{"build-allow-local", "BERTH_BUILD_ALLOW_LOCAL"},
	{"workflow-allow-local", "BERTH_WORKFLOW_ALLOW_LOCAL"},
}

// allowLocalReposFlag defines --allow-local-repos (BERTH_ALLOW_LOCAL_REPOS)
// and its deprecated aliases on fs. The function it returns, called after
// fs.Parse, is the policy: the new flag when it is given, else on when the
// new variable or any deprecated flag or variable says so; each deprecated
// name in use is warned about on w.
func allowLocalReposFlag(fs *flag.FlagSet) func(w io.Writer) bool {
	on := fs.Bool("allow-local-repos", envBool("BERTH_ALLOW_LOCAL_REPOS"), "let fleet-wide writers name a local git repository (a path or file:// URL) as a deployment's build.repo or a workflow's repo; confined tokens never may (BERTH_ALLOW_LOCAL_REPOS)")
	old := make([]*bool, len(deprecatedLocalRepos))
	for i, d := range deprecatedLocalRepos {
		old[i] = fs.Bool(d.flag, false, "deprecated: --allow-local-repos ("+d.env+")")
	}
	return func(w io.Writer) bool {
		given := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
		v := *on
		for i, d := range deprecatedLocalRepos {
			if given[d.flag] {
				fmt.Fprintf(w, "berth serve: --%s is deprecated: use --allow-local-repos (one policy for builds and workflows)\n", d.flag)
				v = v || *old[i]
			}
			if _, set := os.LookupEnv(d.env); set {
				fmt.Fprintf(w, "berth serve: %s is deprecated: use BERTH_ALLOW_LOCAL_REPOS (one policy for builds and workflows)\n", d.env)
				v = v || envBool(d.env)
			}
		}
		if given["allow-local-repos"] {
			return *on
		}
		return v
	}
}

// envBool reads a boolean environment variable: unset or unparsable is
// false.
func envBool(name string) bool {
	v, _ := strconv.ParseBool(os.Getenv(name))
	return v
}

func env(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}

// secretEnv are the environment variables holding berth's own secrets.
var secretEnv = []string{"BERTH_ADMIN_PASSWORD", "BERTH_SECRET_KEY", "BERTH_ACME_DNS", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"}

// takeSecrets reads berth's secrets from the environment and removes them
// from it, so no process berth starts inherits them whatever its driver
// passes on. (/proc/<pid>/environ still shows the environment berth was
// started with: the process driver's sandboxes do not see berth's /proc.)
func takeSecrets() map[string]string {
	m := make(map[string]string, len(secretEnv))
	for _, name := range secretEnv {
		m[name] = os.Getenv(name)
		os.Unsetenv(name)
	}
	return m
}

// hostCgroups is the cgroup layout berth serve's host setup prepares: the
// zero value, this machine's; tests set a fake.
var hostCgroups hostcheck.Cgroups

func serve(ctx context.Context, args []string, stderr io.Writer) int {
	secrets := takeSecrets()
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), serveHelp)
		fs.PrintDefaults()
		fmt.Fprint(fs.Output(), serveEnvHelp)
	}
	proxyAddr := fs.String("proxy-addr", env("BERTH_PROXY_ADDR", "0.0.0.0:6188"), "data-plane listen address (BERTH_PROXY_ADDR)")
	adminAddr := fs.String("admin-addr", env("BERTH_ADMIN_ADDR", "127.0.0.1:9090"), "admin API listen address (BERTH_ADMIN_ADDR)")
	dataDir := fs.String("data-dir", env("BERTH_DATA_DIR", "./berth-data"), "directory for berth's store (BERTH_DATA_DIR)")
	sitesDir := fs.String("sites-dir", env("BERTH_SITES_DIR", ""), "where site deployments' roots live, one subtree per namespace (<sites-dir>/<namespace>); default <data-dir>/sites (BERTH_SITES_DIR)")
	siteRoots := fs.String("site-roots-allow", env("BERTH_SITE_ROOTS_ALLOW", ""), "comma-separated directories outside --sites-dir that the operator's site roots may lie in; never for namespace tokens (BERTH_SITE_ROOTS_ALLOW)")
	registryCA := fs.String("registry-ca-file", env("BERTH_REGISTRY_CA_FILE", ""), "PEM file of CA certificates trusted for image registries, besides the system's (BERTH_REGISTRY_CA_FILE)")
	registryInsecure := fs.String("registry-allow-insecure", env("BERTH_REGISTRY_ALLOW_INSECURE", ""), "comma-separated registry hosts (host or host:port) image pulls may reach over plain HTTP or on loopback; others are refused (BERTH_REGISTRY_ALLOW_INSECURE)")
	imageBudget := fs.Int64("image-budget", int64(intEnv("BERTH_IMAGE_BUDGET_MIB", 20<<10)), "MiB of images POST /images/sweep trims the image store to, removing unused unpinned images oldest first (BERTH_IMAGE_BUDGET_MIB)")
	trusted := fs.String("trusted-proxies", env("BERTH_TRUSTED_PROXIES", ""), "comma-separated CIDRs or addresses whose X-Forwarded-* headers are kept (BERTH_TRUSTED_PROXIES)")
	baseDomain := fs.String("base-domain", env("BERTH_BASE_DOMAIN", ""), "give deployments without a host rule the route <id>.<base-domain> (BERTH_BASE_DOMAIN)")
	publicIPs := fs.String("public-ips", env("BERTH_PUBLIC_IPS", ""), "comma-separated addresses served by GET /ingress (BERTH_PUBLIC_IPS)")
	surge := fs.Int("rollout-surge", intEnv("BERTH_ROLLOUT_SURGE", 1), "how many replicas beyond scaling.max_replicas a candidate-first rollout may run while the previous replicas still serve; below the serving count the rollout is rolling (BERTH_ROLLOUT_SURGE)")
	drain := fs.Duration("drain-timeout", durEnv("BERTH_DRAIN_TIMEOUT", 30*time.Second), "how long SIGTERM waits for in-flight requests and websockets (BERTH_DRAIN_TIMEOUT)")
	adminHosts := fs.String("admin-hosts", env("BERTH_ADMIN_HOSTS", ""), "comma-separated host names (or host:port) the admin API answers to besides localhost and its own addresses; other Host headers get 421 (BERTH_ADMIN_HOSTS)")
	adminUser := fs.String("admin-user", env("BERTH_ADMIN_USER", "admin"), "the operator's HTTP Basic user name (BERTH_ADMIN_USER)")
	tenantTTL := fs.Duration("tenant-token-max-ttl", durEnv("BERTH_TENANT_TOKEN_MAX_TTL", 90*24*time.Hour), "longest lifetime of a token minted by a namespace credential (BERTH_TENANT_TOKEN_MAX_TTL)")
	logLevel := fs.String("log-level", env("BERTH_LOG_LEVEL", "info"), "debug, info, warn or error (BERTH_LOG_LEVEL)")
	bodyTimeout := fs.Duration("body-read-timeout", durEnv("BERTH_BODY_READ_TIMEOUT", 30*time.Second), "end a proxied request whose body sends no byte for this long: 408, and the backend's request canceled; negative: never (BERTH_BODY_READ_TIMEOUT)")
	stdHTTP := fs.Bool("proxy-std-http", envBool("BERTH_PROXY_STD_HTTP"), "serve the data plane with Go's net/http server alone, not berth's HTTP/1.1 front end (BERTH_PROXY_STD_HTTP)")
	egressAddr := fs.String("egress-addr", env("BERTH_EGRESS_ADDR", ""), "listen address of the Computers' egress proxy; default the guest bridge's gateway (or 127.0.0.1) at a port kept across restarts; off: none (BERTH_EGRESS_ADDR)")
	respTimeout := fs.Duration("upstream-response-timeout", durEnv("BERTH_UPSTREAM_RESPONSE_TIMEOUT", 60*time.Second), "how long a backend may take to send its response head before the client gets 504; negative: no limit (BERTH_UPSTREAM_RESPONSE_TIMEOUT)")
	replicaCeiling := fs.Int("max-replicas-ceiling", intEnv("BERTH_MAX_REPLICAS_CEILING", spec.DefaultMaxReplicasCeiling), "the most scaling.max_replicas a deployment may ask for; negative: no ceiling (BERTH_MAX_REPLICAS_CEILING)")
	confinedDrivers := fs.String("confined-drivers", env("BERTH_CONFINED_DRIVERS", strings.Join(auth.DefaultConfinedDrivers, ",")), "comma-separated vm drivers a namespace token may use; add process only if its isolation is enough for your tenants (BERTH_CONFINED_DRIVERS)")
	nsDrivers := fs.String("namespace-drivers", env("BERTH_NAMESPACE_DRIVERS", ""), "per-namespace overrides of --confined-drivers: ns=driver,driver;ns2=driver (BERTH_NAMESPACE_DRIVERS)")
	replicaQuota := fs.Int("namespace-replica-quota", intEnv("BERTH_NAMESPACE_REPLICA_QUOTA", auth.DefaultNamespaceReplicaQuota), "the most max_replicas a namespace token's vm deployments may add up to in its namespace; negative: no quota (BERTH_NAMESPACE_REPLICA_QUOTA)")
	guardEnforce := fs.Bool("guard-enforce", envBoolDefault("BERTH_GUARD_ENFORCE", true), "refuse the requests guard rules block (403); false only counts and logs them (BERTH_GUARD_ENFORCE)")
	siemOn := fs.Bool("siem", envBoolDefault("BERTH_SIEM", true), "detect attacks in the data plane's and the admin API's traffic (GET /security); false turns detection off, guard rules still apply (BERTH_SIEM)")
	telRetention := fs.String("telemetry-retention", env("BERTH_TELEMETRY_RETENTION", "7d"), "how long the telemetry store (<data-dir>/telemetry.db: access records, job output, events, metrics, read by the obs API and `berth logs --since`/`berth top`) keeps rows: days as 7d, or a duration such as 36h (BERTH_TELEMETRY_RETENTION)")
	telMax := fs.Int64("telemetry-max-bytes", int64(intEnv("BERTH_TELEMETRY_MAX_BYTES", telemetry.DefaultMaxBytes)), "the size the telemetry store is kept under, the oldest logs deleted first (BERTH_TELEMETRY_MAX_BYTES)")
	telRows := fs.Int("telemetry-access-rows", intEnv("BERTH_TELEMETRY_ACCESS_ROWS", telemetry.DefaultAccessRows), "access records of one deployment stored as log rows per second, and as many again at level error; the metrics count every request; negative: store every one (BERTH_TELEMETRY_ACCESS_ROWS)")
	siemTune := fs.String("siem-tune", env("BERTH_SIEM_TUNE", ""), "the SIEM's thresholds, comma-separated key=value: "+siemTuneKeys+" (BERTH_SIEM_TUNE)")
	hostUpdates := fs.Bool("host-updates", envBool("BERTH_HOST_UPDATES"), "let fleet-wide admins start host-update jobs (POST /deployments/{id}/update), which run a static or site deployment's update.commands on this host as berth's user; off by default (BERTH_HOST_UPDATES)")
	allowLocal := allowLocalReposFlag(fs)
	wfHTTP := fs.Bool("workflow-allow-http", envBool("BERTH_WORKFLOW_ALLOW_HTTP"), "let a workflow's repo be a plain http:// remote (BERTH_WORKFLOW_ALLOW_HTTP)")
	allowLinkLocal := fs.Bool("allow-link-local-upstreams", envBool("BERTH_ALLOW_LINK_LOCAL_UPSTREAMS"), "let upstreams reach link-local and cloud metadata addresses (169.254.0.0/16, fe80::/10, 100.100.100.200, fd00:ec2::254), refused by default (BERTH_ALLOW_LINK_LOCAL_UPSTREAMS)")
	artifactMax := fs.Int64("artifact-max-bytes", int64(intEnv("BERTH_ARTIFACT_MAX_BYTES", int(artifact.DefaultMaxBlobBytes))), "the largest blob one upload to the artifact store (/namespaces/{ns}/artifacts) may hold (BERTH_ARTIFACT_MAX_BYTES)")
	artifactPrivate := fs.Bool("artifact-allow-private", envBool("BERTH_ARTIFACT_ALLOW_PRIVATE"), "let the artifact stores deployments name (http(s) store URLs) be reached at loopback and private addresses, refused by default so a tenant cannot make berth fetch from the internal network (BERTH_ARTIFACT_ALLOW_PRIVATE)")
	buildHTTP := fs.Bool("build-allow-http", envBool("BERTH_BUILD_ALLOW_HTTP"), "let build.repo be a plain http:// remote (a build.auth token sent to one travels in the clear); https only by default (BERTH_BUILD_ALLOW_HTTP)")
	buildNetwork := fs.Bool("build-network", envBool("BERTH_BUILD_NETWORK"), "give image builds' RUN steps the host's network; off by default: RUN steps get none (BERTH_BUILD_NETWORK)")
	buildTimeout := fs.Duration("build-timeout", durEnv("BERTH_BUILD_TIMEOUT", 0), "the longest one image build may take; 0: 30m (BERTH_BUILD_TIMEOUT)")
	s3Endpoint := fs.String("s3-endpoint", env("BERTH_S3_ENDPOINT", ""), "URL of the S3-compatible service s3:// workspace stores and the workspace archive bucket live on; empty is AWS's (BERTH_S3_ENDPOINT)")
	s3Region := fs.String("s3-region", env("BERTH_S3_REGION", ""), "the S3 region to sign for; empty lets the client find the bucket's (BERTH_S3_REGION)")
	archiveBucket := fs.String("workspace-archive-bucket", env("BERTH_WORKSPACE_ARCHIVE_BUCKET", ""), "the S3 bucket vm.workspace_archive.s3_key names an object of; empty refuses vm.workspace_archive (BERTH_WORKSPACE_ARCHIVE_BUCKET)")
	artifactRoots := fs.String("artifact-roots", env("BERTH_ARTIFACT_ROOTS", ""), "comma-separated directories an absolute local store root (a deployment's store: /path) may lie in; empty refuses absolute roots (BERTH_ARTIFACT_ROOTS)")
	maxActive := fs.Int("computer-max-active", intEnv("BERTH_COMPUTER_MAX_ACTIVE", 0), "register this host in the Computer capacity registry with at most this many Computers starting or running at once; 0: keep the registry as stored (empty: 16 fleet slots) (BERTH_COMPUTER_MAX_ACTIVE)")
	headroom := fs.Int("computer-reserved-headroom", intEnv("BERTH_COMPUTER_RESERVED_HEADROOM", 0), "of --computer-max-active, how many slots to hold back (below it) (BERTH_COMPUTER_RESERVED_HEADROOM)")
	recycleAfter := fs.Duration("computer-recycle-after", durEnv("BERTH_COMPUTER_RECYCLE_AFTER", 0), "replace a Computer's sandbox older than this at a quiet moment, keeping its workspace; 0: never (BERTH_COMPUTER_RECYCLE_AFTER)")
	diskTTL := fs.Duration("disk-ttl", durEnv("BERTH_DISK_TTL", disks.DefaultTTL), "how long after its last change a stopped VM disk nobody holds is kept before the disk sweep removes it; 0: never (BERTH_DISK_TTL)")
	diskOrphanTTL := fs.Duration("disk-orphan-ttl", durEnv("BERTH_DISK_ORPHAN_TTL", disks.DefaultOrphanTTL), "how long after its last change an orphaned VM disk (no deployment or Computer claims it) is kept before the disk sweep removes it; 0: never (BERTH_DISK_ORPHAN_TTL)")
	diskSweep := fs.Duration("disk-sweep", durEnv("BERTH_DISK_SWEEP", disks.DefaultSweepEvery), "how often the disk sweep runs (at least 1m) (BERTH_DISK_SWEEP)")
	diskArchive := fs.Bool("disk-archive-on-expire", envBool("BERTH_DISK_ARCHIVE_ON_EXPIRE"), "archive an expired VM disk into the artifact store before the sweep removes it (BERTH_DISK_ARCHIVE_ON_EXPIRE)")
	noHostSetup := fs.Bool("no-host-setup", envBool("BERTH_NO_HOST_SETUP"), "as root, do not prepare the host before opening the drivers; by default berth serve does what berth host setup does (berth's directories, the guest bridge and its egress rules, and on hybrid cgroup hosts v1 hierarchies for the unified hierarchy's controllers), idempotently, each step logged (BERTH_NO_HOST_SETUP)")
	tlsAddr := fs.String("proxy-tls-addr", env("BERTH_PROXY_TLS_ADDR", "0.0.0.0:6189"), "data-plane HTTPS (and HTTP/3, UDP) listen address, bound when ACME is on or --tls-cert/--tls-key are given (BERTH_PROXY_TLS_ADDR)")
	tlsCert := fs.String("tls-cert", env("BERTH_TLS_CERT", ""), "PEM certificate (chain) served for names without an issued certificate; with --tls-key (BERTH_TLS_CERT)")
	tlsKey := fs.String("tls-key", env("BERTH_TLS_KEY", ""), "PEM private key of --tls-cert (BERTH_TLS_KEY)")
	acmeEmail := fs.String("acme-email", env("BERTH_ACME_EMAIL", ""), "turn on automatic certificates (ACME) for every host a deployment routes, with this contact address (BERTH_ACME_EMAIL)")
	acmeDirectory := fs.String("acme-directory", env("BERTH_ACME_DIRECTORY", certmagic.LetsEncryptProductionCA), "the ACME server's directory URL (BERTH_ACME_DIRECTORY)")
	acmeCARoot := fs.String("acme-ca-root", env("BERTH_ACME_CA_ROOT", ""), "PEM file of the root that signs the ACME server's own HTTPS certificate, for a private CA; default the system's roots (BERTH_ACME_CA_ROOT)")
	acmeDir := fs.String("acme-dir", env("BERTH_ACME_DIR", ""), "where ACME accounts, certificates (keys sealed with the secret key) and backoff are kept; default <data-dir>/acme (BERTH_ACME_DIR)")
	acmeWildcard := fs.String("acme-wildcard", env("BERTH_ACME_WILDCARD", ""), "comma-separated bases ordered as base + *.base over DNS-01 (BERTH_ACME_DNS says how); the hosts they cover are not ordered one by one (BERTH_ACME_WILDCARD)")
	httpsRedirect := fs.Bool("https-redirect", envBool("BERTH_HTTPS_REDIRECT"), "answer plaintext requests with a 308 to https (ACME challenges excepted) (BERTH_HTTPS_REDIRECT)")
	hsts := fs.String("hsts", env("BERTH_HSTS", ""), "Strict-Transport-Security value added to responses over TLS, e.g. max-age=31536000; empty: none (BERTH_HSTS)")
	adminTLSCert := fs.String("admin-tls-cert", env("BERTH_ADMIN_TLS_CERT", ""), "serve the admin API over TLS with this PEM certificate; with --admin-tls-key (BERTH_ADMIN_TLS_CERT)")
	adminTLSKey := fs.String("admin-tls-key", env("BERTH_ADMIN_TLS_KEY", ""), "PEM private key of --admin-tls-cert (BERTH_ADMIN_TLS_KEY)")
	adminACMEHost := fs.String("admin-acme-host", env("BERTH_ADMIN_ACME_HOST", ""), "serve the admin API over TLS with an ACME certificate for this name (needs --acme-email) (BERTH_ADMIN_ACME_HOST)")
	otlpEndpoint := fs.String("otlp-endpoint", env("BERTH_OTLP_ENDPOINT", ""), "export the data plane's traces (one span per request, with its stages and upstream attempts) over OTLP/HTTP to this collector: host:port, or an https:// URL (http:// with --otlp-insecure) whose path replaces /v1/traces; empty: no tracing (BERTH_OTLP_ENDPOINT)")
	otlpInsecure := fs.Bool("otlp-insecure", envBool("BERTH_OTLP_INSECURE"), "send traces to --otlp-endpoint in plaintext, for a collector on loopback or a private network (BERTH_OTLP_INSECURE)")
	traceSample := fs.Float64("trace-sample", floatEnv("BERTH_TRACE_SAMPLE", 1), "the share (0 to 1) of the traces berth starts that it records; a request with a traceparent follows its sampled flag (BERTH_TRACE_SAMPLE)")
	storeURL := fs.String("store", env("BERTH_STORE", "sqlite"), "where deployments, tokens, secrets and the rest are kept: sqlite, the embedded store in --data-dir, or etcd://host:port[,host:port…][/prefix], an etcd cluster (TLS as --etcd-ca, --etcd-cert, --etcd-key; shared by the hosts of a fleet, one berth per host id) (BERTH_STORE)")
	etcdEndpoints := fs.String("etcd", env("BERTH_ETCD", ""), "comma-separated etcd client URLs: join the fleet of berths on that cluster (host membership, fleet-wide Computer slots); empty: this berth runs alone and no etcd code runs (BERTH_ETCD)")
	etcdCA := fs.String("etcd-ca", env("BERTH_ETCD_CA", ""), "PEM file of the CA etcd's certificates are checked with (BERTH_ETCD_CA)")
	etcdCert := fs.String("etcd-cert", env("BERTH_ETCD_CERT", ""), "PEM client certificate this host presents to etcd; with --etcd-key (BERTH_ETCD_CERT)")
	etcdKey := fs.String("etcd-key", env("BERTH_ETCD_KEY", ""), "PEM private key of --etcd-cert (BERTH_ETCD_KEY)")
	etcdDev := fs.Bool("etcd-dev", envBool("BERTH_ETCD_DEV"), "dev mode: embed a single etcd member in <data-dir>/etcd (clients on 127.0.0.1:2379, peers on 127.0.0.1:2380) and join the fleet on it; other berths on this machine join with --etcd http://127.0.0.1:2379 (BERTH_ETCD_DEV)")
	hostID := fs.String("host-id", env("BERTH_HOST_ID", ""), "this host's id in the fleet; default an id made on first use and kept in <data-dir>/host-id (BERTH_HOST_ID)")
	fleetSlots := fs.Int("fleet-slots", intEnv("BERTH_FLEET_SLOTS", 0), "the fleet-wide limit of Computers starting or running, across every host on --etcd (each host still applies its own); give every host the same; 0: no fleet limit (BERTH_FLEET_SLOTS)")
	fleetListen := fs.String("fleet-listen", env("BERTH_FLEET_LISTEN", ""), "HOST:PORT of the hop listener: the fleet's other hosts send requests for this host's replicas there, over mutual TLS with the fleet CA's certificates (from the data dir's fleet.json, or --etcd-ca/--etcd-cert/--etcd-key); empty: none (BERTH_FLEET_LISTEN)")
	withDemo := fs.Bool("demo", false, "register demo deployments (a vm app that scales from zero, and a site) and print how to reach them")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "berth serve: unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return 2
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		fmt.Fprintf(stderr, "berth serve: --log-level: %v\n", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	if _, set := os.LookupEnv("GOGC"); !set {
		// The data plane allocates little that lives, and fast: a
		// collection every 400% of heap growth instead of 100% spends a
		// quarter of the GC CPU for a heap that peaks at five times the
		// live data (a few MB here) rather than twice. GOGC overrides it.
		debug.SetGCPercent(400)
	}
	prefixes, err := parsePrefixes(*trusted)
	if err != nil {
		fmt.Fprintf(stderr, "berth serve: --trusted-proxies: %v\n", err)
		return 2
	}
	retention, err := parseRetention(*telRetention)
	if err != nil {
		fmt.Fprintf(stderr, "berth serve: --telemetry-retention: %v\n", err)
		return 2
	}
	if *telRows == 0 {
		fmt.Fprintln(stderr, "berth serve: --telemetry-access-rows: 0 would store no access record; give a positive number, or a negative one to store every one")
		return 2
	}
	if *telMax < 1<<20 {
		fmt.Fprintf(stderr, "berth serve: --telemetry-max-bytes: %d is below 1 MiB\n", *telMax)
		return 2
	}
	siemConfig := siem.Config{Disabled: !*siemOn}
	if err := parseSIEMTune(*siemTune, &siemConfig); err != nil {
		fmt.Fprintf(stderr, "berth serve: %v\n", err)
		return 2
	}
	nsDriverMap, err := parseNamespaceDrivers(*nsDrivers)
	if err != nil {
		fmt.Fprintf(stderr, "berth serve: --namespace-drivers: %v\n", err)
		return 2
	}
	if *headroom != 0 && *maxActive <= 0 {
		fmt.Fprintln(stderr, "berth serve: --computer-reserved-headroom needs --computer-max-active")
		return 2
	}
	confined := splitList(*confinedDrivers)
	if confined == nil {
		confined = []string{} // set but empty: no driver
	}
	if abs, err := filepath.Abs(*dataDir); err == nil {
		*dataDir = abs
	}
	if err := bothOrNeither("--tls-cert", *tlsCert, "--tls-key", *tlsKey); err != nil {
		fmt.Fprintf(stderr, "berth serve: %v\n", err)
		return 2
	}
	if err := bothOrNeither("--admin-tls-cert", *adminTLSCert, "--admin-tls-key", *adminTLSKey); err != nil {
		fmt.Fprintf(stderr, "berth serve: %v\n", err)
		return 2
	}
	certOpts, err := certOptions(*acmeEmail, *acmeDirectory, *acmeCARoot, *acmeDir, *acmeWildcard, secrets["BERTH_ACME_DNS"], *tlsCert, *tlsKey, log)
	if err != nil {
		fmt.Fprintf(stderr, "berth serve: %v\n", err)
		return 2
	}
	traces := tracing.Config{Endpoint: *otlpEndpoint, Insecure: *otlpInsecure, Sample: *traceSample, ServiceVersion: buildVersion(), Log: log}
	if err := traces.Validate(); err != nil {
		fmt.Fprintf(stderr, "berth serve: %v\n", err)
		return 2
	}
	storeEtcd, err := parseStore(*storeURL)
	if err != nil {
		fmt.Fprintf(stderr, "berth serve: --store: %v\n", err)
		return 2
	}
	fleetOpts := server.FleetOptions{
		Endpoints: splitList(*etcdEndpoints), CAFile: *etcdCA, CertFile: *etcdCert, KeyFile: *etcdKey,
		Dev: *etcdDev, HostID: *hostID, Slots: *fleetSlots, Listen: *fleetListen,
	}
	if fo, err := fleetOpts.FromDataDir(*dataDir); err != nil {
		fmt.Fprintf(stderr, "berth serve: %v\n", strings.TrimPrefix(err.Error(), "server: "))
		return 2
	} else if err := fo.Check(); err != nil {
		fmt.Fprintf(stderr, "berth serve: %v\n", strings.TrimPrefix(err.Error(), "server: "))
		return 2
	}
	guestNet, err := hostnet.ConfigFromEnv(*dataDir)
	if err != nil {
		fmt.Fprintf(stderr, "berth serve: %v\n", err)
		return 2
	}
	if *noHostSetup {
		log.Info("host setup skipped: --no-host-setup (BERTH_NO_HOST_SETUP)")
	} else {
		hostcheck.ServeSetup(ctx, log, *dataDir, guestNet, hostCgroups)
	}
	s, err := server.New(ctx, server.Options{
		ProxyAddr: *proxyAddr, AdminAddr: *adminAddr, AdminHosts: splitList(*adminHosts), DataDir: *dataDir,
		SitesDir: *sitesDir, SiteRootsAllow: splitList(*siteRoots),
		TrustedProxies: prefixes, BaseDomain: *baseDomain, PublicIPs: splitList(*publicIPs),
		DrainTimeout: *drain, RolloutSurge: *surge, Log: log, StdHTTP: *stdHTTP, EgressAddr: *egressAddr, BodyReadTimeout: *bodyTimeout,
		UpstreamResponseTimeout: *respTimeout, AllowLinkLocalUpstreams: *allowLinkLocal, HostUpdates: *hostUpdates,
		AllowLocalRepos: allowLocal(stderr), WorkflowAllowHTTP: *wfHTTP,
		ArtifactMaxBytes: *artifactMax, ArtifactAllowPrivate: *artifactPrivate, ArtifactRoots: splitList(*artifactRoots),
		S3: workspace.S3Options{Endpoint: *s3Endpoint, Region: *s3Region, AccessKey: secrets["AWS_ACCESS_KEY_ID"],
			SecretKey: secrets["AWS_SECRET_ACCESS_KEY"], SessionToken: secrets["AWS_SESSION_TOKEN"]},
		WorkspaceArchiveBucket: *archiveBucket, Fleet: fleetOpts, StoreEtcd: storeEtcd,
		BuildAllowHTTP: *buildHTTP, BuildNetwork: *buildNetwork, BuildTimeout: *buildTimeout,
		RegistryCAFile: *registryCA, RegistryAllowInsecure: splitList(*registryInsecure), ImageBudget: *imageBudget << 20,
		GuardDryRun: !*guardEnforce, SIEM: siemConfig,
		TelemetryRetention: retention, TelemetryMaxBytes: *telMax, TelemetryAccessRows: *telRows,
		Tracing: traces,
		// Credentials come from the environment only, never a flag: a
		// flag's value is visible to every user in the process list.
		AdminUser: *adminUser, AdminPassword: secrets["BERTH_ADMIN_PASSWORD"],
		SecretKey: secrets["BERTH_SECRET_KEY"], TenantTokenMaxTTL: *tenantTTL,
		MaxReplicasCeiling: nonZero(*replicaCeiling), ConfinedDrivers: confined, NamespaceDrivers: nsDriverMap,
		NamespaceReplicaQuota: nonZero(*replicaQuota),
		ComputerCapacity:      computer.HostCapacity{MaxActive: *maxActive, ReservedHeadroom: *headroom},
		ComputerRecycleAfter:  *recycleAfter,
		DiskTTL:               never(*diskTTL), DiskOrphanTTL: never(*diskOrphanTTL), DiskSweep: *diskSweep,
		DiskArchiveOnExpire: *diskArchive,
		Drivers:             driverOptions(),
		GuestNetwork:        guestNet,
		ProxyTLSAddr:        *tlsAddr, Certs: certOpts, RedirectHTTPS: *httpsRedirect, HSTS: *hsts,
		AdminTLSCert: *adminTLSCert, AdminTLSKey: *adminTLSKey, AdminACMEHost: *adminACMEHost,
	})
	if err != nil {
		fmt.Fprintf(stderr, "berth serve: %v\n", err)
		return 1
	}
	if *withDemo {
		if err := startDemo(ctx, s, stderr); err != nil {
			fmt.Fprintf(stderr, "berth serve: demo: %v\n", err)
			return 1
		}
	}
	if err := s.Run(ctx); err != nil {
		fmt.Fprintf(stderr, "berth serve: %v\n", err)
		return 1
	}
	return 0
}

func startDemo(ctx context.Context, s *server.Server, stderr io.Writer) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	// The docs site's managed root, in the default namespace's subtree of
	// the sites directory.
	if _, err := demo.WriteSite(demo.SiteRoot(s.SitesDir())); err != nil {
		return err
	}
	for _, sp := range demo.Specs(self) {
		if err := s.Deploy(ctx, sp); err != nil {
			return err
		}
	}
	base := "http://" + reachable(s.ProxyAddr())
	fmt.Fprintf(stderr, `
berth is serving two demo deployments:
  hello  (vm, process driver, min_replicas 0)  curl -i %s/
         no replica runs yet: the first request starts one and is held until
         it is ready (see the X-Berth-Cold-Start header); after 60 s idle the
         pool scales back to zero.
  docs   (site under /site/)                    curl %s/site/
Admin API on http://%s  — try:  go run ./cmd/berth get deployments -o wide
Stop with Ctrl-C.

`, base, base, s.AdminAddr())
	return nil
}

// reachable turns a wildcard listen address into one a client can dial.
func reachable(addr string) string {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return addr
	}
	if ap.Addr().IsUnspecified() {
		return netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), ap.Port()).String()
	}
	return addr
}

// bothOrNeither refuses one half of a certificate pair.
func bothOrNeither(certFlag, cert, keyFlag, key string) error {
	switch {
	case cert != "" && key == "":
		return fmt.Errorf("%s needs %s (the certificate's private key)", certFlag, keyFlag)
	case cert == "" && key != "":
		return fmt.Errorf("%s needs %s (the certificate it is the key of)", keyFlag, certFlag)
	}
	return nil
}

// certOptions turns the HTTPS flags into the certificate manager's
// options; errors name the flag. The manager checks the rest (both halves
// of a pair, e-mail and directory syntax) when the server makes it.
func certOptions(email, directory, caRoot, dir, wildcards, dns, cert, key string, log *slog.Logger) (certs.Options, error) {
	o := certs.Options{Email: email, Directory: directory, Dir: dir, Wildcards: splitList(wildcards), StaticCert: cert, StaticKey: key}
	if caRoot != "" {
		pem, err := os.ReadFile(caRoot)
		if err != nil {
			return o, fmt.Errorf("--acme-ca-root: %w", err)
		}
		o.CARoots = x509.NewCertPool()
		if !o.CARoots.AppendCertsFromPEM(pem) {
			return o, fmt.Errorf("--acme-ca-root: %s holds no PEM certificate", caRoot)
		}
	}
	if dns != "" {
		p, err := certs.ParseDNS(dns)
		if err != nil {
			return o, fmt.Errorf("BERTH_ACME_DNS: %w", err)
		}
		o.DNS = p
	}
	if len(o.Wildcards) > 0 && o.DNS == nil {
		return o, errors.New("--acme-wildcard: wildcard certificates are ordered over DNS-01: set BERTH_ACME_DNS to the DNS provider that answers it")
	}
	if email == "" && dir != "" {
		log.Warn("ACME settings without --acme-email: ACME stays off")
	}
	return o, nil
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func parsePrefixes(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range splitList(s) {
		if p, err := netip.ParsePrefix(f); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(f)
		if err != nil {
			return nil, fmt.Errorf("%q is neither an address nor a CIDR", f)
		}
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

// parseRetention reads --telemetry-retention: whole days as "7d", or a
// Go duration of at least an hour.
func parseRetention(v string) (time.Duration, error) {
	if d, ok := strings.CutSuffix(v, "d"); ok {
		n, err := strconv.Atoi(d)
		if err != nil || n < 1 || n > 3650 {
			return 0, fmt.Errorf("%q: want whole days from 1d to 3650d, or a duration such as 36h", v)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < time.Hour {
		return 0, fmt.Errorf("%q: want whole days such as 7d, or a duration of at least 1h such as 36h", v)
	}
	return d, nil
}

func intEnv(name string, def int) int {
	if v := os.Getenv(name); v != "" {
		if n, err := strconv.Atoi(v); err == nil {
			return n
		}
	}
	return def
}

// nonZero maps a flag's 0 ("none") onto server.Options' "negative: none",
// since 0 there means the default.
func nonZero(n int) int {
	if n == 0 {
		return -1
	}
	return n
}

// parseNamespaceDrivers parses --namespace-drivers: "ns=d1,d2;ns2=d3".
func parseNamespaceDrivers(s string) (map[string][]string, error) {
	out := map[string][]string{}
	for _, part := range strings.Split(s, ";") {
		if part = strings.TrimSpace(part); part == "" {
			continue
		}
		ns, ds, ok := strings.Cut(part, "=")
		if ns = strings.TrimSpace(ns); !ok || ns == "" {
			return nil, fmt.Errorf("%q: want namespace=driver,driver", part)
		}
		out[ns] = splitList(ds)
		if out[ns] == nil {
			out[ns] = []string{}
		}
	}
	return out, nil
}

// never maps a flag's 0 ("never") onto server.Options' negative duration
// (zero there is the default).
func never(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

func floatEnv(name string, def float64) float64 {
	if v := os.Getenv(name); v != "" {
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			return f
		}
	}
	return def
}

// buildVersion is the main module's version, as the build recorded it.
func buildVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		return bi.Main.Version
	}
	return ""
}

func durEnv(name string, def time.Duration) time.Duration {
	if v := os.Getenv(name); v != "" {
		if d, err := time.ParseDuration(v); err == nil {
			return d
		}
	}
	return def
}

// parseStore reads --store: sqlite (or empty), the embedded store in the
// data directory, or etcd://host:port[,host:port…][/prefix], the store in
// an etcd cluster (its TLS the fleet's: --etcd-ca, --etcd-cert,
// --etcd-key or fleet.json).
func parseStore(v string) (server.EtcdStoreOptions, error) {
	switch {
	case v == "" || v == "sqlite":
		return server.EtcdStoreOptions{}, nil
	case strings.HasPrefix(v, "etcd://"):
		rest := strings.TrimPrefix(v, "etcd://")
		hosts, prefix, _ := strings.Cut(rest, "/")
		var o server.EtcdStoreOptions
		for _, h := range strings.Split(hosts, ",") {
			if _, port, err := net.SplitHostPort(h); err != nil || port == "" {
				return o, fmt.Errorf("%s: %q is not host:port: want etcd://host:port[,host:port…][/prefix]", v, h)
			}
			o.Endpoints = append(o.Endpoints, h)
		}
		if prefix != "" {
			o.Prefix = "/" + strings.Trim(prefix, "/") + "/"
		}
		return o, nil
	}
	return server.EtcdStoreOptions{}, fmt.Errorf("%q: unknown store backend: sqlite or etcd://host:port[,…][/prefix]", v)
}
