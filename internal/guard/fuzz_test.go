package guard

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/berth-dev/berth/apitype"
)

// FuzzMatch drives the matcher with random rules and requests: nothing
// panics, an accepted spec is a fixed point of Normalize with a stable id
// and compiles, and a rule built from a request's own fields (any subset)
// matches that request.
func FuzzMatch(f *testing.F) {
	f.Add(uint8(0xff), "203.0.113.0/24", "Web.Example", "web", "get", "/admin/x", "SQLMap/1.7", []byte{203, 0, 113, 9})
	f.Add(uint8(0x01), "2001:db8::/32", "", "", "", "", "", []byte{0x20, 0x01, 0x0d, 0xb8, 15: 1})
	f.Add(uint8(0x41), "::ffff:10.0.0.1", "a", "b", "PO ST", " /x ", "Ünïcode UA", []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1})
	f.Add(uint8(0x7e), "nope", "HOST:80", "dep", "DELETE", "/a/../b", "curl", []byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, mask uint8, client, host, dep, method, path, ua string, ip []byte) {
		addr, _ := netip.AddrFromSlice(ip)
		pick := func(bit int, v string) string {
			if mask&(1<<bit) != 0 {
				return v
			}
			return ""
		}
		try := func(m apitype.RuleMatch) (matcher, bool) {
			n, err := Normalize(apitype.RuleSpec{Action: apitype.RuleAction(pick(7, "allow")), Match: m})
			if err != nil {
				return matcher{}, false
			}
			again, err := Normalize(n)
			if err != nil || again.Match != n.Match || again.Action != n.Action {
				t.Fatalf("Normalize is not idempotent: %+v → %+v, %v", n, again, err)
			}
			if ID(n.Action, n.Match) != ID(again.Action, again.Match) {
				t.Fatal("id changed on re-normalizing")
			}
			if Summary(n.Match) == "" {
				t.Fatalf("accepted %+v has an empty summary", n.Match)
			}
			mt, err := compile(n.Match)
			if err != nil {
				t.Fatalf("accepted %+v does not compile: %v", n.Match, err)
			}
			return mt, true
		}

		// A random rule against a random request: no panic.
		if mt, ok := try(apitype.RuleMatch{Client: pick(0, client), Host: pick(1, host), Deployment: pick(2, dep),
			Method: pick(3, method), PathPrefix: pick(4, path), PathContains: pick(5, ua), UserAgentContains: pick(6, ua)}); ok {
			mt.match(addr.Unmap(), host, dep, method, path, ua)
		}

		// The user-agent search agrees with lowercasing both and searching.
		if p := lowerASCII(path); p != "" {
			if got, want := containsFoldASCII(ua, p, uaAnchor(p)), strings.Contains(lowerASCII(ua), p); got != want {
				t.Fatalf("containsFoldASCII(%q, %q) = %v, want %v", ua, p, got, want)
			}
		}

		// A rule made of the request's own fields matches it.
		reqHost := strings.ToLower(host)
		own := apitype.RuleMatch{Host: pick(1, reqHost), Deployment: pick(2, dep), Method: pick(3, method),
			PathPrefix: pick(4, path), PathContains: pick(5, path), UserAgentContains: pick(6, ua)}
		if addr.IsValid() {
			own.Client = pick(0, addr.String())
		}
		for _, v := range []string{own.Host, own.Deployment, own.Method, own.PathPrefix, own.PathContains, own.UserAgentContains} {
			if strings.TrimSpace(v) != v {
				return // trimming makes it another rule
			}
		}
		mt, ok := try(own)
		if !ok {
			return
		}
		if !mt.match(addr.Unmap(), reqHost, dep, method, path, ua) {
			t.Fatalf("rule %+v does not match its own request (%v %q %q %q %q %q)", own, addr, reqHost, dep, method, path, ua)
		}
	})
}
