package auth

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/store"
	"github.com/berth-dev/berth/internal/web"
)

func TestParseToken(t *testing.T) {
	good, id, hash := newToken()
	gotID, secret, err := ParseToken(good)
	if err != nil || gotID != id || hashSecret(secret) != hash {
		t.Fatalf("ParseToken(%q) = %q, %q, %v; want id %q and the minted secret", good, gotID, secret, err, id)
	}
	sec := good[len(TokenPrefix)+13:]
	bad := []string{
		"",
		"berth_",
		"applb_" + id + "_" + sec, // app-lb's prefix is not accepted
		"Berth_" + id + "_" + sec, // prefix is case-sensitive
		"berth_" + strings.ToUpper(id) + "_" + sec, // id is lowercase hex
		"berth_" + id + "-" + sec,
		"berth_" + id[:11] + "g_" + sec,
		"berth_" + id + "_" + sec[:42],  // short
		"berth_" + id + "_" + sec + "A", // long
		"berth_" + id + "_" + sec[:42] + "=",
		"berth_" + id + "_" + sec[:42] + "/", // not base64url
		"berth_" + id + "_" + sec[:42] + "B", // non-zero padding bits: a second spelling
		good + "\n",
	}
	for _, s := range bad {
		if _, _, err := ParseToken(s); !errors.Is(err, ErrMalformedToken) {
			t.Errorf("ParseToken(%q) err = %v, want ErrMalformedToken", s, err)
		}
	}
}

func FuzzParseToken(f *testing.F) {
	good, _, _ := newToken()
	for _, s := range []string{good, "", "berth_", "applb_0123456789ab_" + strings.Repeat("A", 43), "berth_0123456789ab_" + strings.Repeat("_", 43), good[:len(good)-1] + "\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, secret, err := ParseToken(s)
		if err != nil {
			return
		}
		if s != TokenPrefix+id+"_"+secret || len(id) != tokenIDLen || len(secret) != tokenSecretLen {
			t.Fatalf("ParseToken(%q) accepted it as %q/%q", s, id, secret)
		}
	})
}

func TestParseBasic(t *testing.T) {
	enc := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	tests := []struct {
		h          string
		user, pass string
		ok         bool
	}{
		{"Basic " + enc("admin:pw"), "admin", "pw", true},
		{"basic " + enc("admin:p:w"), "admin", "p:w", true},
		{"Basic " + enc(":"), "", "", true},
		{"Basic " + enc("nocolon"), "", "", false},
		{"Basic !!!", "", "", false},
		{"Bearer " + enc("admin:pw"), "", "", false},
		{"Basic", "", "", false},
		{"", "", "", false},
	}
	for _, tt := range tests {
		u, p, ok := ParseBasic(tt.h)
		if u != tt.user || p != tt.pass || ok != tt.ok {
			t.Errorf("ParseBasic(%q) = %q, %q, %v; want %q, %q, %v", tt.h, u, p, ok, tt.user, tt.pass, tt.ok)
		}
	}
}

func FuzzParseBasic(f *testing.F) {
	for _, s := range []string{"Basic YWRtaW46cHc=", "Basic ", "Basic YWRtaW46cHc", "basic \x00\xff", "Basic " + strings.Repeat("A", 5000), "Bearer x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		u, p, ok := ParseBasic(h)
		if !ok && (u != "" || p != "") {
			t.Fatalf("ParseBasic(%q) returned credentials with ok=false", h)
		}
		// The gate must survive it too, gated or not.
		for _, g := range []*Gate{New(Config{Password: "pw"}), New(Config{})} {
			r, _ := http.NewRequest("GET", "/", nil)
			r.Header.Set("Authorization", h)
			g.Authenticate(r, false)
		}
	})
}

func TestClientKey(t *testing.T) {
	tests := []struct {
		in   string
		want string
	}{
		{"127.0.0.1:5000", "127.0.0.1/32"},
		{"[::ffff:10.1.2.3]:80", "10.1.2.3/32"},
		{"[2001:db8:1:2:3:4:5:6]:443", "2001:db8:1:2::/64"},
		{"[fe80::1%eth0]:1", "fe80::/64"},
	}
	for _, tt := range tests {
		p, ok := ClientKey(tt.in)
		if !ok || p.String() != tt.want {
			t.Errorf("ClientKey(%q) = %v, %v; want %s", tt.in, p, ok, tt.want)
		}
	}
	if _, ok := ClientKey("not an address"); ok {
		t.Error("ClientKey accepted garbage")
	}
}

