package storetest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/berth-dev/berth/internal/store"
)

// MiscBackend is the slice of a store RunMisc covers: security alerts,
// disk records and archives, upstream drains, feed events, images, obs
// alerts, plugin records and installs, rate limits, sessions and
// webhooks (and the deployments drains and rate limits hang off).
type MiscBackend interface {
	PutDeployment(ctx context.Context, d store.Deployment, createOnly bool, ifRevision int64) (store.Deployment, error)
	DeleteDeployment(ctx context.Context, id string) error

	SecurityAlerts(ctx context.Context) ([]store.SecurityAlert, int64, error)
	PutSecurityAlerts(ctx context.Context, alerts []store.SecurityAlert, keep int) error

	DiskRecords(ctx context.Context) ([]store.DiskRecord, error)
	PutDiskRecord(ctx context.Context, d store.DiskRecord) error
	DeleteDiskRecord(ctx context.Context, id string) error
	PutDiskArchive(ctx context.Context, a store.DiskArchive, keep int) error
	DiskArchives(ctx context.Context) ([]store.DiskArchive, error)

	UpstreamDrains(ctx context.Context) ([]store.UpstreamDrain, error)
	PutUpstreamDrain(ctx context.Context, d store.UpstreamDrain) error
	DeleteUpstreamDrain(ctx context.Context, deployment, upstream string) error

	FeedEvents(ctx context.Context) ([]store.FeedEvent, error)
	SaveFeedEvents(ctx context.Context, put []store.FeedEvent, drop []int64) error

	Images(ctx context.Context) ([]store.Image, error)
	Image(ctx context.Context, name string) (store.Image, error)
	PutImage(ctx context.Context, im store.Image, keepPinned bool) (store.Image, error)
	PinImage(ctx context.Context, name string, pinned bool) error
	DeleteImage(ctx context.Context, name string) (digest string, shared bool, err error)

	ObsAlerts(ctx context.Context) ([]store.ObsAlert, error)
	PutObsAlert(ctx context.Context, a store.ObsAlert) error
	DeleteObsAlert(ctx context.Context, ns, id string) error

	PluginRecords(ctx context.Context) ([]store.PluginRecord, error)
	PutPluginRecord(ctx context.Context, p store.PluginRecord, add []store.PluginInstall) error
	PluginInstalls(ctx context.Context) ([]store.PluginInstall, error)
	PutPluginInstall(ctx context.Context, in store.PluginInstall) error
	DeletePluginInstall(ctx context.Context, plugin, namespace string) error

	RateLimits(ctx context.Context) ([]store.RateLimit, error)
	PutRateLimit(ctx context.Context, x store.RateLimit) (store.RateLimit, error)
	DeleteRateLimit(ctx context.Context, deployment string) error

	Sessions(ctx context.Context) ([]store.Session, error)
	PutSession(ctx context.Context, x store.Session) error
	TouchSessions(ctx context.Context, seen map[string]time.Time) error
	DeleteSessions(ctx context.Context, ids []string) error

	Webhooks(ctx context.Context) ([]store.Webhook, error)
	PutWebhook(ctx context.Context, w store.Webhook) error
	DeleteWebhook(ctx context.Context, id string) error
	AddWebhookCounts(ctx context.Context, deltas map[string]store.WebhookCounts) error
}

// RunMisc runs the suite of MiscBackend's entities; open returns a fresh,
// empty backend for each subtest (its cleanup registered on that t).
func RunMisc(t *testing.T, open func(t *testing.T) MiscBackend) {
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, MiscBackend)
	}{
		{"SecurityAlerts", testSecurityAlerts},
		{"SecurityAlertsMany", testSecurityAlertsMany},
		{"ConcurrentSecurityAlerts", testConcurrentSecurityAlerts},
		{"DiskRecords", testDiskRecords},
		{"DiskArchives", testDiskArchives},
		{"ConcurrentDiskArchives", testConcurrentDiskArchives},
		{"UpstreamDrains", testUpstreamDrains},
		{"FeedEvents", testFeedEvents},
		{"Images", testImages},
		{"ConcurrentImageDeletes", testConcurrentImageDeletes},
		{"ObsAlerts", testObsAlerts},
		{"Plugins", testPlugins},
		{"RateLimits", testRateLimits},
		{"Sessions", testSessions},
		{"ConcurrentSessionTouch", testConcurrentSessionTouch},
		{"Webhooks", testWebhooks},
		{"ConcurrentWebhookCounts", testConcurrentWebhookCounts},
		{"ManyKeys", testMiscManyKeys},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, open(t)) })
	}
}

func alert(id int64, dep string) store.SecurityAlert {
	return store.SecurityAlert{ID: id, Rule: "web.sqli", Severity: "high", Deployment: dep, Namespace: "ns",
		LastTs: 1000 + id, JSON: []byte(`{"id":` + strconv.FormatInt(id, 10) + `}`)}
}

func alertIDs(as []store.SecurityAlert) []int64 {
	ids := make([]int64, len(as))
	for i, a := range as {
		ids[i] = a.ID
	}
	return ids
}

