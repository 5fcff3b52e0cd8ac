package guard

import (
	"context"
	"fmt"
	"net/netip"
	"testing"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/store"
)

// BenchmarkCheck measures the request path with 0, 16 and 256 rules: a
// request no rule matches (the common case, every rule evaluated) and one
// the last rule blocks. The rules mix every kind of condition.
func BenchmarkCheck(b *testing.B) {
	for _, n := range []int{0, 16, 256} {
		st, err := store.Open(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		g, err := New(context.Background(), Options{Store: st, Enforce: true})
		if err != nil {
			b.Fatal(err)
		}
		for i := range n - 1 {
			var m apitype.RuleMatch
			switch i % 5 {
			case 0:
				m.Client = fmt.Sprintf("10.%d.%d.0/24", i/256, i%256)
			case 1:
				m.UserAgentContains = fmt.Sprintf("bot-%d", i)
			case 2:
				m.PathContains = fmt.Sprintf("/x-%d/", i)
			case 3:
				m.Host, m.Method = fmt.Sprintf("h%d.example", i), "POST"
			case 4:
				m.Deployment, m.PathPrefix = "web", fmt.Sprintf("/p%d/", i)
			}
			if _, err := g.Add(context.Background(), block(m)); err != nil {
				b.Fatal(err)
			}
		}
		if n > 0 {
			if _, err := g.Add(context.Background(), block(apitype.RuleMatch{Client: "203.0.113.0/24"})); err != nil {
				b.Fatal(err)
			}
		}
		miss := req{client: netip.MustParseAddr("198.51.100.7"), host: "web.example", deployment: "web", method: "GET",
			path: "/assets/app.js", userAgt: "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0 Safari/537.36"}
		hit := miss
		hit.client = netip.MustParseAddr("203.0.113.9")
		cases := []struct {
			name string
			q    req
			want Verdict
		}{{"miss", miss, Pass}}
		if n > 0 {
			cases = append(cases, struct {
				name string
				q    req
				want Verdict
			}{"blocked", hit, Block})
		}
		for _, c := range cases {
			b.Run(fmt.Sprintf("rules=%d/%s", n, c.name), func(b *testing.B) {
				if got := g.Check(c.q.client, c.q.host, c.q.deployment, c.q.method, c.q.path, c.q.userAgt); got != c.want {
					b.Fatalf("Check = %v, want %v", got, c.want)
				}
				b.ReportAllocs()
				for b.Loop() {
					g.Check(c.q.client, c.q.host, c.q.deployment, c.q.method, c.q.path, c.q.userAgt)
				}
			})
		}
		g.Close()
		st.Close()
	}
}

// BenchmarkCheckClients is the common rule set: 256 rules of one client
// address each (what an alert's block-client action posts), found by a map
// lookup rather than a scan.
func BenchmarkCheckClients(b *testing.B) {
	st, err := store.Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	g, err := New(context.Background(), Options{Store: st, Enforce: true})
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close()
	for i := range 256 {
		if _, err := g.Add(context.Background(), block(apitype.RuleMatch{Client: fmt.Sprintf("203.0.%d.%d", i/200, i%200)})); err != nil {
			b.Fatal(err)
		}
	}
	ua := "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0 Safari/537.36"
	for _, c := range []struct {
		name   string
		client netip.Addr
		want   Verdict
	}{{"miss", netip.MustParseAddr("198.51.100.7"), Pass}, {"blocked", netip.MustParseAddr("203.0.1.5"), Block}} {
		b.Run(c.name, func(b *testing.B) {
			if got := g.Check(c.client, "web.example", "web", "GET", "/", ua); got != c.want {
				b.Fatalf("Check = %v, want %v", got, c.want)
			}
			b.ReportAllocs()
			for b.Loop() {
				g.Check(c.client, "web.example", "web", "GET", "/", ua)
			}
		})
	}
}
