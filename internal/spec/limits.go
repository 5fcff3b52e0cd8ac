package spec

import (
	"strings"

	"github.com/berth-dev/berth/apitype"
)

// DefaultMaxReplicasCeiling is the operator's default ceiling on
// scaling.max_replicas (berth serve --max-replicas-ceiling).
const DefaultMaxReplicasCeiling = 100

// replicaCeiling refuses a max_replicas above Options.MaxReplicasCeiling.
// min_replicas and warm_pool never exceed max_replicas (validateScaling),
// and the autoscaler clamps to it, so the ceiling bounds them too.
func (v validator) replicaCeiling() *FieldError {
	c := v.o.MaxReplicasCeiling
	if c <= 0 || v.s.VM == nil {
		return nil
	}
	if n := Scaling(v.s.Scaling).MaxReplicas; n > c {
		return fieldErr("scaling.max_replicas", "%d exceeds this server's ceiling of %d replicas", n, c)
	}
	return nil
}

// notSupported is the answer to a spec section berth would validate and
// store but not act on: accepting it would leave its owner believing berth
// does what the section asks. field names the section, why what berth
// would fail to do.
func notSupported(field, why string) *FieldError {
	return fieldErr(field, "not supported yet: %s; remove %s", why, field)
}

// unsupported refuses the sections berth checks field by field (so a later
// issue can implement one by deleting its line here) but does not act on:
// a stored credential for host updates. It runs after the field checks,
// so a malformed section is still named precisely. Discovery is served
// in a fleet only (Options.Discovery), and takes every upstream from its
// service.
func (v validator) unsupported() *FieldError {
	s := v.s
	if s.Discovery != nil {
		if !v.o.Discovery {
			return fieldErr("discovery", "discovery needs a fleet: start berth with --etcd (its service's members are published there); or list the upstreams in upstreams")
		}
		if len(s.Upstreams) > 0 {
			return fieldErr("discovery", "takes the deployment's upstreams from service %q; remove upstreams", s.Discovery.ServiceID)
		}
	}
	for _, u := range []struct {
		set         bool
		field, what string
	}{
		{s.Update != nil && s.Update.Auth != nil, "update.auth", "a host update uses no stored credential of its own; pass one to its commands with update.env_from"},
	} {
		if u.set {
			return notSupported(u.field, u.what)
		}
	}
	return nil
}

// loaderVars are the environment variables glibc drops for setuid programs
// (its secure mode, sysdeps/generic/unsecvars.h), besides every LD_*: each
// makes the dynamic loader or libc load or read files the variable names.
// TMPDIR, also on glibc's list, is left out: it only moves temporary files
// within the sandbox.
var loaderVars = []string{
	"GCONV_PATH", "GETCONF_DIR", "GLIBC_TUNABLES", "HOSTALIASES",
	"LOCALDOMAIN", "LOCPATH", "MALLOC_TRACE", "NIS_PATH", "NLSPATH",
	"RESOLV_HOST_CONF", "RES_OPTIONS", "TZDIR",
}

// LoaderVar reports whether an environment variable steers the dynamic
// loader or libc into loading code or data it names (LD_PRELOAD and the
// rest of glibc's secure-mode list): a confined caller may not set one,
// since the sandbox's agent starts with the replica's environment.
func LoaderVar(name string) bool {
	for _, v := range loaderVars {
		if name == v {
			return true
		}
	}
	return strings.HasPrefix(name, "LD_")
}

// LoaderEnv returns the first variable of a vm spec's env_vars that
// LoaderVar refuses, as its field path (vm.env_vars.<NAME>), or "".
func LoaderEnv(s *apitype.DeploymentSpec) string {
	if s.VM == nil {
		return ""
	}
	for k := range sortedMap(s.VM.EnvVars) {
		if LoaderVar(k) {
			return "vm.env_vars." + k
		}
	}
	return ""
}
