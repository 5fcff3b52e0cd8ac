package spec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/berth-dev/berth/apitype"
)

// Scaling defaults (app-lb.md §2.5).
const (
	DefaultMinReplicas          = 0
	DefaultMaxReplicas          = 5
	DefaultWarmPool             = 0
	DefaultTargetConcurrency    = 10
	DefaultScaleToZeroAfterSecs = 300
	DefaultColdStartTimeoutSecs = 120
	DefaultDrainTimeoutSecs     = 30
	DefaultIdleAction           = apitype.IdleDestroy
	DefaultBootTimeoutSecs      = 300
)

// Policy is a scaling policy with every default applied, so the autoscaler
// never has to ask whether a field was set.
type Policy struct {
	MinReplicas          int
	MaxReplicas          int
	WarmPool             int
	TargetConcurrency    int
	ScaleToZeroAfterSecs int
	ColdStartTimeoutSecs int
	DrainTimeoutSecs     int
	IdleAction           apitype.IdleAction
	BootTimeoutSecs      int // 0 waits forever
}

// Scaling returns the effective policy of p; nil means all defaults.
func Scaling(p *apitype.ScalingPolicy) Policy {
	q := Policy{
		MinReplicas:          DefaultMinReplicas,
		MaxReplicas:          DefaultMaxReplicas,
		WarmPool:             DefaultWarmPool,
		TargetConcurrency:    DefaultTargetConcurrency,
		ScaleToZeroAfterSecs: DefaultScaleToZeroAfterSecs,
		ColdStartTimeoutSecs: DefaultColdStartTimeoutSecs,
		DrainTimeoutSecs:     DefaultDrainTimeoutSecs,
		IdleAction:           DefaultIdleAction,
		BootTimeoutSecs:      DefaultBootTimeoutSecs,
	}
	if p == nil {
		return q
	}
	set := func(dst *int, src *int) {
		if src != nil {
			*dst = *src
		}
	}
	set(&q.MinReplicas, p.MinReplicas)
	set(&q.MaxReplicas, p.MaxReplicas)
	set(&q.WarmPool, p.WarmPool)
	set(&q.TargetConcurrency, p.TargetConcurrency)
	set(&q.ScaleToZeroAfterSecs, p.ScaleToZeroAfterSecs)
	set(&q.ColdStartTimeoutSecs, p.ColdStartTimeoutSecs)
	set(&q.DrainTimeoutSecs, p.DrainTimeoutSecs)
	set(&q.BootTimeoutSecs, p.BootTimeoutSecs)
	if p.IdleAction != "" {
		q.IdleAction = p.IdleAction
	}
	return q
}

// fillScaling returns p with every absent field set to its default, so the
// stored spec shows the policy in force. p itself is modified when non-nil.
func fillScaling(p *apitype.ScalingPolicy) *apitype.ScalingPolicy {
	if p == nil {
		p = &apitype.ScalingPolicy{}
	}
	q := Scaling(p)
	fill := func(dst **int, v int) {
		if *dst == nil {
			*dst = ptr(v)
		}
	}
	fill(&p.MinReplicas, q.MinReplicas)
	fill(&p.MaxReplicas, q.MaxReplicas)
	fill(&p.WarmPool, q.WarmPool)
	fill(&p.TargetConcurrency, q.TargetConcurrency)
	fill(&p.ScaleToZeroAfterSecs, q.ScaleToZeroAfterSecs)
	fill(&p.ColdStartTimeoutSecs, q.ColdStartTimeoutSecs)
	fill(&p.DrainTimeoutSecs, q.DrainTimeoutSecs)
	fill(&p.BootTimeoutSecs, q.BootTimeoutSecs)
	if p.IdleAction == "" {
		p.IdleAction = q.IdleAction
	}
	return p
}

// validateScaling checks a policy on its own; field names are prefixed with
// "scaling.". Cross-field checks use the effective values, so a min above
// the default max is caught even when max is absent.
func validateScaling(p *apitype.ScalingPolicy) *FieldError {
	if p == nil {
		return nil
	}
	for _, f := range []struct {
		name string
		v    *int
	}{
		{"min_replicas", p.MinReplicas},
		{"max_replicas", p.MaxReplicas},
		{"warm_pool", p.WarmPool},
		{"target_concurrency", p.TargetConcurrency},
		{"scale_to_zero_after_secs", p.ScaleToZeroAfterSecs},
		{"cold_start_timeout_secs", p.ColdStartTimeoutSecs},
		{"drain_timeout_secs", p.DrainTimeoutSecs},
		{"boot_timeout_secs", p.BootTimeoutSecs},
	} {
		if f.v != nil && *f.v < 0 {
			return &FieldError{"scaling." + f.name, fmt.Sprintf("must not be negative (got %d)", *f.v)}
		}
	}
	q := Scaling(p)
	if q.TargetConcurrency <= 0 {
		return &FieldError{"scaling.target_concurrency", "must be greater than 0"}
	}
	switch p.IdleAction {
	case "", apitype.IdleDestroy, apitype.IdleRetain:
	default:
		return &FieldError{"scaling.idle_action", fmt.Sprintf("%q is not one of destroy, retain", p.IdleAction)}
	}
	if q.MinReplicas > q.MaxReplicas {
		return &FieldError{"scaling.min_replicas", fmt.Sprintf("min_replicas (%d) exceeds max_replicas (%d)", q.MinReplicas, q.MaxReplicas)}
	}
	if q.WarmPool > q.MaxReplicas {
		return &FieldError{"scaling.warm_pool", fmt.Sprintf("warm_pool (%d) exceeds max_replicas (%d)", q.WarmPool, q.MaxReplicas)}
	}
	return nil
}

