package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/fleet/etcdtest"
	"github.com/berth-dev/berth/internal/fleet/fleetnet"
)

// get sends a GET for host through h's gateway: the status and body.
func (h *fleetHost) get(host string) (int, string) {
	req, _ := http.NewRequest("GET", h.proxy+"/", nil)
	req.Host = host
	resp, err := h.client.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// load sends requests with req, one after another, on a goroutine of wg
// until stop is closed.
func load(wg *sync.WaitGroup, stop <-chan struct{}, req func()) {
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			req()
		}
	})
}

// TestFleetSharedStore runs three berths, each in a network namespace of
// its own, on one store on a 3-member etcd cluster (--store etcd://):
//   - a deployment written through one host is routed by every host; a
//     change of it through another host, and its deletion through a third,
//     reach every host;
//   - a token minted through one host is accepted by the others, until it
//     is revoked through one of them;
//   - a host's Computers are its own: the others, which have no hop
//     listener to reach it through, do not list them;
//   - kill -9 of one host's berth, under continuous load through the other
//     two gateways, costs no request; the killed host comes back with the
//     shared deployments.
func TestFleetSharedStore(t *testing.T) {
	nt := fleetnet.New(t, 3)
	etcd := etcdtest.Start(t, 3, etcdtest.Options{Host: nt.Gateway})
	storeURL := "etcd://" + strings.Join(trimSchemes(etcd.Endpoints()), ",")
	upstream := func(answer string) string {
		ln, err := net.Listen("tcp", nt.Gateway+":0")
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, answer) }), ReadHeaderTimeout: 5 * time.Second}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
		return ln.Addr().String()
	}
	one, two := upstream("one"), upstream("two")

	// Hosts sharing a store seal secrets with one key (berth fleet join
	// hands it over; here h0's is copied).
	hosts := []*fleetHost{startFleetHost(t, nt.Hosts[0], "h0", etcd.Endpoints(), "--store", storeURL)}
	key, err := os.ReadFile(filepath.Join(hosts[0].dir, "data", "secret.key"))
	if err != nil {
		t.Fatal(err)
	}
	for i, ns := range nt.Hosts[1:] {
		h := newFleetHost(t, ns, fmt.Sprintf("h%d", i+1), etcd.Endpoints(), "--store", storeURL)
		if err := os.MkdirAll(filepath.Join(h.dir, "data"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(h.dir, "data", "secret.key"), key, 0o600); err != nil {
			t.Fatal(err)
		}
		h.start(t)
		hosts = append(hosts, h)
	}
	h0, h1, h2 := hosts[0], hosts[1], hosts[2]

	if code, b := h0.do(t, "POST", "/deployments", fmt.Sprintf(`{"id":"web","routes":[{"host":"web.test"}],"upstreams":["%s"]}`, one)); code != 201 {
		t.Fatalf("deployment through h0: %d %s", code, b)
	}
	for _, h := range hosts {
		waitUntil(t, h.id+" to route web.test to one", func() bool { code, b := h.get("web.test"); return code == 200 && b == "one" })
	}
	if code, b := h1.do(t, "PUT", "/deployments/web", fmt.Sprintf(`{"id":"web","routes":[{"host":"web.test"}],"upstreams":["%s"]}`, two)); code != 200 {
		t.Fatalf("PUT through h1: %d %s", code, b)
	}
	for _, h := range hosts {
		waitUntil(t, h.id+" to route web.test to two", func() bool { code, b := h.get("web.test"); return code == 200 && b == "two" })
	}

	// A token minted through h2 is good on h0, until h1 revokes it.
	code, b := h2.do(t, "POST", "/tokens", `{"name":"ci","admin":"admin","deployments":["*"]}`)
	var minted struct{ ID, Token string }
	if code != 201 || json.Unmarshal(b, &minted) != nil {
		t.Fatalf("token through h2: %d %s", code, b)
	}
	withToken := func(h *fleetHost) int {
		req, _ := http.NewRequest("GET", h.admin+"/deployments", nil)
		req.Header.Set("Authorization", "Bearer "+minted.Token)
		resp, err := h.client.Do(req)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	waitUntil(t, "h0 to accept h2's token", func() bool { return withToken(h0) == 200 })
	if code, b := h1.do(t, "DELETE", "/tokens/"+minted.ID, ""); code != 204 && code != 200 {
		t.Fatalf("revoke through h1: %d %s", code, b)
	}
	for _, h := range hosts {
		waitUntil(t, h.id+" to refuse the revoked token", func() bool { return withToken(h) == 401 })
	}

	// Computers are each host's own (no hop: the lists are not fanned out).
	if code, b := h0.do(t, "POST", "/computers", `{"id":"mine","backings":[{"kind":"process"}]}`); code != 201 {
		t.Fatalf("Computer on h0: %d %s", code, b)
	}
	if _, ok := h0.computers(t)["mine"]; !ok {
		t.Fatal("h0 does not list its own Computer")
	}
	if _, ok := h1.computers(t)["mine"]; ok {
		t.Fatal("h1 lists h0's Computer")
	}

	// kill -9 of h0 under load through h1 and h2: no request fails.
	var sent, failed atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, h := range []*fleetHost{h1, h2} {
		load(&wg, stop, func() {
			sent.Add(1)
			if code, b := h.get("web.test"); code != 200 || b != "two" {
				failed.Add(1)
				t.Errorf("through %s during the kill: %d %s", h.id, code, b)
			}
		})
	}
	for sent.Load() < 200 {
		time.Sleep(10 * time.Millisecond)
	}
	if nt.Hosts[0].KillAll() == 0 {
		t.Fatal("nothing ran in h0's namespace")
	}
	<-h0.done
	h0.cmd = nil
	at := sent.Load()
	for sent.Load() < at+500 {
		time.Sleep(10 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if failed.Load() != 0 {
		t.Fatalf("%d of %d requests failed while h0 was killed", failed.Load(), sent.Load())
	}

	// Deleted through h2 while h0 is down: h0 comes back without it.
	if code, b := h2.do(t, "DELETE", "/deployments/web", ""); code != 204 && code != 200 {
		t.Fatalf("DELETE through h2: %d %s", code, b)
	}
	h0.start(t)
	for _, h := range hosts {
		waitUntil(t, h.id+" to answer web.test as unknown", func() bool { code, _ := h.get("web.test"); return code == 404 })
	}
	if _, ok := h0.computers(t)["mine"]; !ok {
		t.Fatal("h0 lost its Computer across kill -9")
	}
}
