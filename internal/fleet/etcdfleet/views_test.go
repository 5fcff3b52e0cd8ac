package etcdfleet_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/berth-dev/berth/internal/fleet/etcdfleet"
	"github.com/berth-dev/berth/internal/fleet/etcdtest"
)

// TestReports: each host's report is listed by host id, replaced by the
// next one, and goes with its host's lease.
func TestReports(t *testing.T) {
	c := etcdtest.Start(t, 1)
	a, b := join(t, c, "a", etcdfleet.Options{}), join(t, c, "b", etcdfleet.Options{})
	ctx := ctxT(t)
	if err := b.PublishReport(ctx, etcdfleet.Report{Address: "b:80", Deployments: []etcdfleet.DeploymentReport{
		{ID: "web", Namespace: "default", Pool: etcdfleet.Pool{Ready: 2, TotalInFlight: 3}, Routes: []string{"web.test/"}},
		{ID: "api", Namespace: "team", Pool: etcdfleet.Pool{Ready: 1, Draining: 1}},
	}}); err != nil {
		t.Fatal(err)
	}
	if err := a.PublishReport(ctx, etcdfleet.Report{Address: "a:80", Usage: etcdfleet.Usage{Available: true, CPUCount: 4}}); err != nil {
		t.Fatal(err)
	}
	rs, err := a.Reports(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 2 || rs[0].Host != "a" || rs[1].Host != "b" {
		t.Fatalf("reports = %+v, want a then b", rs)
	}
	if !rs[0].Usage.Available || rs[0].Usage.CPUCount != 4 || rs[0].Deployments == nil {
		t.Errorf("a's report = %+v", rs[0])
	}
	if d := rs[1].Deployments; len(d) != 2 || d[0].ID != "api" || d[1].Pool.Ready != 2 || d[1].Routes[0] != "web.test/" {
		t.Errorf("b's deployments = %+v, want api then web", d)
	}
	// The next report replaces the last.
	if err := b.PublishReport(ctx, etcdfleet.Report{Address: "b:80"}); err != nil {
		t.Fatal(err)
	}
	if rs, _ := a.Reports(ctx); len(rs) != 2 || len(rs[1].Deployments) != 0 {
		t.Errorf("after b's second report: %+v", rs)
	}
	// A host that leaves takes its report with it.
	if err := b.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	if rs, _ := a.Reports(ctx); len(rs) != 1 || rs[0].Host != "a" {
		t.Errorf("after b left: %+v", rs)
	}
	if err := b.PublishReport(ctx, etcdfleet.Report{}); !errors.Is(err, etcdfleet.ErrClosed) {
		t.Errorf("publishing after leaving: %v, want ErrClosed", err)
	}
}

// TestServices: hosts publish memberships; a publish replaces the host's
// own set (not another host's), the list pages by id, a watcher sees
// each change, and a host's members go with its lease.
func TestServices(t *testing.T) {
	c := etcdtest.Start(t, 1)
	a, b := join(t, c, "a", etcdfleet.Options{}), join(t, c, "b", etcdfleet.Options{})
	ctx := ctxT(t)
	w := a.WatchService(ctx, "web")
	all := b.WatchServices(ctx)
	if s := <-w; len(s.Members) != 0 || s.Revision == 0 {
		t.Fatalf("first snapshot = %+v, want no members at a revision", s)
	}
	if err := a.PublishServices(ctx, []etcdfleet.ServiceMember{{Service: "web", Peer: "a:80"}, {Service: "api", Peer: "a:80", InFlight: 2}}); err != nil {
		t.Fatal(err)
	}
	if err := b.PublishServices(ctx, []etcdfleet.ServiceMember{{Service: "web", Peer: "b:80", Draining: true}, {Service: "zzz", Peer: "b:80"}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the watcher to see both web members", func() bool {
		s := <-w
		return len(s.Members) == 2
	})
	waitFor(t, "WatchServices to see the three services", func() bool {
		s := <-all
		return len(s.Services) == 3 && s.Revision > 0
	})
	ss, rev, err := a.Services(ctx, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if rev == 0 || len(ss) != 3 || ss[0].ID != "api" || ss[1].ID != "web" || ss[2].ID != "zzz" {
		t.Fatalf("services = %+v", ss)
	}
	if m := ss[1].Members; len(m) != 2 || m[0].Peer != "a:80" || m[0].Host != "a" || !m[1].Draining || m[1].Host != "b" {
		t.Errorf("web's members = %+v", m)
	}
	if ss[0].Members[0].InFlight != 2 {
		t.Errorf("api's member = %+v, want in_flight 2", ss[0].Members[0])
	}
	if page, _, _ := a.Services(ctx, "api", 1); len(page) != 1 || page[0].ID != "web" {
		t.Errorf("page after api = %+v, want web", page)
	}
	// a's next publish drops api, and leaves b's members alone.
	if err := a.PublishServices(ctx, []etcdfleet.ServiceMember{{Service: "web", Peer: "a:80"}}); err != nil {
		t.Fatal(err)
	}
	if ss, _, _ := a.Services(ctx, "", 0); len(ss) != 2 || ss[0].ID != "web" || len(ss[0].Members) != 2 {
		t.Errorf("after a's second publish: %+v", ss)
	}
	if err := b.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the watcher to see b's member go", func() bool {
		s := <-w
		return len(s.Members) == 1 && s.Members[0].Peer == "a:80"
	})
	if err := a.PublishServices(ctx, []etcdfleet.ServiceMember{{Service: "a/b", Peer: "x:1"}}); err == nil {
		t.Error("a service id with '/' was published")
	}
	if err := a.PublishServices(ctx, []etcdfleet.ServiceMember{{Service: "ok", Peer: ""}}); err == nil {
		t.Error("an empty peer was published")
	}
}

// TestConfig: the control-plane configuration is replaced only at the
// revision the writer read; a stale one is refused with the current one.
func TestConfig(t *testing.T) {
	c := etcdtest.Start(t, 1)
	a, b := join(t, c, "a", etcdfleet.Options{}), join(t, c, "b", etcdfleet.Options{})
	ctx := ctxT(t)
	doc, rev, err := a.Config(ctx)
	if err != nil || doc != nil || rev != 0 {
		t.Fatalf("empty config = %s, %d, %v", doc, rev, err)
	}
	r1, err := a.PutConfig(ctx, 0, json.RawMessage(`{"gateways":[]}`))
	if err != nil || r1 == 0 {
		t.Fatalf("first put: %d, %v", r1, err)
	}
	if cur, err := b.PutConfig(ctx, 0, json.RawMessage(`{}`)); !errors.Is(err, etcdfleet.ErrStaleRevision) || cur != r1 {
		t.Errorf("stale put: %d, %v; want ErrStaleRevision and %d", cur, err, r1)
	}
	r2, err := b.PutConfig(ctx, r1, json.RawMessage(`{"gateways":[{"id":"x"}]}`))
	if err != nil || r2 <= r1 {
		t.Fatalf("second put: %d, %v", r2, err)
	}
	if doc, rev, _ := a.Config(ctx); rev != r2 || string(doc) != `{"gateways":[{"id":"x"}]}` {
		t.Errorf("config = %s at %d, want the second at %d", doc, rev, r2)
	}
	if _, err := a.PutConfig(ctx, r2, json.RawMessage(`{`)); err == nil {
		t.Error("a config that is not JSON was stored")
	}
}
