package server

import (
	"fmt"
	"strings"
	"testing"
)

// TestPortHostNotTakeable: a Computer's exposed-port host cannot be taken
// by a deployment rule (issue 9): an exact rule naming one, or a
// deployment whose automatic host would be one, is 409; a catch-all path
// rule or a host_suffix over the port domain does not shadow the port.
func TestPortHostNotTakeable(t *testing.T) {
	h := start(t, "")
	if r := h.json("POST", "/computers", `{"id":"box","backings":[{"kind":"process"}]}`); r.code != 201 {
		t.Fatalf("create: %d %s", r.code, r.body)
	}
	port := freePort(t)
	body := fmt.Sprintf(`{"argv":["/bin/sh","-c",%q],"env":{"PORT":"%d"}}`, appCommand(), port)
	if r := h.json("POST", "/computers/box/processes", body); r.code != 201 && r.code != 200 {
		t.Fatalf("process start: %d %s", r.code, r.body)
	}
	if r := h.json("POST", "/computers/box/ports", fmt.Sprintf(`{"port":%d,"public":true}`, port)); r.code >= 300 {
		t.Fatalf("expose: %d %s", r.code, r.body)
	}
	host := fmt.Sprintf("%d-box.localhost", port)
	thief := addr(backend(t, "thief"))
	for _, routes := range []string{
		fmt.Sprintf(`[{"host":%q}]`, host),
		fmt.Sprintf(`[{"host":%q,"path_prefix":"/x"}]`, host),
		fmt.Sprintf(`[{"host":"%d-other.localhost"}]`, port), // not exposed (yet): reserved all the same
	} {
		if r := h.json("POST", "/deployments", staticBody("thief", "", routes, thief)); r.code != 409 || !strings.Contains(errMsg(t, r), "Computer") {
			t.Errorf("routes %s: %d %s, want 409", routes, r.code, r.body)
		}
	}
	// Catch-alls do not shadow the port.
	for _, spec := range []string{
		staticBody("catchall", "", `[{"path_prefix":"/"}]`, thief),
		staticBody("suffix", "", `[{"host_suffix":"localhost"}]`, thief),
	} {
		if r := h.json("POST", "/deployments", spec); r.code != 201 {
			t.Fatalf("POST %s: %d %s", spec, r.code, r.body)
		}
	}
	waitFor(t, "the port to answer through the gateway", func() bool {
		return get(t, h.proxy+"/x", host).code == 200
	})
	if r := get(t, h.proxy+"/x", host); !strings.HasPrefix(string(r.body), "app ") {
		t.Errorf("port host: %d %q, want the Computer's app", r.code, r.body)
	}
	if r := get(t, h.proxy+"/x", "elsewhere.localhost"); !strings.HasPrefix(string(r.body), "thief ") {
		t.Errorf("other hosts still routed: %d %q", r.code, r.body)
	}
	h.do("DELETE", "/computers/box", "", "")
}
