package server

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/berth-dev/berth/apitype/computertype"
	"github.com/berth-dev/berth/internal/computer"
	"github.com/berth-dev/berth/internal/fleet/hop"
)

// adminDo sends method path body to s's admin API and returns the status
// and the body.
func adminDo(t *testing.T, s *Server, method, path, body string, hdr ...string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+s.AdminAddr()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := (&http.Client{Timeout: 2 * time.Minute}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

func listIDs(t *testing.T, s *Server) []string {
	t.Helper()
	code, body, _ := adminDo(t, s, "GET", "/computers", "")
	if code != 200 {
		t.Fatalf("GET /computers: %d %s", code, body)
	}
	var l computertype.ComputerList
	if err := json.Unmarshal([]byte(body), &l); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, c := range l.Computers {
		ids = append(ids, c.ID)
	}
	return ids
}

// TestFleetComputersAcrossHosts: two hosts of a fleet with hop listeners
// (alpha, beta; real etcd, real processes). A Computer created through
// alpha with on-box-vm {hostId: beta} lives on beta (beta's manager has
// it, alpha's does not); GET, exec, file bytes both ways, a grant and the
// terminal websocket with it, and delete through alpha reach it there; a
// Computer whose host is gone is a 503 with Retry-After; its id is the fleet's: creating it again through either host is
// a 409, and of two concurrent creates of one id exactly one wins; the
// list through either host has both hosts' Computers; a hostId naming no
// host of the fleet is a 422 naming the field; and the hop's admin marker
// sent to alpha's public proxy reaches the data plane, not an admin API.
func TestFleetComputersAcrossHosts(t *testing.T) {
	skipShort(t, "two fleet hosts with hop listeners and Computers")
	// An interactive bash may take seconds to start on a busy machine.
	t.Setenv("SHELL", "/bin/sh")
	p := startHopPair(t)
	ctx := context.Background()

	code, body, _ := adminDo(t, p.a, "POST", "/computers", `{"id":"desk","backings":[{"kind":"on-box-vm","hostId":"beta"},{"kind":"process"}],"start":true}`)
	if code != 201 {
		t.Fatalf("create through alpha for beta: %d %s", code, body)
	}
	if c, err := p.b.computers.Get(ctx, "desk"); err != nil || c.State.State != computer.StateRunning {
		t.Fatalf("beta's manager: %+v, %v; want desk running", c, err)
	}
	if _, err := p.a.computers.Get(ctx, "desk"); !errors.Is(err, computer.ErrNotFound) {
		t.Fatalf("alpha's manager: %v; want no desk", err)
	}

	code, body, _ = adminDo(t, p.a, "GET", "/computers/desk", "")
	var got computertype.Computer
	if code != 200 || json.Unmarshal([]byte(body), &got) != nil || got.ID != "desk" || got.State.State != computer.StateRunning {
		t.Fatalf("GET through alpha: %d %s", code, body)
	}
	code, body, _ = adminDo(t, p.a, "POST", "/computers/desk/exec", `{"argv":["true"]}`)
	var res computertype.ExecResult
	if code != 200 || json.Unmarshal([]byte(body), &res) != nil || res.ExitCode != 0 || res.RequestID == "" {
		t.Fatalf("exec through alpha: %d %s", code, body)
	}

	// Bytes both ways through alpha.
	payload := strings.Repeat("berth\x00\xff", 100000)
	if code, body, _ = adminDo(t, p.a, "PUT", "/computers/desk/files/writeBytes?path=blob.bin", payload); code/100 != 2 {
		t.Fatalf("writeBytes through alpha: %d %s", code, body)
	}
	if code, body, _ = adminDo(t, p.a, "GET", "/computers/desk/files/readBytes?path=blob.bin", ""); code != 200 || body != payload {
		t.Fatalf("readBytes through alpha: %d, %d bytes; want the %d written", code, len(body), len(payload))
	}
	if b, err := os.ReadFile(filepath.Join(p.b.computers.Workspace("desk"), "blob.bin")); err != nil || string(b) != payload {
		t.Fatalf("blob.bin in beta's workspace: %d bytes, %v", len(b), err)
	}

	// A grant issued through alpha (by beta, which holds desk) opens
	// desk's terminal, a websocket, through alpha.
	code, body, _ = adminDo(t, p.a, "POST", "/computers/desk/grants", `{"actions":["terminal"],"expiresInSecs":600}`)
	var g computertype.Grant
	if code != 201 || json.Unmarshal([]byte(body), &g) != nil || g.Token == "" {
		t.Fatalf("grant through alpha: %d %s", code, body)
	}
	wctx, wcancel := context.WithTimeout(ctx, time.Minute)
	defer wcancel()
	conn, _, err := websocket.Dial(wctx, "ws://"+p.a.AdminAddr()+"/computers/desk/terminal?cols=100&rows=30&grant="+g.Token, nil)
	if err != nil {
		t.Fatalf("terminal through alpha: %v", err)
	}
	defer conn.CloseNow()
	if _, msg, err := conn.Read(wctx); err != nil || !strings.Contains(string(msg), `"ready"`) {
		t.Fatalf("terminal's first message %s, %v", msg, err)
	}
	if err := conn.Write(wctx, websocket.MessageBinary, append([]byte{1}, "echo on-$((6*7)); exit 5\n"...)); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for {
		typ, msg, err := conn.Read(wctx)
		if err != nil {
			t.Fatalf("reading the terminal: %v (output so far %q)", err, out.String())
		}
		if typ == websocket.MessageBinary && len(msg) > 0 && msg[0] == 2 {
			out.Write(msg[1:])
			continue
		}
		var m struct {
			Type string
			Code *int
		}
		json.Unmarshal(msg, &m)
		if m.Type != "exit" || m.Code == nil || *m.Code != 5 {
			t.Fatalf("terminal's last message %s, want exit 5", msg)
		}
		break
	}
	conn.Close(websocket.StatusNormalClosure, "")
	if !strings.Contains(out.String(), "on-42") {
		t.Errorf("terminal output through alpha %q", out.String())
	}

	// The id is the fleet's.
	for _, s := range []*Server{p.a, p.b} {
		code, body, _ = adminDo(t, s, "POST", "/computers", `{"id":"desk","backings":[{"kind":"process"}]}`)
		if code != 409 || !strings.Contains(body, `Computer \"desk\" already exists`) {
			t.Errorf("desk again through %s: %d %s; want today's 409", s.fleetHost.m.ID(), code, body)
		}
	}
	for round := range 3 {
		id := "race" + string(rune('0'+round))
		codes := make([]int, 2)
		var wg sync.WaitGroup
		for i, s := range []*Server{p.a, p.b} {
			wg.Go(func() {
				codes[i], _, _ = adminDo(t, s, "POST", "/computers", `{"id":"`+id+`","backings":[{"kind":"process"}]}`)
			})
		}
		wg.Wait()
		slices.Sort(codes)
		if codes[0] != 201 || codes[1] != 409 {
			t.Errorf("concurrent creates of %s: %v; want one 201 and one 409", id, codes)
		}
	}

	// Lists: both hosts' Computers through either.
	if code, body, _ = adminDo(t, p.a, "POST", "/computers", `{"id":"home","backings":[{"kind":"process"}]}`); code != 201 {
		t.Fatalf("create home on alpha: %d %s", code, body)
	}
	want := []string{"desk", "home", "race0", "race1", "race2"}
	for _, s := range []*Server{p.a, p.b} {
		if ids := listIDs(t, s); !slices.Equal(ids, want) {
			t.Errorf("list through %s: %v; want %v", s.fleetHost.m.ID(), ids, want)
		}
	}
	if ids, _ := p.a.computers.List(ctx, ""); slices.ContainsFunc(ids, func(c computer.Computer) bool { return c.ID == "desk" }) {
		t.Errorf("alpha's own list holds desk")
	}

	// A Computer does not move between hosts.
	code, body, _ = adminDo(t, p.a, "PUT", "/computers/home/backings", `{"backings":[{"kind":"on-box-vm","hostId":"beta"}]}`)
	if code != 422 || !strings.Contains(body, "backings[0].hostId") {
		t.Errorf("home's backings onto beta: %d %s; want 422 naming backings[0].hostId", code, body)
	}

	// A hostId that names no fleet host.
	code, body, _ = adminDo(t, p.a, "POST", "/computers", `{"id":"nowhere","backings":[{"kind":"on-box-vm","hostId":"gamma"}]}`)
	if code != 422 || !strings.Contains(body, "backings[0].hostId") {
		t.Errorf("hostId gamma: %d %s; want 422 naming backings[0].hostId", code, body)
	}
	if _, ok, _ := p.a.fleetHost.m.ComputerHost(ctx, "nowhere"); ok {
		t.Errorf("a refused create left a claim")
	}

	// The admin marker on the public proxy is the data plane's.
	for _, host := range []string{"api.test", "nosuch.test"} {
		req, _ := http.NewRequest("GET", "http://"+p.a.ProxyAddr()+"/computers", nil)
		req.Host = host
		req.Header.Set(hop.AdminHeader, "alpha")
		req.Header.Set(hop.UngatedHeader, "1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(b), `"computers"`) {
			t.Errorf("marked request to alpha's proxy for %s answered by an admin API: %d %s", host, resp.StatusCode, b)
		}
		if host == "api.test" && (resp.StatusCode != 200 || string(b) != "api at beta for api.test") {
			t.Errorf("marked request to alpha's proxy: %d %q; want beta's app", resp.StatusCode, b)
		}
	}

	// A Computer whose host is not in the fleet now: 503, Retry-After.
	if _, err := p.a.fleetHost.cli.Put(ctx, p.a.fleetPrefix()+"computerhosts/ghost", `{"host":"gamma"}`); err != nil {
		t.Fatal(err)
	}
	code, body, hdr := adminDo(t, p.a, "GET", "/computers/ghost", "")
	if code != 503 || hdr.Get("Retry-After") == "" || !strings.Contains(body, "host gamma is unreachable") {
		t.Errorf("a Computer of a host that is down: %d Retry-After %q %s", code, hdr.Get("Retry-After"), body)
	}

	// Delete through alpha: gone from beta, and its id free again.
	if code, body, _ = adminDo(t, p.a, "DELETE", "/computers/desk", ""); code != 204 {
		t.Fatalf("delete through alpha: %d %s", code, body)
	}
	if _, err := p.b.computers.Get(ctx, "desk"); !errors.Is(err, computer.ErrNotFound) {
		t.Errorf("beta after the delete: %v", err)
	}
	if code, body, _ = adminDo(t, p.a, "POST", "/computers", `{"id":"desk","backings":[{"kind":"process"}]}`); code != 201 {
		t.Errorf("desk after its delete, on alpha: %d %s", code, body)
	}
	if code, body, _ = adminDo(t, p.b, "GET", "/computers/desk", ""); code != 200 || !strings.Contains(body, `"desk"`) {
		t.Errorf("the new desk through beta: %d %s", code, body)
	}
}

// TestHopUngated: a host without an operator password admits a caller
// without a credential over the hop only from a host without one either;
// a credential always goes on to the gate, and a gated host's gate
// decides everything itself.
func TestHopUngated(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(hop.UngatedHeader) != "" {
			t.Errorf("the ungated marker reached the API")
		}
		w.WriteHeader(299)
	})
	for _, c := range []struct {
		gated bool
		hdr   map[string]string
		query string
		want  int
	}{
		{false, nil, "", 401},
		{false, map[string]string{hop.UngatedHeader: "1"}, "", 299},
		{false, map[string]string{"Authorization": "Bearer bat_x"}, "", 299},
		{false, nil, "?grant=bcg_x", 299},
		{true, nil, "", 299},
	} {
		req, _ := http.NewRequest("GET", "http://h/computers/x"+c.query, nil)
		for k, v := range c.hdr {
			req.Header.Set(k, v)
		}
		w := &bufferedResponse{header: http.Header{}}
		hopUngated(c.gated, ok).ServeHTTP(w, req)
		if w.code != c.want {
			t.Errorf("gated %v, %v %q: %d %s; want %d", c.gated, c.hdr, c.query, w.code, w.body.String(), c.want)
		}
	}
}