func TestBrake(t *testing.T) {
	b := NewBrake(BrakeConfig{SlowAfter: 2, SlowStep: time.Second, MaxSlow: 2 * time.Second, Threshold: 5, Lockout: time.Minute, MaxLockout: 3 * time.Minute, Window: time.Hour})
	a := netip.MustParsePrefix("192.0.2.1/32")
	other := netip.MustParsePrefix("192.0.2.2/32")
	t0 := time.Unix(1_000_000, 0)
	wantDelays := []time.Duration{0, 0, time.Second, 2 * time.Second}
	for i, want := range wantDelays {
		d, locked := b.Fail(a, t0)
		if d != want || locked {
			t.Fatalf("failure %d: delay %v locked %v; want %v, false", i+1, d, locked, want)
		}
	}
	if _, blocked := b.Blocked(a, t0); blocked {
		t.Fatal("blocked before the threshold")
	}
	if _, locked := b.Fail(a, t0); !locked {
		t.Fatal("5th failure did not lock out")
	}
	if left, blocked := b.Blocked(a, t0.Add(10*time.Second)); !blocked || left != 50*time.Second {
		t.Fatalf("Blocked 10s in = %v, %v; want 50s, true", left, blocked)
	}
	if _, blocked := b.Blocked(other, t0); blocked {
		t.Fatal("another address is blocked")
	}
	if _, blocked := b.Blocked(a, t0.Add(time.Minute)); blocked {
		t.Fatal("still blocked after the lockout")
	}
	// The second lockout lasts twice as long, the third is capped.
	t1 := t0.Add(2 * time.Minute)
	for range 5 {
		b.Fail(a, t1)
	}
	if left, _ := b.Blocked(a, t1); left != 2*time.Minute {
		t.Fatalf("second lockout = %v, want 2m", left)
	}
	t2 := t1.Add(3 * time.Minute)
	for range 5 {
		b.Fail(a, t2)
	}
	if left, _ := b.Blocked(a, t2); left != 3*time.Minute {
		t.Fatalf("third lockout = %v, want the 3m cap", left)
	}
	// Failures are forgotten after the window.
	t3 := t2.Add(2 * time.Hour)
	if d, locked := b.Fail(a, t3); d != 0 || locked {
		t.Fatalf("after the window: delay %v locked %v; want a fresh start", d, locked)
	}
}

func TestBrakeIsBounded(t *testing.T) {
	b := NewBrake(BrakeConfig{MaxClients: 3, Threshold: 1})
	now := time.Unix(1, 0)
	for i := range 10 {
		b.Fail(netip.PrefixFrom(netip.AddrFrom4([4]byte{192, 0, 2, byte(i)}), 32), now)
	}
	if n := b.Len(); n != 3 {
		t.Fatalf("Len = %d, want 3", n)
	}
	// The most recent ones are kept.
	if _, blocked := b.Blocked(netip.MustParsePrefix("192.0.2.9/32"), now); !blocked {
		t.Error("the latest address was forgotten")
	}
	if _, blocked := b.Blocked(netip.MustParsePrefix("192.0.2.0/32"), now); blocked {
		t.Error("the oldest address was kept")
	}
}

