package server

import (
	"context"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/auth"
	"github.com/berth-dev/berth/internal/gate"
	"github.com/berth-dev/berth/internal/namespaces"
	"github.com/berth-dev/berth/internal/proxy"
	"github.com/berth-dev/berth/internal/secrets"
	"github.com/berth-dev/berth/internal/sessions"
	"github.com/berth-dev/berth/internal/store"
)

// openGates opens the sign-in sessions and the gate manager that compiles
// deployments' auth gates. The provider snapshot is reloaded after every
// auth provider write.
func (s *Server) openGates(ctx context.Context, st *store.Store, tokens *auth.Tokens, sec *secrets.Store, key secrets.Key, ns *namespaces.Store) error {
	var gates *gate.Manager
	sess, err := sessions.New(ctx, st, sessions.Options{
		Log: s.o.Log,
		OnEnd: func(x sessions.Session) {
			if gates != nil {
				gates.EndSession(toGate(x))
			}
		},
	})
	if err != nil {
		return err
	}
	gates = gate.NewManager(gate.Options{
		Tokens: tokens, Sessions: sessionSet{sess}, Secrets: sec, Providers: ns, Key: key,
		GoogleIssuer: s.o.GoogleIssuer, Log: s.o.Log,
		Event: func(e gate.Event) {
			s.o.Log.Warn("sign-in gate", "event", e.Kind, "deployment", e.Deployment, "namespace", e.Namespace,
				"host", e.Host, "source", e.Source.String(), "reason", e.Reason)
		},
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

// sessionSet adapts the sessions to the gate's view of them.
type sessionSet struct{ m *sessions.Manager }

func toGate(x sessions.Session) gate.Session {
	return gate.Session{ID: x.ID, Deployment: x.Deployment, Namespace: x.Namespace, Fingerprint: x.Fingerprint,
		Issuer: x.Issuer, Subject: x.Subject, Email: x.Email, Name: x.Name, TokenID: x.TokenID, ExpiresAt: x.ExpiresAt}
}

func (a sessionSet) Create(ctx context.Context, x gate.Session, ttl time.Duration) (string, gate.Session, error) {
	secret, got, err := a.m.Create(ctx, sessions.Session{Deployment: x.Deployment, Namespace: x.Namespace,
		Fingerprint: x.Fingerprint, Issuer: x.Issuer, Subject: x.Subject, Email: x.Email, Name: x.Name}, ttl)
	return secret, toGate(got), err
}

func (a sessionSet) Lookup(secret, dep, fp string) (gate.Session, bool) {
	x, ok := a.m.Lookup(secret, dep, fp)
	return toGate(x), ok
}

func (a sessionSet) Revoke(ctx context.Context, id string) error { return a.m.Revoke(ctx, id) }

func (a sessionSet) RevokeSubject(ctx context.Context, dep, sub string) (int, error) {
	return a.m.RevokeSubject(ctx, dep, sub)
}

func (a sessionSet) SetTokenID(ctx context.Context, id, tok string) error {
	return a.m.SetTokenID(ctx, id, tok)
}

// forgetDeployment is the registry's Forget: a deleted deployment's
// metrics go, and its sessions end (with their tokens), so a deployment
// created later under the same id signs nobody in from before.
func (s *Server) forgetDeployment(id string) {
	s.metrics.Delete(id)
	if _, err := s.sessions.Invalidate(context.Background(), id, ""); err != nil {
		s.o.Log.Warn("could not end a deleted deployment's sessions", "deployment", id, "err", err)
	}
}
