package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/auth"
	"github.com/berth-dev/berth/internal/fleet/etcdtest"
)

func mintOn(t *testing.T, h *harness, body string) apitype.MintedToken {
	t.Helper()
	r := h.json("POST", "/tokens", body)
	if r.code != 201 {
		t.Fatalf("mint %s: %d %s", body, r.code, r.body)
	}
	var m apitype.MintedToken
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func authz(tok string) []string { return []string{"Authorization", "Bearer " + tok} }

func tokensOf(t *testing.T, h *harness) map[string]apitype.TokenSummary {
	t.Helper()
	r := h.do("GET", "/tokens", "", "")
	if r.code != 200 {
		t.Fatalf("GET /tokens: %d %s", r.code, r.body)
	}
	var list []apitype.TokenSummary
	if err := json.Unmarshal(r.body, &list); err != nil {
		t.Fatal(err)
	}
	out := map[string]apitype.TokenSummary{}
	for _, s := range list {
		out[s.ID] = s
	}
	return out
}

// TestFleetTokens: a token minted with fleet: true on one berth of an
// etcd fleet works on the other with the same grants and confinement,
// shows there as mirrored from its host, is revoked everywhere by a
// revocation on any host, and outlives the host that minted it; etcd and
// the stores hold its hash only, which GET /fleet/tokens exports; a
// confined credential can neither mint a fleet token nor read the
// export.
func TestFleetTokens(t *testing.T) {
	c := etcdtest.Start(t, 1)
	fleet := func(id string) func(*Options) {
		return func(o *Options) {
			o.Fleet = FleetOptions{Endpoints: c.Endpoints(), HostID: id, LeaseTTL: 2 * time.Second}
		}
	}
	a := startWith(t, "", fleet("alpha"))
	b := startWith(t, "", fleet("beta"))

	wide := mintOn(t, a, `{"name":"fleet-admin","admin":"admin","deployments":["*"],"fleet":true}`)
	teamA := mintOn(t, a, `{"name":"team-a","admin":"admin","namespace":"team-a","deployments":[],"expires_in_secs":3600,"fleet":true}`)
	local := mintOn(t, a, `{"name":"local","admin":"admin","deployments":["*"]}`)
	if wide.Fleet == nil || !*wide.Fleet || wide.MirroredFrom != "" || local.Fleet != nil {
		t.Fatalf("minted: fleet %+v, local %+v", wide.TokenSummary, local.TokenSummary)
	}
	// The minting host accepts it at once (the mint waits for its mirror).
	if r := a.do("GET", "/fleet/hosts", "", "", authz(wide.Token)...); r.code != 200 {
		t.Fatalf("the fleet token on its own host: %d %s", r.code, r.body)
	}

	waitForCond(t, "beta to mirror the fleet tokens", func() bool {
		ts := tokensOf(t, b)
		return ts[wide.ID].ID != "" && ts[teamA.ID].ID != ""
	})
	onB := tokensOf(t, b)
	if s := onB[wide.ID]; s.MirroredFrom != "alpha" || s.Fleet == nil || !*s.Fleet || s.Admin != apitype.ScopeAdmin || !slices.Equal(s.Deployments, []string{"*"}) {
		t.Fatalf("the fleet token on beta: %+v", s)
	}
	if s := onB[teamA.ID]; s.MirroredFrom != "alpha" || s.Namespace != "team-a" || s.ExpiresAt == nil || *s.ExpiresAt != *teamA.ExpiresAt {
		t.Fatalf("the confined fleet token on beta: %+v", s)
	}
	if _, ok := onB[local.ID]; ok {
		t.Fatal("beta lists alpha's local token")
	}
	if s := tokensOf(t, a)[wide.ID]; s.MirroredFrom != "" || s.Fleet == nil {
		t.Fatalf("the fleet token on alpha: %+v", s)
	}

	// On beta: the wide token is fleet-wide, the local one unknown.
	if r := b.do("GET", "/fleet/hosts", "", "", authz(wide.Token)...); r.code != 200 {
		t.Fatalf("the fleet token on beta: %d %s", r.code, r.body)
	}
	if r := b.do("GET", "/whoami", "", "", authz(local.Token)...); r.code != 401 {
		t.Fatalf("alpha's local token on beta: %d %s", r.code, r.body)
	}
	// A wrong secret with a fleet token's id is refused.
	forged := wide.Token[:len(wide.Token)-4] + "AAAA"
	if forged != wide.Token {
		if r := b.do("GET", "/whoami", "", "", authz(forged)...); r.code != 401 {
			t.Fatalf("a forged secret on beta: %d %s", r.code, r.body)
		}
	}

	// The confined token, on beta: its namespace and nothing else.
	if r := b.json("POST", "/deployments", staticSpec("b1", "team-b")); r.code != 201 {
		t.Fatalf("operator's deployment in team-b: %d %s", r.code, r.body)
	}
	na := authz(teamA.Token)
	if r := b.json("POST", "/deployments", staticSpec("a1", "team-a")); r.code != 201 {
		t.Fatalf("operator's deployment in team-a: %d %s", r.code, r.body)
	}
	if r := b.do("GET", "/deployments/a1", "", "", na...); r.code != 200 {
		t.Fatalf("the confined fleet token on its namespace's deployment: %d %s", r.code, r.body)
	}
	if r := b.json("POST", "/secrets", `{"id":"s0","namespace":"team-a","data":{"k":"v"}}`, na...); r.code != 201 {
		t.Fatalf("the confined fleet token's secret in its namespace: %d %s", r.code, r.body)
	}
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/deployments/b1", ""},
		{"DELETE", "/deployments/b1", ""},
		{"POST", "/deployments", staticSpec("a2", "team-b")},
		{"POST", "/secrets", `{"id":"s","namespace":"team-b","data":{"k":"v"}}`},
		{"GET", "/fleet/hosts", ""},
		{"GET", "/fleet/tokens", ""},
		{"POST", "/tokens", `{"name":"x","admin":"admin","namespace":"team-a","deployments":[],"fleet":true}`},
	} {
		if r := b.json(c.method, c.path, c.body, na...); r.code != 403 {
			t.Fatalf("%s %s with the confined fleet token on beta: %d %s", c.method, c.path, r.code, r.body)
		}
	}
	var ds []apitype.DeploymentStatus
	if r := b.do("GET", "/deployments", "", "", na...); r.code != 200 || json.Unmarshal(r.body, &ds) != nil || len(ds) != 1 || ds[0].Spec.ID != "a1" {
		t.Fatalf("deployments the confined fleet token sees on beta: %d %s", r.code, r.body)
	}
	// Nor may a local namespace token mint a fleet token, on either host.
	nsLocal := mintOn(t, b, `{"name":"ns","admin":"admin","namespace":"team-a","deployments":[]}`)
	if r := b.json("POST", "/tokens", `{"name":"x","admin":"admin","namespace":"team-a","deployments":[],"fleet":true}`, authz(nsLocal.Token)...); r.code != 403 {
		t.Fatalf("a namespace token minting a fleet token: %d %s", r.code, r.body)
	}

	// The export: hashes, never secrets.
	r := b.do("GET", "/fleet/tokens", "", "")
	var exp apitype.FleetTokens
	if r.code != 200 || json.Unmarshal(r.body, &exp) != nil {
		t.Fatalf("GET /fleet/tokens: %d %s", r.code, r.body)
	}
	if len(exp.Tokens) != 2 {
		t.Fatalf("GET /fleet/tokens: %s", r.body)
	}
	for _, m := range []apitype.MintedToken{wide, teamA} {
		_, secret, err := auth.ParseToken(m.Token)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256([]byte(secret))
		i := slices.IndexFunc(exp.Tokens, func(e apitype.FleetToken) bool { return e.ID == m.ID })
		if i < 0 || exp.Tokens[i].SecretSHA256 != hex.EncodeToString(sum[:]) || exp.Tokens[i].Name != m.Name || exp.Tokens[i].Host != "alpha" {
			t.Fatalf("export of %s: %s", m.ID, r.body)
		}
		if bytes.Contains(r.body, []byte(secret)) {
			t.Fatal("GET /fleet/tokens holds a secret")
		}
	}
	var raw map[string][]map[string]any
	json.Unmarshal(r.body, &raw)
	for k := range raw["tokens"][0] {
		if !slices.Contains([]string{"id", "name", "admin", "namespace", "deployments", "created_at", "expires_at", "secret_sha256", "host"}, k) {
			t.Fatalf("GET /fleet/tokens has key %q", k)
		}
	}

	// No secret in etcd's keyspace, nor in either berth's data dir.
	cli := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	all, err := cli.Get(ctx, "\x00", clientv3.WithFromKey())
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	tokenKeys := 0
	for _, kv := range all.Kvs {
		if strings.Contains(string(kv.Key), "/tokens/") {
			tokenKeys++
		}
		for _, m := range []apitype.MintedToken{wide, teamA} {
			_, secret, _ := auth.ParseToken(m.Token)
			if bytes.Contains(kv.Key, []byte(secret)) || bytes.Contains(kv.Value, []byte(secret)) {
				t.Fatalf("etcd key %s holds the secret of %s", kv.Key, m.ID)
			}
		}
	}
	if tokenKeys != 2 {
		t.Fatalf("%d fleet token keys in etcd, want 2", tokenKeys)
	}
	for _, h := range []*harness{a, b} {
		filepath.WalkDir(h.dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return nil
			}
			body, err := os.ReadFile(path)
			if err != nil {
				return nil
			}
			for _, m := range []apitype.MintedToken{wide, teamA} {
				_, secret, _ := auth.ParseToken(m.Token)
				if bytes.Contains(body, []byte(secret)) {
					t.Fatalf("%s holds the secret of %s", path, m.ID)
				}
			}
			return nil
		})
	}

	// Changed only where it was minted; revoked from anywhere.
	if r := b.json("PATCH", "/tokens/"+wide.ID, `{"name":"renamed"}`); r.code != 409 || !strings.Contains(errMsg(t, r), "alpha") {
		t.Fatalf("PATCH of a mirrored token: %d %s", r.code, r.body)
	}
	if r := a.json("PATCH", "/tokens/"+teamA.ID, `{"name":"team-a-ci"}`); r.code != 200 {
		t.Fatalf("PATCH on the minting host: %d %s", r.code, r.body)
	}
	waitForCond(t, "beta to see the rename", func() bool { return tokensOf(t, b)[teamA.ID].Name == "team-a-ci" })
	if r := b.do("DELETE", "/tokens/"+wide.ID, "", ""); r.code != 204 {
		t.Fatalf("revoke on beta: %d %s", r.code, r.body)
	}
	if r := b.do("GET", "/whoami", "", "", authz(wide.Token)...); r.code != 401 {
		t.Fatalf("the revoked token on beta: %d %s", r.code, r.body)
	}
	waitForCond(t, "alpha to drop the revoked token", func() bool {
		return a.do("GET", "/whoami", "", "", authz(wide.Token)...).code == 401
	})
	if _, ok := tokensOf(t, a)[wide.ID]; ok {
		t.Fatal("alpha still lists the revoked token")
	}

	// alpha goes down: its confined fleet token still works on beta, still
	// confined.
	a.stop()
	if r := b.json("POST", "/secrets", `{"id":"s","namespace":"team-a","data":{"k":"v"}}`, na...); r.code != 201 {
		t.Fatalf("the confined fleet token on beta after alpha stopped: %d %s", r.code, r.body)
	}
	if r := b.do("GET", "/deployments/b1", "", "", na...); r.code != 403 {
		t.Fatalf("the confined fleet token on team-b after alpha stopped: %d %s", r.code, r.body)
	}
}

// TestNoFleetTokens: without a fleet, fleet: true is refused and GET
// /fleet/tokens answers 409 fleet_not_configured.
func TestNoFleetTokens(t *testing.T) {
	h := start(t, "")
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/tokens", `{"name":"f","admin":"admin","deployments":["*"],"fleet":true}`},
		{"GET", "/fleet/tokens", ""},
	} {
		r := h.json(c.method, c.path, c.body)
		var env struct{ Error, Code string }
		json.Unmarshal(r.body, &env)
		if r.code != 409 || env.Code != "fleet_not_configured" || !strings.Contains(env.Error, "--etcd") {
			t.Fatalf("%s %s without a fleet: %d %s", c.method, c.path, r.code, r.body)
		}
	}
	if ts := tokensOf(t, h); len(ts) != 0 {
		t.Fatalf("the refused mint left tokens: %+v", ts)
	}
}
