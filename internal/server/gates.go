package server

import (
	"context"
	"net/http"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/auth"
	"github.com/berth-dev/berth/internal/gate"
	"github.com/berth-dev/berth/internal/namespaces"
	"github.com/berth-dev/berth/internal/netguard"
	"github.com/berth-dev/berth/internal/oidc"
	"github.com/berth-dev/berth/internal/proxy"
	"github.com/berth-dev/berth/internal/secrets"
	"github.com/berth-dev/berth/internal/sessions"
)

// openGates opens the sign-in sessions and the gate manager that compiles
// deployments' auth gates. The provider snapshot is reloaded after every
// auth provider write.
func (s *Server) openGates(ctx context.Context, st Store, tokens *auth.Tokens, sec *secrets.Store, key secrets.Key, ns *namespaces.Store) error {
	var gates *gate.Manager
	sess, err := sessions.New(ctx, st, sessions.Options{
		Log: s.o.Log,
		OnEnd: func(x sessions.Session) {
			if gates != nil {
				gates.EndSession(x)
			}
		},
	})
	if err != nil {
		return err
	}
	gates = gate.NewManager(gate.Options{
		Tokens: tokens, Sessions: sess, Secrets: sec, Providers: ns, Key: key,
		OIDC: oidc.NewRegistry(s.issuerClient()), JWTClient: s.issuerClient(),
		GoogleIssuer: s.o.GoogleIssuer, Log: s.o.Log,
		Event: s.gateEvent,
	})
	ns.OnProvidersChanged(func() {
		if err := gates.ReloadProviders(context.Background()); err != nil {
			s.o.Log.Error("could not reload the auth providers; gates inheriting one keep the previous", "err", err)
		}
	})
	if err := gates.ReloadProviders(ctx); err != nil {
		sess.Close()
		return err
	}
	s.sessions, s.gates = sess, gates
	return nil
}

// compileGate is the registry's Gate.
func (s *Server) compileGate(spec *apitype.DeploymentSpec) (proxy.Gate, error) {
	g, err := s.gates.Compile(spec)
	if err != nil {
		return nil, err
	}
	return g, nil
}

// forgetDeployment is the registry's Forget: a deleted deployment's
// metrics go, its running job is cancelled, and its sessions end (with
// their tokens), so a deployment created later under the same id signs
// nobody in from before.
func (s *Server) forgetDeployment(id string) {
	s.jobs.Cancel(id) // its job must not outlive it
	s.metrics.Delete(id)
	s.limits.Forget(id)
	s.workspaces.forget(id)
	if _, err := s.sessions.Invalidate(context.Background(), id, ""); err != nil {
		s.o.Log.Warn("could not end a deleted deployment's sessions", "deployment", id, "err", err)
	}
}

// issuerClient is the client the gates reach identity providers with
// (OpenID discovery, token exchanges, JWKS): a tenant names those URLs, so
// like an upstream they may not be berth's own listeners (the admin API
// would answer berth itself) nor, unless the operator allows it,
// link-local and metadata addresses. Timeouts on every step; no
// redirects followed (the callers follow the few they allow themselves).
func (s *Server) issuerClient() *http.Client {
	return netguard.Client(s.self, s.o.AllowLinkLocalUpstreams, "identity provider", 10*time.Second)
}
