package computerapi

import (
	"context"
	"encoding/json"
	"github.com/berth-dev/berth/apitype/computertype"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/computer"
	"github.com/berth-dev/berth/internal/grant"
)

func TestLifecycle(t *testing.T) {
	e := newEnv(t)
	v := e.create("life")
	if v.ID != "life" || v.Namespace != "default" || v.State.State == "" || v.CreatedAt == 0 {
		t.Errorf("created %+v", v)
	}
	if code, _ := e.do(operator, "POST", "/computers", computertype.NewComputer{ID: "life"}); code != http.StatusConflict {
		t.Errorf("creating a taken id = %d, want 409", code)
	}
	if code, _ := e.do(operator, "POST", "/computers", computertype.NewComputer{ID: "bad", Backings: []computer.Backing{{Kind: "mainframe"}}}); code != http.StatusBadRequest {
		t.Errorf("creating with an unknown backing = %d, want 400", code)
	}
	anon := decode[computertype.Computer](t, e.must(operator, 201, "POST", "/computers", computertype.NewComputer{Backings: []computer.Backing{{Kind: "process"}}}))
	if anon.ID == "" {
		t.Error("a Computer created without an id got none")
	}
	list := decode[computertype.ComputerList](t, e.must(operator, 200, "GET", "/computers", nil))
	if len(list.Computers) != 2 {
		t.Errorf("list = %+v, want 2 Computers", list)
	}

	_, g := e.grant("life", grant.Start, grant.Stop, grant.Backing, grant.Exec, grant.FilesWrite, grant.FilesRead)
	started := decode[computertype.Computer](t, e.must(g, 200, "POST", "/computers/life/start", nil))
	if started.State.State != "running" || started.Active == nil {
		t.Errorf("after start: %+v", started)
	}
	e.must(g, 200, "POST", "/computers/life/files/write", computertype.WriteRequest{Path: "keep.txt", Content: "kept"})
	stopped := decode[computertype.Computer](t, e.must(g, 200, "POST", "/computers/life/stop", nil))
	if stopped.State.State != "sleeping" || stopped.Active != nil {
		t.Errorf("after stop: %+v", stopped)
	}
	// Any operation wakes it, with the workspace intact.
	r := decode[computertype.ReadResult](t, e.must(g, 200, "POST", "/computers/life/files/read", computertype.ReadRequest{Path: "keep.txt"}))
	if r.Content != "kept" {
		t.Errorf("after sleep and wake keep.txt = %q", r.Content)
	}
	got := decode[computertype.Computer](t, e.must(g, 200, "GET", "/computers/life", nil))
	if got.State.State != "running" {
		t.Errorf("after use: %+v", got.State)
	}

	b := decode[computertype.Backings](t, e.must(g, 200, "GET", "/computers/life/backings", nil))
	if len(b.Backings) != 1 || b.Backings[0].Kind != "process" {
		t.Errorf("backings = %+v", b)
	}
	for _, tc := range []struct {
		body string
		want int
	}{
		{`{}`, 400},
		{`{"computerId":"other","backings":[]}`, 400},
		{`{"backings":[{"kind":"process"},{"kind":"process"}]}`, 400},
		{`{"computerId":"life","backings":[{"kind":"process"}]}`, 200},
	} {
		if code, body := e.do(g, "PUT", "/computers/life/backings", tc.body); code != tc.want {
			t.Errorf("PUT backings %s = %d %s, want %d", tc.body, code, body, tc.want)
		}
	}

	// Lifecycle facts are the manager's; they show in the log.
	if len(e.factsOfKind("life", computer.FactLifecycle)) == 0 {
		t.Error("no lifecycle facts")
	}
	e.must(operator, 204, "DELETE", "/computers/life", nil)
	e.must(operator, 404, "GET", "/computers/life", nil)
}

