package siem

import (
	"net/netip"
	"strings"
	"testing"
	"time"
)

func upperASCII(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'a' <= c && c <= 'z' {
			b[i] = c - ('a' - 'A')
		}
	}
	return string(b)
}

// FuzzSignatures: the scanner never panics, matches within its input, and
// is case-insensitive.
func FuzzSignatures(f *testing.F) {
	for _, s := range []string{"/${jndi:ldap://x}", "/a/../b", "1' or '1'='1", "x union/**/select y", "; DROP  TABLE t",
		"sleep( 5)", "<script>", "%3Cscript", "onerror =x", "/.git/config", ";cat /etc/passwd", "%3bwget", "%27or", "'", ";", "union"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var buf []byte
		l := lowerASCII(&buf, s)
		k, at, n := scanValue(l)
		if k != webNone && (at < 0 || n <= 0 || at+n > len(s)) {
			t.Fatalf("scanValue(%q) = %d at %d+%d", s, k, at, n)
		}
		pk, lit := scanPath(l, s)
		if pk != webNone && lit != "" && !strings.Contains(s, lit) {
			t.Fatalf("scanPath(%q) literal %q not in the path", s, lit)
		}
		// The prefilter never hides a signature.
		if !mayInject(s) && k != webNone {
			t.Fatalf("scanValue(%q) = %d, but mayInject says nothing can match", s, k)
		}
		if !mayInject(s) {
			if sk, slit := secretProbe(s); sk != pk || slit != lit {
				t.Fatalf("secretProbe(%q) = %d %q, scanPath %d %q", s, sk, slit, pk, lit)
			}
		}
		u := upperASCII(s)
		uk, _, _ := scanValue(lowerASCII(&buf, u))
		upk, _ := scanPath(lowerASCII(&buf, u), u)
		if uk != k || upk != pk {
			t.Fatalf("case matters: %q → %d/%d, %q → %d/%d", s, k, pk, u, uk, upk)
		}
	})
}

// FuzzObserve: any request or auth event is analysed without a panic, and
// no alert carries a query or a path longer than 512 bytes.
func FuzzObserve(f *testing.F) {
	f.Add("/a/../b", "q=<script>", "1.2.3.4", 404, "gate-token", "alice", "web", false, false)
	f.Add("/.env", "", "::ffff:1.2.3.4", 200, "signin-state", "", "", true, true)
	f.Add(strings.Repeat("/x", 2000), "a=%zz&b", "2001:db8::1", 401, "admin-scope", "tok", "", false, false)
	f.Fuzz(func(t *testing.T, path, query, client string, status int, action, subject, dep string, cred, unrouted bool) {
		e, err := New(Options{Config: Config{AuthThreshold: 2, ScanThreshold: 2, ScanDistinctPaths: 1, RateThreshold: 3, SpreadDistinct: 1}})
		if err != nil {
			t.Fatal(err)
		}
		c, _ := netip.ParseAddr(client)
		t0 := time.Unix(1_800_000_000, 0)
		for i := range 4 {
			at := t0.Add(time.Duration(i) * time.Second)
			e.ObserveRequest(&Request{Time: at, Client: c, Path: path, RawQuery: query, Status: status, Deployment: dep,
				Credentialed: cred, Unrouted: unrouted, Host: subject})
			e.ObserveAuth(Auth{Time: at, Client: c, Action: action, Deployment: dep, Subject: subject, Path: path})
		}
		e.Flush()
		as, _ := e.Alerts(Filter{})
		for _, a := range as {
			if len(a.Path) > maxAlertPath+3 || a.Path != "" && query != "" && strings.Contains(a.Path, "?"+query) {
				t.Fatalf("alert path %q", a.Path)
			}
			if _, ok := a.ECS["url.query"]; ok {
				t.Fatal("url.query in ecs")
			}
		}
	})
}