// fixture is a token set over a real store in a temp dir, with a clock the
// test moves.
type fixture struct {
	t   *testing.T
	ts  *Tokens
	st  *store.Store
	now time.Time
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	st, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	f := &fixture{t: t, st: st, now: time.Unix(1_700_000_000, 0)}
	f.ts, err = NewTokens(context.Background(), TokensConfig{Store: st, TenantMaxTTL: 24 * time.Hour, Now: func() time.Time { return f.now }})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

var operator = &Principal{Kind: Operator, User: "admin"}

func (f *fixture) mint(by *Principal, req apitype.NewToken) MintedView {
	f.t.Helper()
	m, err := f.ts.Mint(context.Background(), by, req)
	if err != nil {
		f.t.Fatalf("Mint(%+v): %v", req, err)
	}
	return m
}

func (f *fixture) principal(raw string) *Principal {
	f.t.Helper()
	tok, err := f.ts.Verify(context.Background(), raw)
	if err != nil {
		f.t.Fatalf("Verify: %v", err)
	}
	return &Principal{Kind: AppToken, Token: tok}
}

func status(err error) int {
	var we *web.Error
	if errors.As(err, &we) {
		return we.Status
	}
	return 0
}

func ptr[T any](v T) *T { return &v }

func TestVerify(t *testing.T) {
	f := newFixture(t)
	m := f.mint(operator, apitype.NewToken{Name: "ci", Admin: apitype.ScopeView, Deployments: []string{"*"}, ExpiresInSecs: ptr[int64](60)})
	if !strings.HasPrefix(m.Token, "berth_") || m.ID == "" || m.MintedBy == "" {
		t.Fatalf("minted %+v", m)
	}
	p := f.principal(m.Token)
	if p.Token.Admin != apitype.ScopeView || !p.Fleet() || p.Confined() {
		t.Fatalf("principal %+v", p.Token)
	}
	id, sec, _ := ParseToken(m.Token)
	wrong := TokenPrefix + id + "_" + strings.Repeat("A", 43)
	if sec == strings.Repeat("A", 43) {
		t.Skip("astronomically unlikely secret")
	}
	if _, err := f.ts.Verify(context.Background(), wrong); !errors.Is(err, ErrUnknownToken) {
		t.Errorf("wrong secret: %v, want ErrUnknownToken", err)
	}
	f.now = f.now.Add(60 * time.Second)
	if _, err := f.ts.Verify(context.Background(), m.Token); !errors.Is(err, ErrExpiredToken) {
		t.Errorf("at expiry: %v, want ErrExpiredToken", err)
	}
	// Only the hash is stored; a reload verifies the same token.
	rows, err := f.st.Tokens(context.Background())
	if err != nil || len(rows) != 1 || rows[0].SecretSHA256 != hashSecret(sec) {
		t.Fatalf("stored %+v, %v", rows, err)
	}
	f.now = f.now.Add(-30 * time.Second)
	ts2, err := NewTokens(context.Background(), TokensConfig{Store: f.st, Now: func() time.Time { return f.now }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ts2.Verify(context.Background(), m.Token); err != nil {
		t.Errorf("after reload: %v", err)
	}
	// Revocation is immediate.
	if err := f.ts.Revoke(context.Background(), operator, m.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := f.ts.Verify(context.Background(), m.Token); !errors.Is(err, ErrUnknownToken) {
		t.Errorf("after revoke: %v, want ErrUnknownToken", err)
	}
}

func TestMintRules(t *testing.T) {
	f := newFixture(t)
	nsAdmin := f.principal(f.mint(operator, apitype.NewToken{Name: "team-a admin", Admin: apitype.ScopeAdmin, Namespace: "team-a"}).Token)
	scoped := f.principal(f.mint(operator, apitype.NewToken{Name: "web admin", Admin: apitype.ScopeAdmin, Deployments: []string{"web", "api"}}).Token)
	nsPartial := f.principal(f.mint(operator, apitype.NewToken{Name: "team-a web", Admin: apitype.ScopeAdmin, Namespace: "team-a", Deployments: []string{"web"}}).Token)

	tests := []struct {
		name string
		by   *Principal
		req  apitype.NewToken
		want int // 0: minted
	}{
		{"operator anything", operator, apitype.NewToken{Name: "x", Admin: apitype.ScopeAdmin, Deployments: []string{"*"}}, 0},
		{"empty name", operator, apitype.NewToken{Name: "  "}, 400},
		{"long name", operator, apitype.NewToken{Name: strings.Repeat("n", 129)}, 400},
		{"bad scope", operator, apitype.NewToken{Name: "x", Admin: "root"}, 400},
		{"bad deployment", operator, apitype.NewToken{Name: "x", Deployments: []string{"../etc"}}, 400},
		{"star with others", operator, apitype.NewToken{Name: "x", Deployments: []string{"*", "web"}}, 400},
		{"bad namespace", operator, apitype.NewToken{Name: "x", Namespace: "Team_A"}, 400},
		{"negative ttl", operator, apitype.NewToken{Name: "x", ExpiresInSecs: ptr[int64](-1)}, 400},
		{"fleet token", operator, apitype.NewToken{Name: "x", Fleet: ptr(true)}, 409},
		{"ns admin in its ns", nsAdmin, apitype.NewToken{Name: "x", Admin: apitype.ScopeView, Namespace: "team-a"}, 0},
		{"ns admin without ns", nsAdmin, apitype.NewToken{Name: "x", Deployments: []string{"*"}}, 403},
		{"ns admin other ns", nsAdmin, apitype.NewToken{Name: "x", Namespace: "team-b"}, 403},
		{"ns admin beyond ttl cap", nsAdmin, apitype.NewToken{Name: "x", Namespace: "team-a", ExpiresInSecs: ptr[int64](2 * 24 * 3600)}, 400},
		{"partial ns token does not administer", nsPartial, apitype.NewToken{Name: "x", Namespace: "team-a"}, 403},
		{"scoped within scope", scoped, apitype.NewToken{Name: "x", Deployments: []string{"web"}}, 0},
		{"scoped beyond scope", scoped, apitype.NewToken{Name: "x", Deployments: []string{"db"}}, 403},
		{"scoped star", scoped, apitype.NewToken{Name: "x", Deployments: []string{"*"}}, 403},
		{"scoped into a namespace", scoped, apitype.NewToken{Name: "x", Namespace: "team-a", Deployments: []string{"web"}}, 403},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := f.ts.Mint(context.Background(), tt.by, tt.req)
			if got := status(err); got != tt.want {
				t.Fatalf("Mint status = %d (%v), want %d", got, err, tt.want)
			}
			if err == nil && m.MintedBy != tt.by.Name() {
				t.Errorf("minted_by = %q, want %q", m.MintedBy, tt.by.Name())
			}
		})
	}
	// A namespace credential's tokens default to, and cannot exceed, the cap.
	m := f.mint(nsAdmin, apitype.NewToken{Name: "default ttl", Namespace: "team-a"})
	if m.ExpiresAt == nil || *m.ExpiresAt != f.now.Add(24*time.Hour).Unix() {
		t.Errorf("expires_at = %v, want now+24h", m.ExpiresAt)
	}
}

func TestPatchAndNarrowing(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	nsAdmin := f.principal(f.mint(operator, apitype.NewToken{Name: "a-admin", Admin: apitype.ScopeAdmin, Namespace: "team-a"}).Token)
	bTok := f.mint(operator, apitype.NewToken{Name: "b-viewer", Admin: apitype.ScopeView, Namespace: "team-b"})
	child := f.mint(nsAdmin, apitype.NewToken{Name: "a-child", Admin: apitype.ScopeView, Namespace: "team-a"})
	fleetTok := f.mint(operator, apitype.NewToken{Name: "fleet", Admin: apitype.ScopeAdmin, Deployments: []string{"*"}})

	list, err := f.ts.List(ctx, nsAdmin)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range list {
		names = append(names, s.Name)
	}
	if got := strings.Join(names, ","); !(strings.Contains(got, "a-admin") && strings.Contains(got, "a-child")) || strings.Contains(got, "b-viewer") || strings.Contains(got, "fleet") || len(names) != 2 {
		t.Errorf("namespace admin lists %v, want a-admin and a-child only", names)
	}
	if _, err := f.ts.Get(ctx, nsAdmin, bTok.ID); status(err) != 404 {
		t.Errorf("Get foreign token: %v, want 404", err)
	}
	if err := f.ts.Revoke(ctx, nsAdmin, fleetTok.ID); status(err) != 404 {
		t.Errorf("Revoke fleet token by namespace admin: %v, want 404", err)
	}

	patches := []struct {
		name string
		p    apitype.TokenPatch
		want int
	}{
		{"rename", apitype.TokenPatch{Name: "renamed"}, 0},
		{"clear namespace", apitype.TokenPatch{Namespace: apitype.NullValue[string]()}, 403},
		{"move to foreign namespace", apitype.TokenPatch{Namespace: apitype.Some("team-b")}, 403},
		{"clear expiry", apitype.TokenPatch{ExpiresAt: apitype.NullValue[int64]()}, 403},
		{"extend beyond cap", apitype.TokenPatch{ExpiresAt: apitype.Some(f.now.Add(48 * time.Hour).Unix())}, 400},
		{"shorten", apitype.TokenPatch{ExpiresAt: apitype.Some(f.now.Add(time.Hour).Unix())}, 0},
		{"bad scope", apitype.TokenPatch{Admin: "god"}, 400},
	}
	for _, tt := range patches {
		t.Run(tt.name, func(t *testing.T) {
			_, err := f.ts.Patch(ctx, nsAdmin, child.ID, tt.p)
			if got := status(err); got != tt.want {
				t.Fatalf("Patch status = %d (%v), want %d", got, err, tt.want)
			}
		})
	}
	got, err := f.ts.Get(ctx, operator, child.ID)
	if err != nil || got.Name != "renamed" || got.Namespace != "team-a" || got.ExpiresAt == nil || *got.ExpiresAt != f.now.Add(time.Hour).Unix() {
		t.Errorf("after patches: %+v, %v", got, err)
	}
	// Expired tokens are swept from the list.
	f.now = f.now.Add(2 * time.Hour)
	list, _ = f.ts.List(ctx, operator)
	for _, s := range list {
		if s.ID == child.ID {
			t.Error("expired token still listed")
		}
	}
}

func TestPrincipalWalls(t *testing.T) {
	tok := func(admin apitype.AdminScope, ns string, deps ...string) *Principal {
		return &Principal{Kind: AppToken, Token: &Token{ID: "0123456789ab", Admin: admin, Namespace: ns, Deployments: deps}}
	}
	tests := []struct {
		name                  string
		p                     *Principal
		touchA, touchB, fleet bool
		reachA, adminA        bool
	}{
		{"ungated", &Principal{Kind: Ungated}, true, true, true, true, true},
		{"operator", operator, true, true, true, true, true},
		{"nobody", &Principal{}, false, false, false, false, false},
		{"fleet admin", tok(apitype.ScopeAdmin, "", "*"), true, true, true, true, true},
		{"fleet viewer", tok(apitype.ScopeView, "", "*"), true, true, true, true, false},
		{"scoped", tok(apitype.ScopeAdmin, "", "a1"), true, false, false, false, false},
		{"ns admin", tok(apitype.ScopeAdmin, "team-a"), true, false, false, true, true},
		{"ns admin star", tok(apitype.ScopeAdmin, "team-a", "*"), true, false, false, true, true},
		{"ns partial", tok(apitype.ScopeAdmin, "team-a", "other"), false, false, false, true, false},
		{"ns viewer", tok(apitype.ScopeView, "team-a"), true, false, false, true, false},
		{"ns token naming a foreign id", tok(apitype.ScopeAdmin, "team-a", "b1"), false, false, false, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := []bool{tt.p.Touches("a1", "team-a"), tt.p.Touches("b1", "team-b"), tt.p.Fleet(), tt.p.Reaches("team-a"), tt.p.Administers("team-a")}
			want := []bool{tt.touchA, tt.touchB, tt.fleet, tt.reachA, tt.adminA}
			for i := range got {
				if got[i] != want[i] {
					t.Errorf("[touchA touchB fleet reachA adminA] = %v, want %v", got, want)
					break
				}
			}
		})
	}
	if p := FromContext(context.Background()); p.Kind != Nobody || p.Satisfies(apitype.ScopeNone) && p.Touches("x", "default") {
		t.Errorf("FromContext without a principal = %+v, want Nobody with no reach", p)
	}
}

// TestGateEvents: every refused admin request is handed to Config.Event for
// the SIEM — a wrong or missing credential as admin-rejected, a valid one
// beyond its scope as admin-scope — with the socket peer as its source and
// the credential's scheme; an accepted request raises none.
func TestGateEvents(t *testing.T) {
	f := newFixture(t)
	var got []Event
	g := New(Config{Password: "pw", Tokens: f.ts, Now: func() time.Time { return f.now }, Event: func(e Event) { got = append(got, e) }})
	h := g.Wrap(CRUD, NoWall, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	view := f.mint(operator, apitype.NewToken{Name: "ci", Admin: apitype.ScopeView, Deployments: []string{"*"}}).Token
	for _, c := range []struct {
		auth   string
		status int
		action string
		scheme string
	}{
		{"", 401, "admin-rejected", "none"},
		{"Basic " + base64.StdEncoding.EncodeToString([]byte("admin:wrong")), 401, "admin-rejected", "basic"},
		{"Bearer " + view, 403, "admin-scope", "bearer"},
		{"Basic " + base64.StdEncoding.EncodeToString([]byte("admin:pw")), 200, "", ""},
	} {
		got = nil
		r := httptest.NewRequest("POST", "/deployments", nil)
		r.RemoteAddr = "[::ffff:198.51.100.4]:5000"
		if c.auth != "" {
			r.Header.Set("Authorization", c.auth)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != c.status {
			t.Fatalf("%q: status %d, want %d", c.auth, w.Code, c.status)
		}
		if c.action == "" {
			if len(got) != 0 {
				t.Errorf("accepted request raised %+v", got)
			}
			continue
		}
		if len(got) != 1 || got[0].Action != c.action || got[0].Scheme != c.scheme || got[0].Path != "/deployments" ||
			got[0].Source != netip.MustParseAddr("198.51.100.4") || got[0].Reason == "" {
			t.Errorf("%q: events %+v, want one %s (%s) from 198.51.100.4", c.auth, got, c.action, c.scheme)
		}
	}
}
