package server

import (
	"context"
	"net/netip"
	"strings"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/auth"
	"github.com/berth-dev/berth/internal/gate"
	"github.com/berth-dev/berth/internal/guard"
	"github.com/berth-dev/berth/internal/proxy"
	"github.com/berth-dev/berth/internal/siem"
)

// openSecurity opens the guard rules and the SIEM, and installs them in
// the proxy's options: the guard is asked about every data-plane request
// once its route is known, and the SIEM is handed every finished one.
func (s *Server) openSecurity(ctx context.Context, st Store, popts *proxy.Options) error {
	g, err := guard.New(ctx, guard.Options{Store: st, Enforce: !s.o.GuardDryRun, Log: s.o.Log})
	if err != nil {
		return err
	}
	e, err := siem.New(siem.Options{
		Config: s.o.SIEM, Store: st, Log: s.o.Log,
		GatePath: s.gatePath,
		OnAlert:  s.onAlert,
	})
	if err != nil {
		g.Close()
		return err
	}
	s.guard, s.siem = g, e
	s.wouldBlockLog.Interval = 200 * time.Millisecond // at most 5 lines a second
	popts.Guard = s.guardCheck
	return nil
}

// guardCheck is the proxy's Guard.
func (s *Server) guardCheck(client netip.Addr, host, dep, method, path, ua string) proxy.GuardVerdict {
	switch s.guard.Check(client, host, dep, method, path, ua) {
	case guard.Exempt:
		return proxy.GuardExempt
	case guard.Block:
		return proxy.GuardBlock
	case guard.WouldBlock:
		// --guard-enforce=false: served, and logged — a few a second at
		// most, so a flood does not become a flood of log lines (the
		// rules' hit counts say how many).
		s.wouldBlockLog.Do(func() {
			s.o.Log.Info("guard would block (not enforcing)", "client", client.String(), "host", strings.Clone(host),
				"deployment", strings.Clone(dep), "method", strings.Clone(method), "path", strings.Clone(path))
		})
		return proxy.GuardWouldBlock
	}
	return proxy.GuardPass
}

// observe is the proxy's Observe: every finished request, to the
// telemetry store and the SIEM. A request a guard rule refused is not
// the SIEM's: the rule already answers its source (the guard counts it),
// and berth's own 403s must not raise alerts of their own — alerts about
// traffic that is already refused are noise.
func (s *Server) observe(c *proxy.Completion) {
	s.recordAccess(c)
	if c.Blocked || !s.siem.Enabled() {
		return
	}
	s.siem.ObserveRequest(&siem.Request{
		Time: c.Time, Client: c.Client, Method: c.Method, Host: c.Host, Path: c.Path, RawQuery: c.RawQuery,
		UserAgent: c.UserAgent, Status: c.Status, Duration: c.Duration, Bytes: c.Bytes,
		Deployment: c.Deployment, Namespace: c.Namespace, Unrouted: c.Unrouted,
		Credentialed: c.Credentialed, Exempted: c.Exempted, Scheme: c.Scheme,
	})
}

// gatePath is the SIEM's GatePath: a deployment's own sign-in base path.
func (s *Server) gatePath(dep string) string {
	if s.registry == nil {
		return ""
	}
	if e, ok := s.registry.Get(dep); ok && e.Spec.Auth != nil {
		return e.Spec.Auth.BasePath
	}
	return ""
}

// gateEvent hands a sign-in gate's refusal to the SIEM (and the log).
func (s *Server) gateEvent(e gate.Event) {
	s.o.Log.Warn("sign-in gate", "event", e.Kind, "deployment", e.Deployment, "namespace", e.Namespace,
		"host", e.Host, "source", e.Source.String(), "reason", e.Reason)
	s.eventLine("gate", "warn", e.Namespace, e.Deployment, e.Host, e.Kind+": "+e.Reason)
	if s.siem == nil {
		return
	}
	action := e.Kind
	switch e.Kind {
	case "signin-denied":
		action = siem.ActionSigninRefused // the identity provider vouched; the gate's policy refused
	case "signin-failed":
		// An identity provider's own error answer is no attempt of the
		// caller's (app-lb's signin-exchange); a token that does not
		// verify is.
		action = siem.ActionSigninToken
		if strings.HasPrefix(e.Reason, "the identity provider answered") {
			action = siem.ActionSigninExchange
		}
	}
	s.siem.ObserveAuth(siem.Auth{
		Time: time.Now(), Client: e.Source, Action: action, Deployment: e.Deployment, Namespace: e.Namespace,
		Host: e.Host, Subject: e.Subject, Reason: e.Reason, Scheme: "none",
	})
}

// adminEvent hands a refused admin request to the SIEM.
func (s *Server) adminEvent(e auth.Event) {
	if s.siem == nil {
		return
	}
	s.siem.ObserveAuth(siem.Auth{
		Time: time.Now(), Client: e.Source, Action: e.Action, Path: e.Path, Scheme: e.Scheme, Reason: e.Reason,
	})
}

// onAlert is the SIEM's OnAlert: each new alert (siem logs it).
func (s *Server) onAlert(a apitype.SecurityAlert) {
	level := "warn"
	if a.Severity == apitype.SeverityHigh || a.Severity == apitype.SeverityCritical {
		level = "error"
	}
	s.eventLine("security", level, "", a.Deployment, "", string(a.Severity)+" "+a.Rule+": "+a.Title)
	if s.webhooks != nil {
		s.webhooks.Alert(a)
	}
}

// alertNotifier delivers new alerts (package notify's webhooks).
type alertNotifier interface {
	Alert(apitype.SecurityAlert)
}

// limiter is the registry's Limit: a deployment's per-client limiter, or
// nil (a literal nil: a nil *ratelimit.Limiter in the interface would not
// test as nil).
func (s *Server) limiter(id string) proxy.Limiter {
	if l := s.limits.Limiter(id); l != nil {
		return l
	}
	return nil
}