func testSecurityAlerts(t *testing.T, s MiscBackend) {
	ctx := t.Context()
	if got, last, err := s.SecurityAlerts(ctx); err != nil || len(got) != 0 || last != 0 {
		t.Fatalf("empty store: %v, %d, %v", got, last, err)
	}
	if err := s.PutSecurityAlerts(ctx, []store.SecurityAlert{alert(1, "a"), alert(2, ""), alert(3, "b")}, 0); err != nil {
		t.Fatal(err)
	}
	// A fold rewrites an alert in place.
	a2 := alert(2, "")
	a2.LastTs, a2.JSON = 9999, []byte(`{"id":2,"count":5}`)
	if err := s.PutSecurityAlerts(ctx, []store.SecurityAlert{a2, alert(4, "a")}, 3); err != nil {
		t.Fatal(err)
	}
	got, last, err := s.SecurityAlerts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]store.SecurityAlert{a2, alert(3, "b"), alert(4, "a")}, got); diff != "" || last != 4 {
		t.Fatalf("after trim to 3 (last %d, want 4; the oldest evicted) (-want +got):\n%s", last, diff)
	}
	for _, bad := range []store.SecurityAlert{{ID: 5, JSON: []byte("{")}, {ID: 0, JSON: []byte("{}")}, {ID: -1, JSON: []byte("{}")}} {
		if err := s.PutSecurityAlerts(ctx, []store.SecurityAlert{alert(6, ""), bad}, 0); err == nil {
			t.Errorf("alert %+v accepted", bad)
		}
	}
	if got, _, _ := s.SecurityAlerts(ctx); len(got) != 3 {
		t.Errorf("a refused batch wrote alerts: %v", alertIDs(got))
	}
	// Trimming to one keeps the newest; the sequence outlives the alerts.
	if err := s.PutSecurityAlerts(ctx, []store.SecurityAlert{alert(7, "")}, 1); err != nil {
		t.Fatal(err)
	}
	if got, last, err := s.SecurityAlerts(ctx); err != nil || len(got) != 1 || got[0].ID != 7 || last != 7 {
		t.Fatalf("after trim to 1: %v, %d, %v", alertIDs(got), last, err)
	}
	// An alert older than what is kept is trimmed at once, but still
	// advances nothing beyond the sequence; a trim alone keeps the
	// sequence.
	if err := s.PutSecurityAlerts(ctx, []store.SecurityAlert{alert(5, "")}, 1); err != nil {
		t.Fatal(err)
	}
	if err := s.PutSecurityAlerts(ctx, []store.SecurityAlert{alert(20, ""), alert(9, "")}, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.PutSecurityAlerts(ctx, nil, 2); err != nil {
		t.Fatal(err)
	}
	if got, last, err := s.SecurityAlerts(ctx); err != nil || fmt.Sprint(alertIDs(got)) != "[9 20]" || last != 20 {
		t.Fatalf("after trim alone to 2: %v, %d, %v; want [9 20], 20", alertIDs(got), last, err)
	}
	if err := s.PutSecurityAlerts(ctx, nil, 0); err != nil {
		t.Errorf("empty put: %v", err)
	}
	// Ids sort numerically, not as text.
	if err := s.PutSecurityAlerts(ctx, []store.SecurityAlert{alert(100, ""), alert(11, "")}, 0); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := s.SecurityAlerts(ctx); fmt.Sprint(alertIDs(got)) != "[9 11 20 100]" {
		t.Errorf("alerts = %v, want [9 11 20 100]", alertIDs(got))
	}
}

// testSecurityAlertsMany: more alerts in one put than one etcd
// transaction takes, trimmed as one put would be.
func testSecurityAlertsMany(t *testing.T, s MiscBackend) {
	ctx := t.Context()
	var as []store.SecurityAlert
	for i := range 300 {
		as = append(as, alert(int64(1+(i*7)%300), "d")) // 1..300, shuffled
	}
	if err := s.PutSecurityAlerts(ctx, as, 200); err != nil {
		t.Fatal(err)
	}
	got, last, err := s.SecurityAlerts(ctx)
	if err != nil || len(got) != 200 || got[0].ID != 101 || got[199].ID != 300 || last != 300 {
		t.Fatalf("after 300 alerts kept to 200: %d alerts from %v, last %d, %v; want 101..300, 300", len(got), alertIDs(got[:min(1, len(got))]), last, err)
	}
}