// scalingKeys are the JSON names PatchScaling accepts, in struct order.
var scalingKeys = []string{
	"min_replicas", "max_replicas", "warm_pool", "target_concurrency",
	"scale_to_zero_after_secs", "cold_start_timeout_secs", "drain_timeout_secs",
	"idle_action", "boot_timeout_secs",
}

// PatchScaling merges a JSON object into cur, as PATCH
// /deployments/:id/scaling does: keys present replace, a null resets the
// field to its default, keys absent are kept. cur is not modified.
//
// The merged policy is validated on its own ("invalid scaling policy: ...");
// rules that involve the rest of the spec (a workspace needs max_replicas
// 1) are the caller's to check by validating the whole spec again.
func PatchScaling(cur *apitype.ScalingPolicy, patch []byte) (*apitype.ScalingPolicy, error) {
	body := bytes.TrimSpace(patch)
	if len(body) == 0 || body[0] != '{' {
		return nil, errors.New("scaling patch must be a JSON object")
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, fmt.Errorf("scaling patch must be a JSON object: %w", err)
	}
	var unknown []string
	for k := range m {
		if !slices.Contains(scalingKeys, k) {
			unknown = append(unknown, fmt.Sprintf("%q", k))
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return nil, &FieldError{"scaling", fmt.Sprintf("unknown field(s) %s (known: %s)",
			strings.Join(unknown, ", "), strings.Join(scalingKeys, ", "))}
	}
	var out apitype.ScalingPolicy
	if cur != nil {
		out = *cur // only pointers are replaced below, never written through
	}
	ints := map[string]**int{
		"min_replicas":             &out.MinReplicas,
		"max_replicas":             &out.MaxReplicas,
		"warm_pool":                &out.WarmPool,
		"target_concurrency":       &out.TargetConcurrency,
		"scale_to_zero_after_secs": &out.ScaleToZeroAfterSecs,
		"cold_start_timeout_secs":  &out.ColdStartTimeoutSecs,
		"drain_timeout_secs":       &out.DrainTimeoutSecs,
		"boot_timeout_secs":        &out.BootTimeoutSecs,
	}
	for _, k := range scalingKeys {
		raw, ok := m[k]
		if !ok {
			continue
		}
		null := bytes.Equal(bytes.TrimSpace(raw), []byte("null"))
		if k == "idle_action" {
			if null {
				out.IdleAction = ""
				continue
			}
			var v string
			if err := json.Unmarshal(raw, &v); err != nil {
				return nil, &FieldError{"scaling." + k, "must be a string (destroy or retain)"}
			}
			out.IdleAction = apitype.IdleAction(v)
			continue
		}
		dst := ints[k]
		if null {
			*dst = nil
			continue
		}
		var v int
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, &FieldError{"scaling." + k, "must be an integer"}
		}
		*dst = &v
	}
	if err := validateScaling(&out); err != nil {
		return nil, fmt.Errorf("invalid scaling policy: %w", err)
	}
	return &out, nil
}

// Health check defaults (app-lb.md §2.5, §3.5).
const (
	DefaultHealthPath        = "/"
	DefaultHealthTimeoutSecs = 2
	// maxHealthTimeoutSecs keeps a huge timeout_secs from overflowing a
	// time.Duration; a day is already far past any useful probe.
	maxHealthTimeoutSecs = 24 * 60 * 60
)

// Check is the effective health check of a deployment.
type Check struct {
	// Path is the request path of the HTTP probe; "" means a bare TCP
	// connect (health.path: null).
	Path string
	// Port is health.port, else vm.port, else 0 (probe the backend's own
	// port, as for static upstreams).
	Port int
	// Timeout is max(timeout_secs, 1) seconds, timeout_secs defaulting to 2.
	Timeout time.Duration
	// Expect is the header a rollout probe requires, if any.
	Expect *apitype.ExpectedHeader
}

// Health returns the effective health check of s.
func Health(s *apitype.DeploymentSpec) Check {
	c := Check{Path: DefaultHealthPath}
	secs := DefaultHealthTimeoutSecs
	if s.VM != nil {
		c.Port = s.VM.Port
	}
	if h := s.Health; h != nil {
		switch {
		case h.Path.IsNull():
			c.Path = ""
		case h.Path.Value != nil && *h.Path.Value != "":
			c.Path = *h.Path.Value
		}
		if h.Port != nil {
			c.Port = *h.Port
		}
		if h.TimeoutSecs != nil {
			secs = *h.TimeoutSecs
		}
		c.Expect = h.ExpectedHeader
	}
	secs = min(max(secs, 1), maxHealthTimeoutSecs)
	c.Timeout = time.Duration(secs) * time.Second
	return c
}
