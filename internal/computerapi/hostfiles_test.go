package computerapi

import (
	"github.com/berth-dev/berth/apitype/computertype"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/berth-dev/berth/internal/auth"
	"github.com/berth-dev/berth/internal/computer"
	"github.com/berth-dev/berth/internal/grant"
)

// agentOnly hides the manager's Workspace, so that an API over it writes
// every file through the agent.
type agentOnly struct{ Manager }

// TestWriteBytesOnTheHost writes the same requests to a process-backed
// Computer through the host-side path and, through a second API that
// cannot use it, to a twin Computer through its agent, and wants the same
// answers, the same workspace and the same facts.
func TestWriteBytesOnTheHost(t *testing.T) {
	e := newEnv(t)
	viaAgent := New(Options{
		Manager: agentOnly{e.mgr},
		Grants:  e.grants,
		Gate:    auth.New(auth.Config{User: opUser, Password: opPass, Brake: auth.NewBrake(auth.BrakeConfig{Threshold: 1 << 20})}),
		Now:     e.clock.now,
	})
	srv := httptest.NewServer(viaAgent)
	t.Cleanup(srv.Close)
	ea := *e
	ea.srv = srv

	setup := "mkdir d dir && echo old > d/f.txt && chmod 0600 d/f.txt && ln -s / out && ln -s ../.. d/up && ln -s f.txt d/lnk"
	type side struct {
		e    *testEnv
		id   string
		g    cred
		host bool // the host-side path is expected
	}
	sides := []side{{e: e, id: "h", host: true}, {e: &ea, id: "a"}}
	for i := range sides {
		s := &sides[i]
		e.create(s.id)
		_, s.g = e.grant(s.id, grant.FilesWriteByte, grant.FilesList, grant.Bash)
		s.e.must(s.g, http.StatusOK, "POST", "/computers/"+s.id+"/bash", computertype.ExecRequest{Script: setup})
	}
	// Which path each API takes, now that both Computers run.
	for _, s := range sides {
		api := New(Options{Manager: s.e.mgr})
		if s.e == &ea {
			api = viaAgent
		}
		ws := api.hostWorkspace(t.Context(), s.id)
		if want := e.mgr.(*computer.Manager).Workspace(s.id); s.host && ws != want || !s.host && ws != "" {
			t.Fatalf("Computer %s: host workspace %q (host path expected: %v)", s.id, ws, s.host)
		}
	}

	for _, tc := range []struct {
		query string
		body  string
		want  int
	}{
		{"path=new.bin", "new", 200},
		{"path=/d/f.txt", "kept mode", 200},
		{"path=d/f.txt&mode=0640", "new mode", 200},
		{"path=d/f.txt&mode=0", "mode 0 keeps", 200},
		{"path=d/lnk", "replaces the link", 200},
		{"path=d/empty", "", 200},
		{"path=out/tmp/berth-escape", "x", 403},
		{"path=d/up/berth-escape", "x", 403},
		{"path=../x", "x", 403},
		{"path=missing/x", "x", 404},
		{"path=dir", "x", 409},
		{"path=d/f.txt/x", "x", 400},
		{"path=/", "x", 400},
		{"path=d/x&mode=999", "x", 400},
	} {
		var answers []string
		for _, s := range sides {
			code, b := s.e.do(s.g, "PUT", "/computers/"+s.id+"/files/writeBytes?"+tc.query, []byte(tc.body))
			if code != tc.want {
				t.Errorf("Computer %s: writeBytes?%s = %d %s, want %d", s.id, tc.query, code, b, tc.want)
			}
			answers = append(answers, strings.ReplaceAll(string(b), `"`+s.id+`"`, "ID"))
		}
		if answers[0] != answers[1] {
			t.Errorf("writeBytes?%s: on the host %s, through the agent %s", tc.query, answers[0], answers[1])
		}
	}

	var trees []string
	for _, s := range sides {
		trees = append(trees, workspaceState(t, e.mgr.(*computer.Manager).Workspace(s.id)))
	}
	if d := cmp.Diff(trees[1], trees[0]); d != "" {
		t.Errorf("the workspace written on the host differs from the one written through the agent (-agent +host):\n%s", d)
	}
	var facts [][]computer.Fact
	for _, s := range sides {
		fs := e.factsOfKind(s.id, computer.FactFilesWritten)
		for i := range fs {
			if fs[i].Provenance != (computer.Provenance{Actor: "agent-" + s.id, Via: "test"}) {
				t.Errorf("Computer %s: fact %+v does not carry the grant's provenance", s.id, fs[i])
			}
			fs[i].ComputerID, fs[i].Provenance = "", computer.Provenance{}
		}
		facts = append(facts, fs)
	}
	if len(facts[0]) != 6 {
		t.Errorf("%d files.written facts on the host path, want 6: %+v", len(facts[0]), facts[0])
	}
	if d := cmp.Diff(facts[1], facts[0]); d != "" {
		t.Errorf("files.written facts differ (-agent +host):\n%s", d)
	}
}

// workspaceState describes a workspace: names, types, modes, owners and
// contents. A Computer's sandbox owns its workspace (as root), so what the
// sandbox, the agent and berth make there must be the workspace owner's.
func workspaceState(t *testing.T, root string) string {
	t.Helper()
	var b strings.Builder
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		// The workspace's owner (each Computer's sandbox has a uid of its
		// own, as root) reads as "ws".
		own := owner(fi)
		if rfi, err := os.Lstat(root); err == nil && own == owner(rfi) {
			own = "ws"
		}
		b.WriteString(rel + " " + fi.Mode().String() + " " + own)
		if fi.Mode().IsRegular() {
			data, _ := os.ReadFile(p)
			b.WriteString(" " + string(data))
		}
		b.WriteString("\n")
		return nil
	})
	return b.String()
}

// owner is a file's uid:gid, where the system tells.
func owner(fi os.FileInfo) string {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return "?"
	}
	return strconv.FormatUint(uint64(st.Uid), 10) + ":" + strconv.FormatUint(uint64(st.Gid), 10)
}