// testConcurrentSecurityAlerts: concurrent puts that each trim leave
// exactly keep alerts, the newest ones, and a sequence past all of them,
// after every round of them.
func testConcurrentSecurityAlerts(t *testing.T, s MiscBackend) {
	ctx := t.Context()
	const writers, rounds, keep = 6, 8, 3
	for round := range rounds {
		errs := race(writers, func(w int) error {
			return s.PutSecurityAlerts(ctx, []store.SecurityAlert{alert(int64(1+round*writers+w), "")}, keep)
		})
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		got, last, err := s.SecurityAlerts(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n := int64((round + 1) * writers); fmt.Sprint(alertIDs(got)) != fmt.Sprint([]int64{n - 2, n - 1, n}) || last != n {
			t.Fatalf("after round %d of concurrent puts: %v, last %d; want the newest %d of 1..%d", round, alertIDs(got), last, keep, n)
		}
	}
}

func testDiskRecords(t *testing.T, s MiscBackend) {
	ctx := t.Context()
	if got, err := s.DiskRecords(ctx); err != nil || len(got) != 0 {
		t.Fatalf("empty store: %v, %v", got, err)
	}
	b := store.DiskRecord{SandboxID: "sb-b", Retain: true, UpdatedAt: 10}
	a := store.DiskRecord{SandboxID: "sb-a", Note: "keep for audit", UpdatedAt: 11}
	c := store.DiskRecord{SandboxID: "sb-c", ArchiveURI: "file:///a.tar", ArchivedAt: 12, ArchiveBytes: 4096, UpdatedAt: 13}
	for _, d := range []store.DiskRecord{b, a, c} {
		if err := s.PutDiskRecord(ctx, d); err != nil {
			t.Fatalf("PutDiskRecord(%s): %v", d.SandboxID, err)
		}
	}
	b.Note, b.UpdatedAt = "replaced", 20
	if err := s.PutDiskRecord(ctx, b); err != nil {
		t.Fatal(err)
	}
	got, err := s.DiskRecords(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]store.DiskRecord{a, b, c}, got); diff != "" {
		t.Errorf("DiskRecords, by sandbox (-want +got):\n%s", diff)
	}
	// Nothing decided deletes the record; deleting none is no error.
	if err := s.PutDiskRecord(ctx, store.DiskRecord{SandboxID: "sb-a", UpdatedAt: 30}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteDiskRecord(ctx, "sb-c"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteDiskRecord(ctx, "sb-c"); err != nil {
		t.Errorf("second DeleteDiskRecord: %v", err)
	}
	if err := s.PutDiskRecord(ctx, store.DiskRecord{SandboxID: "never"}); err != nil {
		t.Errorf("default record of an unknown disk: %v", err)
	}
	if got, err := s.DiskRecords(ctx); err != nil || len(got) != 1 || got[0].SandboxID != "sb-b" {
		t.Errorf("after deletes: %+v, %v; want only sb-b", got, err)
	}
	if err := s.PutDiskRecord(ctx, store.DiskRecord{Retain: true}); err == nil {
		t.Error("disk record without a sandbox id accepted")
	}
}

func testDiskArchives(t *testing.T, s MiscBackend) {
	ctx := t.Context()
	arch := func(id, sb string, started int64) store.DiskArchive {
		return store.DiskArchive{ID: id, SandboxID: sb, StartedAt: started, View: fmt.Appendf(nil, `{"id":%q}`, id)}
	}
	for _, a := range []store.DiskArchive{arch("x1", "sb1", 100), arch("x3", "sb2", 300), arch("x2", "sb1", 300), arch("x0", "sb3", 50)} {
		if err := s.PutDiskArchive(ctx, a, 0); err != nil {
			t.Fatalf("PutDiskArchive(%s): %v", a.ID, err)
		}
	}
	// A replace changes only the view.
	x1 := arch("x1", "other", 999)
	x1.View = []byte(`{"id":"x1","state":"done"}`)
	if err := s.PutDiskArchive(ctx, x1, 0); err != nil {
		t.Fatal(err)
	}
	x1.SandboxID, x1.StartedAt = "sb1", 100
	got, err := s.DiskArchives(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []store.DiskArchive{arch("x3", "sb2", 300), arch("x2", "sb1", 300), x1, arch("x0", "sb3", 50)}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("DiskArchives, newest first (-want +got):\n%s", diff)
	}
	// Keeping 3 drops the oldest; an archive older than those kept goes
	// at once.
	if err := s.PutDiskArchive(ctx, arch("x4", "sb4", 200), 3); err != nil {
		t.Fatal(err)
	}
	if err := s.PutDiskArchive(ctx, arch("old", "sb5", 1), 3); err != nil {
		t.Fatal(err)
	}
	got, err = s.DiskArchives(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]store.DiskArchive{want[0], want[1], arch("x4", "sb4", 200)}, got); diff != "" {
		t.Errorf("after keeping 3 (-want +got):\n%s", diff)
	}
	for _, bad := range []store.DiskArchive{{ID: "", View: []byte(`{}`)}, {ID: "y", View: []byte(`{`)}} {
		if err := s.PutDiskArchive(ctx, bad, 0); err == nil {
			t.Errorf("archive %+v accepted", bad)
		}
	}
}

// testConcurrentDiskArchives: concurrent puts that each prune leave
// exactly keep archives, the newest, after every round of them.
func testConcurrentDiskArchives(t *testing.T, s MiscBackend) {
	ctx := t.Context()
	const writers, rounds, keep = 6, 8, 3
	for round := range rounds {
		errs := race(writers, func(w int) error {
			n := round*writers + w
			return s.PutDiskArchive(ctx, store.DiskArchive{ID: fmt.Sprintf("a%03d", n), SandboxID: "sb", StartedAt: int64(n), View: []byte(`{}`)}, keep)
		})
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		got, err := s.DiskArchives(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, a := range got {
			ids = append(ids, a.ID)
		}
		top := (round+1)*writers - 1
		if want := fmt.Sprintf("[a%03d a%03d a%03d]", top, top-1, top-2); fmt.Sprint(ids) != want {
			t.Fatalf("after round %d of concurrent pruning puts: %v, want %s", round, ids, want)
		}
	}
}

func testUpstreamDrains(t *testing.T, s MiscBackend) {
	ctx := t.Context()
	for _, id := range []string{"d1", "d2", "d1/x"} {
		if _, err := s.PutDeployment(ctx, store.Deployment{ID: id, Spec: spec(1)}, false, 0); err != nil {
			t.Fatal(err)
		}
	}
	t0 := time.Date(2025, 6, 1, 12, 0, 0, 987654321, time.FixedZone("x", 3600))
	put := func(d store.UpstreamDrain) {
		t.Helper()
		if err := s.PutUpstreamDrain(ctx, d); err != nil {
			t.Fatalf("PutUpstreamDrain(%+v): %v", d, err)
		}
	}
	put(store.UpstreamDrain{Deployment: "d2", Upstream: "u1", Reason: "maint", StartedAt: t0})
	put(store.UpstreamDrain{Deployment: "d1", Upstream: "u2", StartedAt: t0})
	put(store.UpstreamDrain{Deployment: "d1", Upstream: "u1", Reason: "first", StartedAt: t0})
	put(store.UpstreamDrain{Deployment: "d1", Upstream: "u1", Reason: "second", StartedAt: t0.Add(time.Minute)}) // upsert
	put(store.UpstreamDrain{Deployment: "d1/x", Upstream: "u1", StartedAt: t0})

	got, err := s.UpstreamDrains(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []store.UpstreamDrain{
		{Deployment: "d1", Upstream: "u1", Reason: "second", StartedAt: t0.Add(time.Minute).UTC()},
		{Deployment: "d1", Upstream: "u2", StartedAt: t0.UTC()},
		{Deployment: "d1/x", Upstream: "u1", StartedAt: t0.UTC()},
		{Deployment: "d2", Upstream: "u1", Reason: "maint", StartedAt: t0.UTC()},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("UpstreamDrains (-want +got):\n%s", diff)
	}
	for _, d := range got {
		if d.StartedAt.Location() != time.UTC {
			t.Errorf("drain %s/%s started at %v, want UTC", d.Deployment, d.Upstream, d.StartedAt)
		}
	}
	if err := s.PutUpstreamDrain(ctx, store.UpstreamDrain{Deployment: "ghost", Upstream: "u"}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("drain of unknown deployment: err = %v, want ErrNotFound", err)
	}
	if err := s.PutUpstreamDrain(ctx, store.UpstreamDrain{Deployment: "d1"}); err == nil {
		t.Error("drain without upstream succeeded, want error")
	}

	// A zero StartedAt is filled in from the clock.
	put(store.UpstreamDrain{Deployment: "d2", Upstream: "u9"})
	got, _ = s.UpstreamDrains(ctx)
	if last := got[len(got)-1]; last.Upstream != "u9" || last.StartedAt.IsZero() {
		t.Errorf("drain with zero StartedAt stored as %+v, want a non-zero time", last)
	}
	// Uncordon is idempotent.
	for range 2 {
		if err := s.DeleteUpstreamDrain(ctx, "d2", "u9"); err != nil {
			t.Fatalf("DeleteUpstreamDrain: %v", err)
		}
	}
	if err := s.DeleteUpstreamDrain(ctx, "ghost", "u"); err != nil {
		t.Errorf("DeleteUpstreamDrain of unknown deployment: %v", err)
	}
	// Deleting a deployment deletes its drains and only its drains (not
	// those of d1/x, whose id d1 prefixes).
	if err := s.DeleteDeployment(ctx, "d1"); err != nil {
		t.Fatal(err)
	}
	got, err = s.UpstreamDrains(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want[2:], got); diff != "" {
		t.Errorf("UpstreamDrains after deleting d1 (-want +got):\n%s", diff)
	}
	// A recreated deployment does not inherit the old drains.
	if _, err := s.PutDeployment(ctx, store.Deployment{ID: "d1", Spec: spec(1)}, true, 0); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.UpstreamDrains(ctx); len(got) != 2 {
		t.Errorf("after recreating d1, drains = %+v, want only d1/x's and d2's", got)
	}
}

func testFeedEvents(t *testing.T, s MiscBackend) {
	ctx := t.Context()
	ev := func(id, seq int64, title string) store.FeedEvent {
		return store.FeedEvent{ID: id, Namespace: "ns", Deployment: "d", Kind: "deploy", Title: title, Detail: "x",
			Ts: 100 + id, LastTs: 200 + seq, Count: 1, Fold: "f" + title, Seq: seq}
	}
	if got, err := s.FeedEvents(ctx); err != nil || len(got) != 0 {
		t.Fatalf("empty store: %v, %v", got, err)
	}
	if err := s.SaveFeedEvents(ctx, []store.FeedEvent{ev(1, 10, "a"), ev(2, 3, "b"), ev(3, 7, "c"), ev(12, 1, "l")}, nil); err != nil {
		t.Fatal(err)
	}
	// A fold moves an event to the end of the feed; a dropped one goes;
	// one both put and dropped ends dropped; of two puts the later counts.
	b := ev(2, 11, "b")
	b.Count = 2
	if err := s.SaveFeedEvents(ctx, []store.FeedEvent{ev(2, 99, "stale"), b, ev(4, 12, "d")}, []int64{1, 4, 404}); err != nil {
		t.Fatal(err)
	}
	got, err := s.FeedEvents(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]store.FeedEvent{ev(12, 1, "l"), ev(3, 7, "c"), b}, got); diff != "" {
		t.Errorf("FeedEvents, by seq (-want +got):\n%s", diff)
	}
	if err := s.SaveFeedEvents(ctx, nil, nil); err != nil {
		t.Errorf("empty save: %v", err)
	}
	// More than one etcd transaction's worth.
	var many []store.FeedEvent
	for i := range 200 {
		many = append(many, ev(int64(1000+i), int64(1000+i), "m"))
	}
	if err := s.SaveFeedEvents(ctx, many, []int64{3, 12}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.FeedEvents(ctx); err != nil || len(got) != 201 || got[0].ID != 2 || got[200].ID != 1199 {
		t.Errorf("after a save of 202: %d events, %v", len(got), err)
	}
}

func testImages(t *testing.T, s MiscBackend) {
	ctx := t.Context()
	const d1, d2 = "sha256:aa", "sha256:bb"
	before := time.Now()
	a, err := s.PutImage(ctx, store.Image{Name: "a", Digest: d1, Size: 10, Source: "upload"}, true)
	if err != nil {
		t.Fatalf("PutImage: %v", err)
	}
	within(t, "CreatedAt", a.CreatedAt, before, time.Now())
	at := time.Date(2024, 5, 6, 7, 8, 9, 10, time.FixedZone("y", -7200))
	b, err := s.PutImage(ctx, store.Image{Name: "b", Digest: d1, Size: 10, Source: "/srv/b", CreatedAt: at}, true)
	if err != nil {
		t.Fatalf("PutImage: %v", err)
	}
	if !b.CreatedAt.Equal(at) {
		t.Errorf("PutImage(b).CreatedAt = %v, want %v", b.CreatedAt, at)
	}
	if got, err := s.Image(ctx, "b"); err != nil || !got.CreatedAt.Equal(at) || got.CreatedAt.Location() != time.UTC {
		t.Errorf("Image(b) = %+v, %v; want created at %v in UTC", got, err, at)
	}
	b.CreatedAt = at.UTC()
	if err := s.PinImage(ctx, "a", true); err != nil {
		t.Fatalf("PinImage: %v", err)
	}
	if err := s.PinImage(ctx, "nope", true); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("PinImage(nope): %v, want ErrNotFound", err)
	}
	// A re-import keeps the pin when asked to, and only then.
	a2, err := s.PutImage(ctx, store.Image{Name: "a", Digest: d2, Size: 20, Source: "upload"}, true)
	if err != nil {
		t.Fatalf("PutImage again: %v", err)
	}
	if !a2.Pinned {
		t.Error("re-import with keepPinned lost the pin")
	}
	got, err := s.Image(ctx, "a")
	if err != nil {
		t.Fatalf("Image: %v", err)
	}
	if diff := cmp.Diff(a2, got); diff != "" {
		t.Errorf("Image(a) (-put +got):\n%s", diff)
	}
	if _, err := s.Image(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Image(nope): %v, want ErrNotFound", err)
	}
	list, err := s.Images(ctx)
	if err != nil {
		t.Fatalf("Images: %v", err)
	}
	if diff := cmp.Diff([]store.Image{a2, b}, list); diff != "" {
		t.Errorf("Images, by name (-want +got):\n%s", diff)
	}
	if err := s.PinImage(ctx, "b", true); err != nil {
		t.Fatal(err)
	}
	if b2, err := s.PutImage(ctx, store.Image{Name: "b", Digest: d1}, false); err != nil || b2.Pinned {
		t.Errorf("re-import without keepPinned = %+v, %v; want unpinned", b2, err)
	}
	if got, _ := s.Image(ctx, "b"); got.Pinned || got.Source != "" {
		t.Errorf("Image(b) after re-import = %+v, want unpinned, no source", got)
	}

	// b shares d1 with nobody now (a moved to d2).
	digest, shared, err := s.DeleteImage(ctx, "b")
	if err != nil || digest != d1 || shared {
		t.Errorf("DeleteImage(b) = %q, %v, %v; want %q, false, nil", digest, shared, err, d1)
	}
	if _, err := s.PutImage(ctx, store.Image{Name: "c", Digest: d2, Source: "upload"}, false); err != nil {
		t.Fatal(err)
	}
	digest, shared, err = s.DeleteImage(ctx, "a")
	if err != nil || digest != d2 || !shared {
		t.Errorf("DeleteImage(a) = %q, %v, %v; want %q, true (c shares it), nil", digest, shared, err, d2)
	}
	if _, _, err := s.DeleteImage(ctx, "a"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("second DeleteImage(a): %v, want ErrNotFound", err)
	}
	if _, err := s.PutImage(ctx, store.Image{Name: "", Digest: d1}, false); err == nil {
		t.Error("PutImage without a name succeeded")
	}
	if _, err := s.PutImage(ctx, store.Image{Name: "x"}, false); err == nil {
		t.Error("PutImage without a digest succeeded")
	}
}

// testConcurrentImageDeletes: of names sharing a digest deleted at once,
// exactly one learns it was the last (so the tree is removed once, and
// not while a name still refers to it).
func testConcurrentImageDeletes(t *testing.T, s MiscBackend) {
	ctx := t.Context()
	const names = 4
	for round := range 3 {
		digest := fmt.Sprintf("sha256:%02d", round)
		for i := range names {
			if _, err := s.PutImage(ctx, store.Image{Name: fmt.Sprintf("r%d-%d", round, i), Digest: digest}, false); err != nil {
				t.Fatal(err)
			}
		}
		last := make([]bool, names)
		errs := race(names, func(i int) error {
			d, shared, err := s.DeleteImage(ctx, fmt.Sprintf("r%d-%d", round, i))
			if err == nil && d != digest {
				return fmt.Errorf("digest %q, want %q", d, digest)
			}
			last[i] = !shared
			return err
		})
		n := 0
		for i, err := range errs {
			if err != nil {
				t.Errorf("round %d, delete %d: %v", round, i, err)
			}
			if last[i] {
				n++
			}
		}
		if n != 1 {
			t.Errorf("round %d: %d deletes reported the digest unshared, want exactly 1", round, n)
		}
	}
}

func testObsAlerts(t *testing.T, s MiscBackend) {
	ctx := t.Context()
	t0 := time.Date(2026, 2, 3, 4, 5, 6, 7, time.FixedZone("z", 5*3600))
	a := store.ObsAlert{ID: "oa_b", Namespace: "ns1", Deployment: "d", Metric: "error_rate", Threshold: 0.25, Sealed: []byte{0, 1, 2}, CreatedAt: t0}
	b := store.ObsAlert{ID: "oa_a", Namespace: "ns2", Metric: "p99", Threshold: 1e9, Sealed: []byte{9}, CreatedAt: t0}
	c := store.ObsAlert{ID: "oa_0", Namespace: "ns1", Metric: "p50", Sealed: []byte("x"), CreatedAt: t0.Add(time.Second)}
	for _, x := range []store.ObsAlert{a, b, c} {
		if err := s.PutObsAlert(ctx, x); err != nil {
			t.Fatalf("PutObsAlert(%s): %v", x.ID, err)
		}
	}
	dup := a
	dup.Namespace = "other"
	if err := s.PutObsAlert(ctx, dup); !errors.Is(err, store.ErrConflict) {
		t.Errorf("PutObsAlert of an existing id: %v, want ErrConflict", err)
	}
	for _, bad := range []store.ObsAlert{{Namespace: "n", Sealed: []byte{1}}, {ID: "x", Sealed: []byte{1}}, {ID: "x", Namespace: "n"}} {
		if err := s.PutObsAlert(ctx, bad); err == nil || errors.Is(err, store.ErrConflict) {
			t.Errorf("PutObsAlert(%+v) = %v, want a validation error", bad, err)
		}
	}
	got, err := s.ObsAlerts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	a.CreatedAt, b.CreatedAt, c.CreatedAt = a.CreatedAt.UTC(), b.CreatedAt.UTC(), c.CreatedAt.UTC()
	if diff := cmp.Diff([]store.ObsAlert{b, a, c}, got); diff != "" {
		t.Errorf("ObsAlerts, oldest first then by id (-want +got):\n%s", diff)
	}
	if err := s.DeleteObsAlert(ctx, "ns2", "oa_b"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("delete of another namespace's rule: %v, want ErrNotFound", err)
	}
	if err := s.DeleteObsAlert(ctx, "ns1", "oa_b"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteObsAlert(ctx, "ns1", "oa_b"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("second delete: %v, want ErrNotFound", err)
	}
	if got, _ := s.ObsAlerts(ctx); len(got) != 2 || got[0].ID != "oa_a" || got[1].ID != "oa_0" {
		t.Errorf("after delete: %+v", got)
	}
}

func testPlugins(t *testing.T, s MiscBackend) {
	ctx := t.Context()
	in := func(plugin, ns string, at int64) store.PluginInstall {
		return store.PluginInstall{Plugin: plugin, Namespace: ns, InstalledAt: at, InstalledBy: "token:t1", Config: fmt.Appendf(nil, `{"at":%d}`, at)}
	}
	if err := s.PutPluginInstall(ctx, in("p1", "ns2", 1)); err != nil {
		t.Fatal(err)
	}
	p1 := store.PluginRecord{ID: "p1", Enabled: true, Config: []byte(`{"a": 1}`), UpdatedAt: 5}
	// An existing install is kept as it is; of two for one namespace the
	// first counts.
	if err := s.PutPluginRecord(ctx, p1, []store.PluginInstall{in("p1", "ns2", 2), in("p1", "ns1", 3), in("p1", "ns1", 4)}); err != nil {
		t.Fatal(err)
	}
	p0 := store.PluginRecord{ID: "p0", Config: []byte(`{}`), UpdatedAt: 6}
	if err := s.PutPluginRecord(ctx, p0, nil); err != nil {
		t.Fatal(err)
	}
	p1.Enabled, p1.UpdatedAt = false, 7
	if err := s.PutPluginRecord(ctx, p1, nil); err != nil {
		t.Fatal(err)
	}
	recs, err := s.PluginRecords(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]store.PluginRecord{p0, p1}, recs); diff != "" {
		t.Errorf("PluginRecords, by id (-want +got):\n%s", diff)
	}
	// A bad install refuses the whole put: record and other installs.
	bad := store.PluginRecord{ID: "p1", Enabled: true, Config: []byte(`{"b":2}`), UpdatedAt: 8}
	for _, add := range [][]store.PluginInstall{{in("p1", "ns3", 9), in("p0", "ns3", 9)}, {in("p1", "ns3", 9), {Plugin: "p1", Namespace: "ns4"}}} {
		if err := s.PutPluginRecord(ctx, bad, add); err == nil {
			t.Errorf("PutPluginRecord with installs %+v accepted", add)
		}
	}
	for _, r := range []store.PluginRecord{{Config: []byte(`{}`)}, {ID: "p9"}} {
		if err := s.PutPluginRecord(ctx, r, nil); err == nil {
			t.Errorf("PutPluginRecord(%+v) accepted", r)
		}
	}
	if recs, _ := s.PluginRecords(ctx); len(recs) != 2 || recs[1].UpdatedAt != 7 {
		t.Errorf("a refused put changed the records: %+v", recs)
	}
	// PutPluginInstall replaces.
	if err := s.PutPluginInstall(ctx, in("p0", "ns1", 10)); err != nil {
		t.Fatal(err)
	}
	if err := s.PutPluginInstall(ctx, in("p0", "ns1", 11)); err != nil {
		t.Fatal(err)
	}
	for _, x := range []store.PluginInstall{{Namespace: "n", Config: []byte(`{}`)}, {Plugin: "p", Config: []byte(`{}`)}, {Plugin: "p", Namespace: "n"}} {
		if err := s.PutPluginInstall(ctx, x); err == nil {
			t.Errorf("PutPluginInstall(%+v) accepted", x)
		}
	}
	ins, err := s.PluginInstalls(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]store.PluginInstall{in("p0", "ns1", 11), in("p1", "ns1", 3), in("p1", "ns2", 1)}, ins); diff != "" {
		t.Errorf("PluginInstalls, by plugin and namespace (-want +got):\n%s", diff)
	}
	for range 2 {
		if err := s.DeletePluginInstall(ctx, "p1", "ns1"); err != nil {
			t.Fatalf("DeletePluginInstall: %v", err)
		}
	}
	if ins, _ := s.PluginInstalls(ctx); len(ins) != 2 {
		t.Errorf("after delete: %+v", ins)
	}
}

func testRateLimits(t *testing.T, s MiscBackend) {
	ctx := t.Context()
	for _, id := range []string{"a", "b", "a/x"} {
		if _, err := s.PutDeployment(ctx, store.Deployment{ID: id, Spec: spec(1)}, false, 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.PutRateLimit(ctx, store.RateLimit{Deployment: "nope", RequestsPerSec: 1, Burst: 1, MaxClients: 1}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("put for a missing deployment: %v, want ErrNotFound", err)
	}
	before := time.Now()
	a := store.RateLimit{Deployment: "a", RequestsPerSec: 2.5, Burst: 3, ConcurrentPerClient: 4, MaxClients: 100, UpdatedAt: time.Unix(1, 0)}
	got, err := s.PutRateLimit(ctx, a)
	if err != nil {
		t.Fatalf("put: %+v, %v", got, err)
	}
	within(t, "UpdatedAt", got.UpdatedAt, before, time.Now())
	a.ConcurrentPerClient = 0
	if a, err = s.PutRateLimit(ctx, a); err != nil { // a replace
		t.Fatal(err)
	}
	b, err := s.PutRateLimit(ctx, store.RateLimit{Deployment: "b", ConcurrentPerClient: 1, MaxClients: 65536})
	if err != nil {
		t.Fatal(err)
	}
	ax, err := s.PutRateLimit(ctx, store.RateLimit{Deployment: "a/x", MaxClients: 1})
	if err != nil {
		t.Fatal(err)
	}
	// The limits the SQLite table checks.
	for _, bad := range []store.RateLimit{
		{Deployment: "b", RequestsPerSec: -1, MaxClients: 1},
		{Deployment: "b", Burst: -1, MaxClients: 1},
		{Deployment: "b", ConcurrentPerClient: -1, MaxClients: 1},
		{Deployment: "b", MaxClients: 0},
	} {
		if _, err := s.PutRateLimit(ctx, bad); err == nil || errors.Is(err, store.ErrNotFound) {
			t.Errorf("PutRateLimit(%+v) = %v, want a validation error", bad, err)
		}
	}
	list, err := s.RateLimits(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]store.RateLimit{a, ax, b}, list); diff != "" {
		t.Errorf("list (-want +got):\n%s", diff)
	}
	if err := s.DeleteRateLimit(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteRateLimit(ctx, "b"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("second delete: %v, want ErrNotFound", err)
	}
	// Deleting a deployment deletes its limit; a deployment created
	// again under the same id has none.
	if err := s.DeleteDeployment(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutDeployment(ctx, store.Deployment{ID: "a", Spec: spec(2)}, false, 0); err != nil {
		t.Fatal(err)
	}
	if list, err := s.RateLimits(ctx); err != nil || len(list) != 1 || list[0].Deployment != "a/x" {
		t.Errorf("after deleting and re-creating a: %+v, %v; want only a/x's", list, err)
	}
}

func testSessions(t *testing.T, s MiscBackend) {
	ctx := t.Context()
	t0 := time.Date(2026, 3, 1, 2, 3, 4, 5, time.FixedZone("w", 3600))
	sess := func(id string) store.Session {
		return store.Session{ID: id, SecretSHA256: "sha-" + id, Deployment: "d", Namespace: "ns", Fingerprint: "fp",
			Issuer: "https://idp", Subject: "sub", Email: "e@x", Name: "N", TokenID: "tok1",
			CreatedAt: t0, ExpiresAt: t0.Add(time.Hour), LastSeenAt: t0}
	}
	utc := func(x store.Session) store.Session {
		x.CreatedAt, x.ExpiresAt, x.LastSeenAt = x.CreatedAt.UTC(), x.ExpiresAt.UTC(), x.LastSeenAt.UTC()
		return x
	}
	for _, id := range []string{"s2", "s1", "s3"} {
		if err := s.PutSession(ctx, sess(id)); err != nil {
			t.Fatal(err)
		}
	}
	// A replace changes only the token, last-seen and expiry times.
	r := store.Session{ID: "s2", SecretSHA256: "other", Deployment: "other", Email: "other", TokenID: "tok2",
		CreatedAt: t0.Add(time.Hour), ExpiresAt: t0.Add(2 * time.Hour), LastSeenAt: t0.Add(time.Minute)}
	if err := s.PutSession(ctx, r); err != nil {
		t.Fatal(err)
	}
	s2 := sess("s2")
	s2.TokenID, s2.ExpiresAt, s2.LastSeenAt = r.TokenID, r.ExpiresAt, r.LastSeenAt
	t1 := t0.Add(30 * time.Minute)
	if err := s.TouchSessions(ctx, map[string]time.Time{"s3": t1, "gone": t1}); err != nil {
		t.Fatal(err)
	}
	if err := s.TouchSessions(ctx, nil); err != nil {
		t.Errorf("empty touch: %v", err)
	}
	s3 := sess("s3")
	s3.LastSeenAt = t1
	got, err := s.Sessions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]store.Session{utc(sess("s1")), utc(s2), utc(s3)}, got); diff != "" {
		t.Errorf("Sessions, by id (-want +got):\n%s", diff)
	}
	// A secret's hash is one session's only.
	dup := sess("s4")
	dup.SecretSHA256 = "sha-s1"
	if err := s.PutSession(ctx, dup); err == nil {
		t.Error("a new session with another's secret hash was accepted")
	}
	if err := s.DeleteSessions(ctx, []string{"s1", "s3", "s1", "gone"}); err != nil {
		t.Fatal(err)
	}
	// ... until that session is deleted.
	if err := s.PutSession(ctx, dup); err != nil {
		t.Errorf("a new session with a deleted session's secret hash: %v", err)
	}
	if err := s.DeleteSessions(ctx, []string{"s4"}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteSessions(ctx, nil); err != nil {
		t.Errorf("empty delete: %v", err)
	}
	if got, err := s.Sessions(ctx); err != nil || len(got) != 1 || got[0].ID != "s2" {
		t.Errorf("after delete: %+v, %v", got, err)
	}
}

// testConcurrentSessionTouch: a touch racing a replace of the same
// session never undoes the replace's token, and leaves one of the two
// last-seen times.
func testConcurrentSessionTouch(t *testing.T, s MiscBackend) {
	ctx := t.Context()
	t0 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	for round := range 5 {
		id := fmt.Sprintf("s%d", round)
		if err := s.PutSession(ctx, store.Session{ID: id, SecretSHA256: "h" + id, TokenID: "old", CreatedAt: t0, ExpiresAt: t0.Add(time.Hour), LastSeenAt: t0}); err != nil {
			t.Fatal(err)
		}
		putAt, touchAt := t0.Add(time.Minute), t0.Add(2*time.Minute)
		errs := race(2, func(i int) error {
			if i == 0 {
				return s.PutSession(ctx, store.Session{ID: id, SecretSHA256: "h" + id, TokenID: "new", CreatedAt: t0, ExpiresAt: t0.Add(time.Hour), LastSeenAt: putAt})
			}
			return s.TouchSessions(ctx, map[string]time.Time{id: touchAt})
		})
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		got, err := s.Sessions(ctx)
		if err != nil {
			t.Fatal(err)
		}
		x := got[len(got)-1]
		if x.ID != id || x.TokenID != "new" || !(x.LastSeenAt.Equal(putAt) || x.LastSeenAt.Equal(touchAt)) {
			t.Errorf("round %d: session %+v; want token new, last seen %v or %v", round, x, putAt, touchAt)
		}
	}
}

func testWebhooks(t *testing.T, s MiscBackend) {
	ctx := t.Context()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	a := store.Webhook{ID: "wh_a", Sealed: []byte{1, 2, 3}, MinSeverity: "high", Note: "pager", CreatedAt: t0}
	b := store.Webhook{ID: "wh_b", Sealed: []byte{4}, MinSeverity: "info", CreatedAt: t0.Add(time.Second)}
	c := store.Webhook{ID: "wh_0", Sealed: []byte{5}, CreatedAt: t0.Add(time.Second),
		WebhookCounts: store.WebhookCounts{Delivered: 7, LastError: "old", LastDeliveryAt: t0}}
	for _, w := range []store.Webhook{a, b, c} {
		if err := s.PutWebhook(ctx, w); err != nil {
			t.Fatalf("PutWebhook(%s): %v", w.ID, err)
		}
	}
	if err := s.PutWebhook(ctx, a); !errors.Is(err, store.ErrConflict) {
		t.Errorf("PutWebhook of an existing id: %v, want ErrConflict", err)
	}
	for _, bad := range []store.Webhook{{Sealed: []byte{1}}, {ID: "x"}} {
		if err := s.PutWebhook(ctx, bad); err == nil || errors.Is(err, store.ErrConflict) {
			t.Errorf("PutWebhook(%+v) = %v, want a validation error", bad, err)
		}
	}
	// A failure, then (in another batch) a delivery that clears the error;
	// a delta for a deleted webhook is dropped; a new error wins over a
	// clear.
	if err := s.AddWebhookCounts(ctx, map[string]store.WebhookCounts{
		"wh_a": {Failed: 2, DeadLettered: 1, LastError: "HTTP 500"},
		"gone": {Delivered: 1},
	}); err != nil {
		t.Fatal(err)
	}
	t1 := t0.Add(time.Minute)
	if err := s.AddWebhookCounts(ctx, map[string]store.WebhookCounts{
		"wh_a": {Delivered: 3, ClearError: true, LastDeliveryAt: t1},
		"wh_b": {Failed: 1, LastError: "connection refused"},
		"wh_0": {Failed: 1, LastError: "new", ClearError: true},
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.AddWebhookCounts(ctx, nil); err != nil {
		t.Errorf("empty counts: %v", err)
	}
	a.WebhookCounts = store.WebhookCounts{Delivered: 3, Failed: 2, DeadLettered: 1, LastDeliveryAt: t1}
	b.WebhookCounts = store.WebhookCounts{Failed: 1, LastError: "connection refused"}
	c.WebhookCounts = store.WebhookCounts{Delivered: 7, Failed: 1, LastError: "new", LastDeliveryAt: t0}
	got, err := s.Webhooks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]store.Webhook{a, c, b}, got); d != "" {
		t.Errorf("Webhooks, oldest first then by id (-want +got):\n%s", d)
	}
	if err := s.DeleteWebhook(ctx, "wh_a"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteWebhook(ctx, "wh_a"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("DeleteWebhook again: %v, want ErrNotFound", err)
	}
	if got, _ := s.Webhooks(ctx); len(got) != 2 || got[0].ID != "wh_0" || got[1].ID != "wh_b" {
		t.Errorf("after delete: %+v", got)
	}
}

// testConcurrentWebhookCounts: concurrent deltas all add up.
func testConcurrentWebhookCounts(t *testing.T, s MiscBackend) {
	ctx := t.Context()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	for _, id := range []string{"w1", "w2"} {
		if err := s.PutWebhook(ctx, store.Webhook{ID: id, Sealed: []byte{1}, CreatedAt: t0}); err != nil {
			t.Fatal(err)
		}
	}
	const writers, batches = 4, 10
	errs := race(writers, func(w int) error {
		for range batches {
			if err := s.AddWebhookCounts(ctx, map[string]store.WebhookCounts{"w1": {Delivered: 1}, "w2": {Failed: 2, DeadLettered: 1}}); err != nil {
				return err
			}
		}
		return nil
	})
	for _, err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	got, err := s.Webhooks(ctx)
	if err != nil || len(got) != 2 {
		t.Fatalf("Webhooks = %+v, %v", got, err)
	}
	const n = writers * batches
	if got[0].Delivered != n || got[1].Failed != 2*n || got[1].DeadLettered != n {
		t.Errorf("after %d concurrent batches: %+v, %+v; want delivered %d, failed %d, dead-lettered %d", n, got[0].WebhookCounts, got[1].WebhookCounts, n, 2*n, n)
	}
}

// testMiscManyKeys: writes over more keys than one etcd transaction takes
// (128 operations) do all of it: touching and deleting 300 sessions,
// adding 200 plugin installs, pruning 200 disk archives at once.
func testMiscManyKeys(t *testing.T, s MiscBackend) {
	ctx := t.Context()
	t0 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	const n = 300
	seen := map[string]time.Time{}
	var ids []string
	for i := range n {
		id := fmt.Sprintf("s%03d", i)
		if err := s.PutSession(ctx, store.Session{ID: id, SecretSHA256: "h" + id, CreatedAt: t0, ExpiresAt: t0, LastSeenAt: t0}); err != nil {
			t.Fatal(err)
		}
		seen[id] = t0.Add(time.Duration(i) * time.Second)
		ids = append(ids, id)
	}
	if err := s.TouchSessions(ctx, seen); err != nil {
		t.Fatalf("TouchSessions of %d: %v", n, err)
	}
	got, err := s.Sessions(ctx)
	if err != nil || len(got) != n {
		t.Fatalf("Sessions: %d, %v", len(got), err)
	}
	for _, x := range got {
		if !x.LastSeenAt.Equal(seen[x.ID]) {
			t.Errorf("session %s last seen %v, want %v", x.ID, x.LastSeenAt, seen[x.ID])
		}
	}
	if err := s.DeleteSessions(ctx, ids[:n-1]); err != nil {
		t.Fatalf("DeleteSessions of %d: %v", n-1, err)
	}
	if got, err := s.Sessions(ctx); err != nil || len(got) != 1 || got[0].ID != ids[n-1] {
		t.Errorf("after deleting all but one: %d sessions, %v", len(got), err)
	}

	var add []store.PluginInstall
	for i := range 200 {
		add = append(add, store.PluginInstall{Plugin: "p", Namespace: fmt.Sprintf("ns%03d", i), Config: []byte(`{}`)})
	}
	if err := s.PutPluginRecord(ctx, store.PluginRecord{ID: "p", Config: []byte(`{}`)}, add); err != nil {
		t.Fatalf("PutPluginRecord with %d installs: %v", len(add), err)
	}
	if ins, err := s.PluginInstalls(ctx); err != nil || len(ins) != len(add) {
		t.Errorf("PluginInstalls: %d, %v; want %d", len(ins), err, len(add))
	}

	for i := range 200 {
		if err := s.PutDiskArchive(ctx, store.DiskArchive{ID: fmt.Sprintf("a%03d", i), StartedAt: int64(i), View: []byte(`{}`)}, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.PutDiskArchive(ctx, store.DiskArchive{ID: "last", StartedAt: 1000, View: []byte(`{}`)}, 2); err != nil {
		t.Fatalf("PutDiskArchive pruning 199: %v", err)
	}
	if as, err := s.DiskArchives(ctx); err != nil || len(as) != 2 || as[0].ID != "last" || as[1].ID != "a199" {
		t.Errorf("after pruning to 2: %d archives, %v; want last, a199", len(as), err)
	}
}
