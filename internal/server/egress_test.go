package server

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berth-dev/berth/apitype/computertype"

	"github.com/berth-dev/berth/internal/computer"
)

// TestEgressWiring: berth serve runs the egress proxy, the Computer API
// points commands at it with the grant's credential, the proxy enforces
// the grant's policy and the platform deny set, and its refusals land in
// the Computer's facts with the grant's provenance. (Traffic that is let
// through is tested in package computerapi, where the proxy may reach
// loopback.)
func TestEgressWiring(t *testing.T) {
	h := start(t, "")
	if h.s.EgressAddr() == "" {
		t.Fatal("no egress proxy")
	}
	if r := h.json("POST", "/computers", `{"id":"eg1","backings":[{"kind":"process"}]}`); r.code != http.StatusCreated {
		t.Fatalf("create: %d %s", r.code, r.body)
	}
	// A policy that would allow a metadata address: the platform deny set
	// refuses it anyway.
	r := h.json("POST", "/computers/eg1/grants", `{"actions":["bash"],"expiresInSecs":600,"egress":{"allow":["*"]},"provenance":{"actor":"agent-w","via":"wiring"}}`)
	if r.code != http.StatusCreated {
		t.Fatalf("grant: %d %s", r.code, r.body)
	}
	var g computertype.Grant
	json.Unmarshal(r.body, &g)
	if r := h.json("POST", "/computers/eg1/grants", `{"actions":["bash"],"expiresInSecs":600,"egress":{"allow":["ftp://x"]}}`); r.code != http.StatusBadRequest || !strings.Contains(string(r.body), "egress.allow[0]") {
		t.Errorf("a bad policy: %d %s, want 400 naming egress.allow[0]", r.code, r.body)
	}
	// A Go-free client in the Computer: bash's /dev/tcp speaks to the
	// proxy named by $http_proxy, with the credential it carries.
	script := `
u=${http_proxy#http://}; cred=${u%@*}; hp=${u##*@}
exec 3<>/dev/tcp/${hp%:*}/${hp##*:}
printf 'GET http://169.254.169.254/latest/meta-data/ HTTP/1.1\r\nHost: 169.254.169.254\r\nProxy-Authorization: Basic %s\r\nConnection: close\r\n\r\n' "$(printf %s "$cred" | base64 -w0)" >&3
head -n1 <&3`
	body, _ := json.Marshal(map[string]string{"script": script})
	r = h.do("POST", "/computers/eg1/bash", "application/json", string(body), "Authorization", "Bearer "+g.Token)
	var res computertype.ExecResult
	json.Unmarshal(r.body, &res)
	if r.code != http.StatusOK || !strings.HasPrefix(res.Stdout, "HTTP/1.1 403") {
		t.Fatalf("metadata through the proxy: %d %s (stdout %q, stderr %q), want a 403 answer", r.code, r.body, res.Stdout, res.Stderr)
	}
	facts, err := h.s.computers.Facts(t.Context(), "eg1", 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var egress []computer.Fact
	for _, f := range facts {
		if f.Fact.Kind == computer.FactEgress {
			egress = append(egress, f.Fact)
		}
	}
	want := computer.Fact{Kind: computer.FactEgress, ComputerID: "eg1", Provenance: computer.Provenance{Actor: "agent-w", Via: "wiring"}, Host: "169.254.169.254", Method: "GET", Status: 403}
	if len(egress) != 1 || egress[0] != want {
		t.Errorf("egress facts %+v, want [%+v]", egress, want)
	}
}

// TestEgressPortKept: the egress proxy's default port is taken again by a
// restarted berth on the same data directory (the port lives on in the
// proxy variables of background processes), and a taken port is not fatal.
func TestEgressPortKept(t *testing.T) {
	dir := t.TempDir()
	a := startNode(t, Options{DataDir: dir})
	first := a.s.EgressAddr()
	if first == "" {
		t.Fatal("no egress proxy by default")
	}
	a.stop()
	b := startNode(t, Options{DataDir: dir})
	if got := b.s.EgressAddr(); got != first {
		t.Errorf("after a restart the egress proxy listens on %s, want %s", got, first)
	}
	// While b holds the port, another berth on a copy of the data
	// directory gets another port and remembers it.
	dir2 := t.TempDir()
	b2, err := os.ReadFile(filepath.Join(dir, egressPortFile))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir2, egressPortFile), b2, 0o600)
	c := startNode(t, Options{DataDir: dir2})
	if got := c.s.EgressAddr(); got == first || got == "" {
		t.Errorf("a second berth got %q while the first holds %s", got, first)
	}
}
