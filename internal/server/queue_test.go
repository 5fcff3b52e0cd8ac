package server

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/berth-dev/berth/apitype"
)

// TestEditDuringPullIsQueued: an edit whose automatic pull is refused
// because the deployment's pull is still running is not dropped: one pull
// is queued (however many edits want it) and starts, for the deployment as
// edited, when the running one ends.
func TestEditDuringPullIsQueued(t *testing.T) {
	v1 := tarball(t, "", map[string]string{"index.html": "one"})
	v2 := tarball(t, "", map[string]string{"index.html": "two"})
	d1, d2 := fmt.Sprintf("%x", sha256.Sum256(v1)), fmt.Sprintf("%x", sha256.Sum256(v2))
	fetching, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	store := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/tags/v1":
			fmt.Fprint(w, d1)
		case "/tags/v2":
			fmt.Fprint(w, d2)
		case "/blobs/" + d1:
			// The first pull hangs until the test has edited twice, then
			// fails: the site still has no bundle when it ends.
			once.Do(func() { close(fetching) })
			<-release
			http.Error(w, "gone", http.StatusInternalServerError)
		case "/blobs/" + d2:
			w.Write(v2)
		default:
			http.NotFound(w, r)
		}
	}))
	defer store.Close()
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()
	h := startWith(t, "", func(o *Options) { o.ArtifactAllowPrivate = true })
	spec := func(ref, host string) string {
		return fmt.Sprintf(`{"id":"docs","routes":[{"host":%q}],"site":{"root":""},"artifact":{"store":%q,"ref":%q}}`, host, store.URL, ref)
	}
	if r := h.json("POST", "/deployments", spec("v1", "docs.test")); r.code != 201 {
		t.Fatalf("register: %d %s", r.code, r.body)
	}
	<-fetching
	for _, host := range []string{"docs.test", "docs2.test"} {
		if r := h.json("PUT", "/deployments/docs", spec("v2", host)); r.code != 200 {
			t.Fatalf("edit: %d %s", r.code, r.body)
		}
	}
	h.s.queued.mu.Lock()
	n := len(h.s.queued.wanted)
	h.s.queued.mu.Unlock()
	if !h.s.queued.queued("docs", apitype.JobArtifactPull) || n != 1 {
		t.Fatalf("queued after two edits during the pull: %d, want the one artifact pull", n)
	}
	ids := h.jobIDs("docs")
	if len(ids) != 1 {
		t.Fatalf("jobs while the first runs: %v, want 1", ids)
	}
	close(release)
	released = true
	// The first job by its id: the queued one may have ended too by the
	// time the list is read.
	var first apitype.JobRecord
	waitFor(t, "the first pull to end", func() bool {
		r := h.do("GET", "/jobs/"+ids[0], "", "")
		return r.code == 200 && json.Unmarshal(r.body, &first) == nil && first.Status != apitype.JobRunning
	})
	if first.Status != apitype.JobFailed {
		t.Fatalf("the first pull: %+v", first)
	}
	second := h.awaitJob("docs", apitype.JobArtifactPull, first.ID)
	if second.Status != apitype.JobSucceeded || second.Digest != d2 {
		t.Fatalf("the queued pull: %+v", second)
	}
	if r := get(t, h.proxy+"/", "docs2.test"); r.code != 200 || string(r.body) != "two" {
		t.Errorf("after the queued pull the site served %d %q", r.code, r.body)
	}
	if ids := h.jobIDs("docs"); len(ids) != 2 {
		t.Errorf("jobs: %v, want the first and the one queued", ids)
	}
	if h.s.queued.queued("docs", apitype.JobArtifactPull) {
		t.Error("still queued after it ran")
	}
}
