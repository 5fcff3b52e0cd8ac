package fleet

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/berth-dev/berth/internal/autoscale"
)

// issues collects what a pool reports to Config.Issues.
type issues struct {
	mu  sync.Mutex
	got []Issue
}

func (is *issues) hear(i Issue) {
	is.mu.Lock()
	defer is.mu.Unlock()
	is.got = append(is.got, i)
}

func (is *issues) whats() []string {
	is.mu.Lock()
	defer is.mu.Unlock()
	var out []string
	for _, i := range is.got {
		out = append(out, i.What)
	}
	return out
}

// TestIssuesReported: a boot timeout, a failed create and a cold-start
// timeout each reach Config.Issues, in berth's own words (never the
// driver's error or the app's output).
func TestIssuesReported(t *testing.T) {
	t.Run("boot timeout", func(t *testing.T) {
		addr := refusing(t)
		synctest.Test(t, func(t *testing.T) {
			is := &issues{}
			r := startRig(t, addr, Options{}, autoscale.Policy{Min: 1, Max: 1, Target: 1, BootTimeout: 30 * time.Second, ColdStartTimeout: time.Hour},
				func(c *Config) { c.Issues = is.hear })
			a := r.only("pending")
			r.after(29 * time.Second)
			if got := is.whats(); len(got) != 0 {
				t.Fatalf("issues before boot_timeout_secs: %v", got)
			}
			r.after(2 * time.Second)
			if got := is.whats(); len(got) != 1 || got[0] != IssueBootTimeout {
				t.Fatalf("issues %v, want one %q", got, IssueBootTimeout)
			}
			if d := is.got[0].Detail; !strings.Contains(d, a) || strings.Contains(d, "last probe") || strings.Contains(d, "refused") {
				t.Errorf("detail %q", d)
			}
		})
	})
	t.Run("create failed", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			is := &issues{}
			startRig(t, "", Options{}, autoscale.Policy{Min: 1, Max: 1, Target: 1, ColdStartTimeout: time.Hour}, func(c *Config) {
				c.Issues = is.hear
				c.Env = func(context.Context) (map[string]string, error) {
					return nil, errors.New(`no secret "nope" (read /var/lib/berth/secrets: x)`)
				}
			})
			got := is.whats()
			if len(got) == 0 || got[0] != IssueCreateFailed {
				t.Fatalf("issues %v, want %q", got, IssueCreateFailed)
			}
			if d := is.got[0].Detail; strings.Contains(d, "/var/lib") || strings.Contains(d, "nope") || !strings.Contains(d, "vm.env_from") {
				t.Errorf("detail %q", d)
			}
		})
	})
	t.Run("cold start timeout", func(t *testing.T) {
		addr := refusing(t)
		synctest.Test(t, func(t *testing.T) {
			is := &issues{}
			r := startRig(t, addr, Options{}, autoscale.Policy{Min: 0, Max: 1, Target: 1, ColdStartTimeout: 10 * time.Second, BootTimeout: time.Hour},
				func(c *Config) { c.Issues = is.hear })
			if err := r.p.Await(t.Context(), time.Now(), true); !errors.Is(err, ErrColdStartTimeout) {
				t.Fatalf("Await: %v", err)
			}
			got := is.whats()
			if len(got) != 1 || got[0] != IssueColdStartExpiry || is.got[0].Detail != "a request waited 10s and no replica became available" {
				t.Errorf("issues %+v", is.got)
			}
		})
	})
}