func TestGrantRoutes(t *testing.T) {
	e := newEnv(t)
	e.create("gr")
	for _, tc := range []struct {
		name string
		body string
		want int
	}{
		{"no expiry", `{"actions":["exec"]}`, 400},
		{"both expiries", `{"actions":["exec"],"expiresAt":1,"expiresInSecs":60}`, 400},
		{"past", `{"actions":["exec"],"expiresAt":1000}`, 400},
		{"no actions", `{"actions":[],"expiresInSecs":60}`, 400},
		{"unknown action", `{"actions":["sudo"],"expiresInSecs":60}`, 400},
		{"bad egress", `{"actions":["exec"],"expiresInSecs":60,"egress":"all"}`, 400},
		{"no actor", `{"actions":["exec"],"expiresInSecs":60,"provenance":{"actor":""}}`, 400},
		{"actions not a list", `{"actions":"exec","expiresInSecs":60}`, 422},
	} {
		if code, b := e.do(operator, "POST", "/computers/gr/grants", tc.body); code != tc.want {
			t.Errorf("%s: %d %s, want %d", tc.name, code, b, tc.want)
		}
	}
	exp := e.clock.now().Add(time.Hour).UnixMilli()
	resp := e.send(operator, "POST", "/computers/gr/grants", `{"actions":["files.read","exec"],"expiresAt":`+strconv.FormatInt(exp, 10)+`,"egress":{"allow":["example.com"]}}`, nil)
	b := readAllStatus(t, resp, 201)
	if resp.Header.Get("Cache-Control") != "no-store" {
		t.Error("the grant answer may be cached")
	}
	var raw map[string]json.RawMessage
	json.Unmarshal(b, &raw)
	// The grant is exactly the contract's shape.
	var shape map[string]any
	json.Unmarshal(raw["grant"], &shape)
	want := map[string]any{
		"computerId": "gr", "actions": []any{"exec", "files.read"}, "expiresAt": float64(exp),
		"egress": map[string]any{"allow": []any{"example.com"}}, "provenance": map[string]any{"actor": "operator"},
	}
	if d := diffJSON(want, shape); d != "" {
		t.Errorf("grant shape: %s", d)
	}
	g := decode[computertype.Grant](t, b)
	list := decode[computertype.GrantList](t, e.must(operator, 200, "GET", "/computers/gr/grants", nil))
	if len(list.Grants) != 1 || list.Grants[0].ID != g.ID || list.Grants[0].Token != "" || list.Grants[0].RevokedAt != nil {
		t.Errorf("grant list = %+v", list)
	}
	e.must(operator, 204, "DELETE", "/computers/gr/grants/"+g.ID, nil)
	e.must(operator, 204, "DELETE", "/computers/gr/grants/"+g.ID, nil) // idempotent
	e.must(operator, 404, "DELETE", "/computers/gr/grants/nope", nil)
	list = decode[computertype.GrantList](t, e.must(operator, 200, "GET", "/computers/gr/grants", nil))
	if len(list.Grants) != 1 || list.Grants[0].RevokedAt == nil {
		t.Errorf("after revoke: %+v", list)
	}
	e.must(operator, 404, "POST", "/computers/nope/grants", `{"actions":["exec"],"expiresInSecs":60}`)
}

func diffJSON(want, got map[string]any) string {
	a, _ := json.Marshal(want)
	b, _ := json.Marshal(got)
	if string(a) != string(b) {
		return "got " + string(b) + ", want " + string(a)
	}
	return ""
}

func readAllStatus(t *testing.T, resp *http.Response, want int) []byte {
	t.Helper()
	defer resp.Body.Close()
	var b json.RawMessage
	json.NewDecoder(resp.Body).Decode(&b)
	if resp.StatusCode != want {
		t.Fatalf("%d %s, want %d", resp.StatusCode, b, want)
	}
	return b
}

