package cli

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// diskServer answers the disk routes like berth does, recording each
// request as "METHOD path?query body".
func diskServer(t *testing.T) (*fakeServer, func() []string) {
	var mu sync.Mutex
	var got []string
	record := func(r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, strings.TrimSpace(r.Method+" "+r.URL.RequestURI()+" "+string(b)))
		mu.Unlock()
	}
	inv := `{"complete":true,"data_dir":"/var/lib/berth","tmp_dir":"/var/lib/berth/disk-archives.tmp","ttl_secs":604800,"sweep_secs":3600,
		"archive_enabled":true,"archive_on_expire":false,"archive_target":"local","orphan_ttl_secs":86400,
		"totals":{"disks":2,"bytes":3145728,"apparent_bytes":9437184,"running":1,"stopped":0,"orphan":1,"retained":0,"expiring_now":1,"reclaimable_bytes":2097152},
		"disks":[
		 {"sandbox_id":"berth-web-000000000001","name":"web","deployment":"web","state":"running","claimed":true,"retain":false,"bytes":1048576,"apparent_bytes":1048576,"modified_at":1767323045,"held_by":"in use by a running sandbox","parts":[],"roots":["replicas/berth-web-000000000001"]},
		 {"sandbox_id":"berth-gone-000000000002","name":"gone","deployment":"gone","state":"orphan","claimed":false,"retain":false,"bytes":2097152,"apparent_bytes":8388608,"modified_at":1767323045,"expires_at":1767409445,"parts":[],"roots":["replicas/berth-gone-000000000002"]}],
		"archives":[]}`
	outcome := `{"removed":["berth-gone-000000000002"],"failed":[],"freed_bytes":2097152}`
	mux := http.NewServeMux()
	mux.HandleFunc("GET /disks", func(w http.ResponseWriter, r *http.Request) { record(r); writeJSON(w, 200, inv) })
	mux.HandleFunc("PATCH /disks/{id}", func(w http.ResponseWriter, r *http.Request) { record(r); w.WriteHeader(204) })
	mux.HandleFunc("DELETE /disks/{id}", func(w http.ResponseWriter, r *http.Request) {
		record(r)
		if r.PathValue("id") == "berth-web-000000000001" && r.URL.Query().Get("force") != "true" {
			writeJSON(w, 409, errJSON(`disk "berth-web-000000000001" is in use by a running sandbox; pass force=true to stop its sandbox and remove it`))
			return
		}
		writeJSON(w, 200, outcome)
	})
	mux.HandleFunc("POST /disks/purge-orphans", func(w http.ResponseWriter, r *http.Request) { record(r); writeJSON(w, 200, outcome) })
	mux.HandleFunc("POST /disks/{id}/archive", func(w http.ResponseWriter, r *http.Request) {
		record(r)
		writeJSON(w, 202, `{"id":"dar_1","sandbox_id":"`+r.PathValue("id")+`","uri":"","started_at":1767323045,"status":"running","bytes":0,"expected_bytes":8388608}`)
	})
	srv := &fakeServer{Server: httptest.NewServer(mux), t: t}
	t.Cleanup(srv.Close)
	return srv, func() []string {
		mu.Lock()
		defer mu.Unlock()
		out := got
		got = nil
		return out
	}
}

func TestDiskCommands(t *testing.T) {
	srv, sent := diskServer(t)
	r := run(t, srv, "", "get", "disks")
	if r.code != 0 || !strings.Contains(r.stdout, "SANDBOX") || !strings.Contains(r.stdout, "orphan    gone (gone)") ||
		!strings.Contains(r.stdout, "gone (gone)") || !strings.Contains(r.stdout, "2 disks, 3.0 MiB") {
		t.Errorf("get disks: %d %q %q", r.code, r.stdout, r.stderr)
	}
	if r = run(t, srv, "", "get", "disk", "berth-web-000000000001", "-o", "json"); r.code != 0 || !strings.Contains(r.stdout, `"held_by": "in use by a running sandbox"`) || strings.Contains(r.stdout, "berth-gone") {
		t.Errorf("get disk ID -o json: %d %q %q", r.code, r.stdout, r.stderr)
	}
	if r = run(t, srv, "", "get", "disks", "-o", "name"); r.code != 0 || r.stdout != "disk/berth-web-000000000001\ndisk/berth-gone-000000000002\n" {
		t.Errorf("get disks -o name: %d %q %q", r.code, r.stdout, r.stderr)
	}
	sent()
	for _, c := range []struct {
		args []string
		code int
		out  string
		req  string
	}{
		{[]string{"disk", "retain", "berth-gone-000000000002", "--note", "postmortem"}, 0, "disk/berth-gone-000000000002 retained", `PATCH /disks/berth-gone-000000000002 {"retain":true,"note":"postmortem"}`},
		{[]string{"disk", "retain", "berth-gone-000000000002"}, 0, "retained", `PATCH /disks/berth-gone-000000000002 {"retain":true}`},
		{[]string{"disk", "release", "berth-gone-000000000002"}, 0, "released", `PATCH /disks/berth-gone-000000000002 {"retain":false}`},
		{[]string{"disk", "purge", "berth-gone-000000000002"}, 0, "1 removed, 2.0 MiB freed", `DELETE /disks/berth-gone-000000000002`},
		{[]string{"disk", "purge", "berth-web-000000000001"}, exitFailed, "add --force", `DELETE /disks/berth-web-000000000001`},
		{[]string{"disk", "purge", "--force", "berth-web-000000000001"}, 0, "removed", `DELETE /disks/berth-web-000000000001?force=true`},
		{[]string{"disk", "purge", "--orphans"}, 0, "disk/berth-gone-000000000002 removed", `POST /disks/purge-orphans {}`},
		{[]string{"disk", "archive", "berth-gone-000000000002"}, 0, "archiving as dar_1", `POST /disks/berth-gone-000000000002/archive {"purge":false}`},
	} {
		r := run(t, srv, "", c.args...)
		if r.code != c.code || !strings.Contains(r.stdout+r.stderr, c.out) {
			t.Errorf("%v: %d %q %q, want %d and %q", c.args, r.code, r.stdout, r.stderr, c.code, c.out)
		}
		if got := sent(); len(got) != 1 || got[0] != c.req {
			t.Errorf("%v sent %q, want %q", c.args, got, c.req)
		}
	}
	for _, args := range [][]string{{"disk"}, {"disk", "frob"}, {"disk", "purge"}, {"disk", "purge", "--orphans", "x"}, {"disk", "retain"}, {"disk", "archive", "a", "b"}} {
		if r := run(t, srv, "", args...); r.code != exitUsage {
			t.Errorf("%v: exit %d, want %d", args, r.code, exitUsage)
		}
		if got := sent(); len(got) != 0 {
			t.Errorf("%v sent %q", args, got)
		}
	}
}