func TestPortsAndUsage(t *testing.T) {
	e := newEnv(t)
	e.create("pt")
	_, g := e.grant("pt", grant.ExposePort, grant.ListPorts, grant.UnexposePort)
	p := decode[computertype.Port](t, e.must(g, 201, "POST", "/computers/pt/ports", computertype.PortRequest{Port: 3000, Public: true}))
	if p.Port != 3000 || !p.Public || p.Host == "" || p.URL == "" {
		t.Errorf("exposed %+v", p)
	}
	for _, bad := range []int{0, -1, 65536} {
		if code, _ := e.do(g, "POST", "/computers/pt/ports", computertype.PortRequest{Port: bad}); code != 400 {
			t.Errorf("port %d = %d, want 400", bad, code)
		}
	}
	ps := decode[computertype.PortList](t, e.must(g, 200, "GET", "/computers/pt/ports", nil))
	if len(ps.Ports) != 1 || ps.Ports[0] != p {
		t.Errorf("ports = %+v", ps)
	}
	e.must(g, 204, "DELETE", "/computers/pt/ports/3000", nil)
	e.must(g, 204, "DELETE", "/computers/pt/ports/3000", nil) // idempotent
	if ps := decode[computertype.PortList](t, e.must(g, 200, "GET", "/computers/pt/ports", nil)); len(ps.Ports) != 0 {
		t.Errorf("ports after unexpose = %+v", ps)
	}
	e.must(g, 400, "DELETE", "/computers/pt/ports/http", nil)

	u := decode[computertype.PendingUsage](t, e.must(operator, 200, "GET", "/computers/usage/pending", nil))
	if u.Intervals == nil {
		t.Error("pending usage has no intervals list")
	}
	// The pending interval facts go back as they came.
	e.must(operator, 204, "POST", "/computers/usage/acknowledge", u)
	e.must(operator, 400, "POST", "/computers/usage/acknowledge", `{}`)
}

func TestFactsStream(t *testing.T) {
	e := newEnv(t)
	e.create("fx")
	_, g := e.grant("fx", grant.FilesWrite)
	for i := range 3 {
		e.must(g, 200, "POST", "/computers/fx/files/write", computertype.WriteRequest{Path: "f" + strconv.Itoa(i), Content: "x"})
	}
	all := e.facts("fx", 0).Facts
	var written []computertype.FactRecord
	for _, f := range all {
		if f.Fact.Kind == computer.FactFilesWritten {
			written = append(written, f)
		}
	}
	if len(written) != 3 {
		t.Fatalf("facts = %+v, want 3 files.written", all)
	}
	// JSON pages resume after a cursor.
	page := decode[computertype.FactsPage](t, e.must(operator, 200, "GET", "/computers/fx/facts?after="+strconv.FormatInt(written[0].Seq, 10)+"&limit=1", nil))
	if len(page.Facts) != 1 || page.Facts[0].Seq <= written[0].Seq || page.Next != page.Facts[0].Seq {
		t.Errorf("page after %d = %+v", written[0].Seq, page)
	}
	e.must(operator, 400, "GET", "/computers/fx/facts?after=-1", nil)
	e.must(operator, 400, "GET", "/computers/fx/facts?limit=100000", nil)

	// SSE from Last-Event-ID: the facts after it, then new ones live.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", e.srv.URL+"/computers/fx/facts", nil)
	req.SetBasicAuth(opUser, opPass)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Last-Event-ID", strconv.FormatInt(written[1].Seq, 10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("content type %q", resp.Header.Get("Content-Type"))
	}
	var after []computertype.FactRecord
	for _, f := range all {
		if f.Seq > written[1].Seq {
			after = append(after, f)
		}
	}
	evs := readSSE(t, resp.Body, len(after))
	for i, ev := range evs {
		if ev.id != strconv.FormatInt(after[i].Seq, 10) || ev.event != after[i].Fact.Kind {
			t.Errorf("event %d = %+v, want seq %d kind %s", i, ev, after[i].Seq, after[i].Fact.Kind)
		}
	}
	// A new fact arrives on the open stream.
	e.must(g, 200, "POST", "/computers/fx/files/write", computertype.WriteRequest{Path: "live", Content: "x"})
	ev := readSSE(t, resp.Body, 1)[0]
	var f map[string]any
	json.Unmarshal([]byte(ev.data), &f)
	if ev.event != "files.written" || f["path"] != "/live" || f["computerId"] != "fx" {
		t.Errorf("live event = %+v", ev)
	}
	seq, _ := strconv.ParseInt(ev.id, 10, 64)
	if seq <= after[len(after)-1].Seq {
		t.Errorf("live event id %d does not follow %d", seq, after[len(after)-1].Seq)
	}
}
